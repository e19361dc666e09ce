package tollgate

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		sc      *config.SourceCriterion
		remote  string
		headers map[string]string
		host    string
		want    string
	}{
		{desc: "default: connection address", remote: "203.0.113.7:4711", want: "ip:203.0.113.7"},
		{desc: "header", sc: &config.SourceCriterion{RequestHeaderName: "x-api-key"}, headers: map[string]string{"X-Api-Key": "k1"}, want: "h:k1"},
		{desc: "header absent: client IP", sc: &config.SourceCriterion{RequestHeaderName: "X-API-Key"}, remote: "203.0.113.7:1", want: "ip:203.0.113.7"},
		{desc: "host", sc: &config.SourceCriterion{RequestHost: true}, host: "api.example.com", want: "host:api.example.com"},
		{desc: "depth 1 is the rightmost X-Forwarded-For", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2"}, want: "ip:198.51.100.2"},
		{desc: "depth 2", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 2}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2"}, want: "ip:198.51.100.1"},
		{desc: "depth beyond the list: connection address", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 5}},
			remote: "203.0.113.9:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.1"}, want: "ip:203.0.113.9"},
		{desc: "excluded IPs are skipped from the right", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{ExcludedIPs: []string{"10.0.0.0/8", "198.51.100.3"}}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 10.1.2.3, 198.51.100.3"}, want: "ip:198.51.100.1"},
		{desc: "ipv6 subnet groups a /64", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{IPv6Subnet: 64}},
			remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2::"},
		{desc: "ipv6 subnet leaves IPv4 alone", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{IPv6Subnet: 64}},
			remote: "203.0.113.7:1", want: "ip:203.0.113.7"},
		{desc: "ipv6 grouped by /64 by default", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2::"},
		{desc: "ipv6Subnet 128 keys each address", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{IPv6Subnet: 128}},
			remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2:3:4:5:6"},
		{desc: "an IPv4-mapped address is IPv4", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}},
			headers: map[string]string{"X-Forwarded-For": "::ffff:198.51.100.1"}, want: "ip:198.51.100.1"},
		{desc: "addresses are canonical", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1, IPv6Subnet: 128}},
			headers: map[string]string{"X-Forwarded-For": "2001:DB8:0:0::1"}, want: "ip:2001:db8::1"},
		{desc: "an entry that is not an IP is skipped like an excluded one", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, not-an-ip, 10.1.2.3"}, want: "ip:198.51.100.1"},
		{desc: "depth on an entry that is not an IP: connection address", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}},
			remote: "203.0.113.9:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.1, not-an-ip"}, want: "ip:203.0.113.9"},
		{desc: "an entry with a port", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.7:4711"}, want: "ip:198.51.100.7"},
		{desc: "a bracketed IPv6 entry with a port", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1, IPv6Subnet: 128}},
			headers: map[string]string{"X-Forwarded-For": "[2001:db8::7]:443"}, want: "ip:2001:db8::7"},
		{desc: "excluded IPs: the proxy's entry with a port is the client", sc: &config.SourceCriterion{IPStrategy: &config.IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}},
			headers: map[string]string{"X-Forwarded-For": "203.0.113.66, 198.51.100.7:4711"}, want: "ip:198.51.100.7"},
		{desc: "header absent: client IP by the IP strategy", sc: &config.SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &config.IPStrategy{Depth: 1}},
			remote: "10.0.0.1:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.7"}, want: "ip:198.51.100.7"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := config.CompileSource(tc.sc)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/", nil)
			if tc.remote != "" {
				req.RemoteAddr = tc.remote
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			if got := identity(&s, req); got != tc.want {
				t.Fatalf("identity = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	a := bucket.ClientKey("api", "h:"+strings.Repeat("k", 100000))
	if len(a) != 14 || !strings.HasPrefix(a, "tg{") || !strings.HasSuffix(a, "}") {
		t.Fatalf("ClientKey = %q: want tg{10 chars} (14 bytes) whatever the identity's size", a)
	}
	if strings.Contains(bucket.ClientKey("api", "h:secret-key"), "secret") {
		t.Fatal("the identity appears in the key")
	}
	if bucket.ClientKey("api", "h:k") == bucket.ClientKey("other", "h:k") {
		t.Fatal("two classes share a key")
	}
	if bucket.ClientKey("api", "h:1.2.3.4") == bucket.ClientKey("api", "ip:1.2.3.4") {
		t.Fatal("a header value collides with an address")
	}
}

// TestTheFirstKeyLineIsKeyed: of several lines of the key header the
// first is keyed, as Header.Get and most backends read it: lines added
// after it change nothing, so a client cannot get a fresh bucket per junk
// line while its backend still authenticates the first (an earlier version
// joined all lines: a review's finding). An empty first line is no key.
func TestTheFirstKeyLineIsKeyed(t *testing.T) {
	s, err := config.CompileSource(&config.SourceCriterion{RequestHeaderName: "X-API-Key"})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Add("X-API-Key", "k1")
	req.Header.Add("X-API-Key", "junk")
	if got := identity(&s, req); got != "h:k1" {
		t.Fatalf("two lines: %q, want the first, h:k1", got)
	}
	empty := httptest.NewRequest("GET", "/", nil)
	empty.RemoteAddr = "203.0.113.7:1"
	empty.Header.Add("X-API-Key", "")
	empty.Header.Add("X-API-Key", "k2")
	if got := identity(&s, empty); got != "ip:203.0.113.7" {
		t.Fatalf("an empty first line: %q, want the client IP", got)
	}
}

func TestSourceCriterionCombinations(t *testing.T) {
	if _, err := config.CompileSource(&config.SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &config.IPStrategy{Depth: 1}}); err != nil {
		t.Fatalf("a header with an IP strategy for requests without it: %v", err)
	}
	for _, sc := range []*config.SourceCriterion{
		{RequestHost: true, RequestHeaderName: "X-API-Key"},
		{RequestHost: true, IPStrategy: &config.IPStrategy{}},
	} {
		if _, err := config.CompileSource(sc); err == nil {
			t.Fatalf("%+v: accepted, want requestHost alone", sc)
		}
	}
}
