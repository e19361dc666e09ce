package tollgate

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		sc      *SourceCriterion
		remote  string
		headers map[string]string
		host    string
		want    string
	}{
		{desc: "default: connection address", remote: "203.0.113.7:4711", want: "ip:203.0.113.7"},
		{desc: "header", sc: &SourceCriterion{RequestHeaderName: "x-api-key"}, headers: map[string]string{"X-Api-Key": "k1"}, want: "h:k1"},
		{desc: "header absent: client IP", sc: &SourceCriterion{RequestHeaderName: "X-API-Key"}, remote: "203.0.113.7:1", want: "ip:203.0.113.7"},
		{desc: "host", sc: &SourceCriterion{RequestHost: true}, host: "api.example.com", want: "host:api.example.com"},
		{desc: "depth 1 is the rightmost X-Forwarded-For", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 1}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2"}, want: "ip:198.51.100.2"},
		{desc: "depth 2", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 2}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 198.51.100.2"}, want: "ip:198.51.100.1"},
		{desc: "depth beyond the list: connection address", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 5}},
			remote: "203.0.113.9:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.1"}, want: "ip:203.0.113.9"},
		{desc: "excluded IPs are skipped from the right", sc: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.0/8", "198.51.100.3"}}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, 10.1.2.3, 198.51.100.3"}, want: "ip:198.51.100.1"},
		{desc: "ipv6 subnet groups a /64", sc: &SourceCriterion{IPStrategy: &IPStrategy{IPv6Subnet: 64}},
			remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2::"},
		{desc: "ipv6 subnet leaves IPv4 alone", sc: &SourceCriterion{IPStrategy: &IPStrategy{IPv6Subnet: 64}},
			remote: "203.0.113.7:1", want: "ip:203.0.113.7"},
		{desc: "ipv6 grouped by /64 by default", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2::"},
		{desc: "ipv6Subnet 128 keys each address", sc: &SourceCriterion{IPStrategy: &IPStrategy{IPv6Subnet: 128}},
			remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2:3:4:5:6"},
		{desc: "an IPv4-mapped address is IPv4", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 1}},
			headers: map[string]string{"X-Forwarded-For": "::ffff:198.51.100.1"}, want: "ip:198.51.100.1"},
		{desc: "addresses are canonical", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 1, IPv6Subnet: 128}},
			headers: map[string]string{"X-Forwarded-For": "2001:DB8:0:0::1"}, want: "ip:2001:db8::1"},
		{desc: "an entry that is not an IP is skipped like an excluded one", sc: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}},
			headers: map[string]string{"X-Forwarded-For": "198.51.100.1, not-an-ip, 10.1.2.3"}, want: "ip:198.51.100.1"},
		{desc: "depth on an entry that is not an IP: connection address", sc: &SourceCriterion{IPStrategy: &IPStrategy{Depth: 1}},
			remote: "203.0.113.9:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.1, not-an-ip"}, want: "ip:203.0.113.9"},
		{desc: "header absent: client IP by the IP strategy", sc: &SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &IPStrategy{Depth: 1}},
			remote: "10.0.0.1:1", headers: map[string]string{"X-Forwarded-For": "198.51.100.7"}, want: "ip:198.51.100.7"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := compileSource(tc.sc)
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
			if got := s.identity(req); got != tc.want {
				t.Fatalf("identity = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	a := clientKey("api", "h:"+strings.Repeat("k", 100000))
	if len(a) != 14 || !strings.HasPrefix(a, "tg{") || !strings.HasSuffix(a, "}") {
		t.Fatalf("clientKey = %q: want tg{10 chars} (14 bytes) whatever the identity's size", a)
	}
	if strings.Contains(clientKey("api", "h:secret-key"), "secret") {
		t.Fatal("the identity appears in the key")
	}
	if clientKey("api", "h:k") == clientKey("other", "h:k") {
		t.Fatal("two classes share a key")
	}
	if clientKey("api", "h:1.2.3.4") == clientKey("api", "ip:1.2.3.4") {
		t.Fatal("a header value collides with an address")
	}
}

// TestHeaderLinesAreOneIdentity: several lines of the key header are one
// identity, the lines joined as HTTP joins them, so a client can neither
// pick the line that is keyed nor dodge its key by adding a line.
func TestHeaderLinesAreOneIdentity(t *testing.T) {
	s, err := compileSource(&SourceCriterion{RequestHeaderName: "X-API-Key"})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Add("X-API-Key", "k1")
	req.Header.Add("X-API-Key", "k2")
	one := httptest.NewRequest("GET", "/", nil)
	one.Header.Set("X-API-Key", "k1, k2")
	if got, want := s.identity(req), s.identity(one); got != want || got != "h:k1, k2" {
		t.Fatalf("two lines: %q, one line with both: %q; want both h:k1, k2", got, want)
	}
}

func TestSourceCriterionCombinations(t *testing.T) {
	if _, err := compileSource(&SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &IPStrategy{Depth: 1}}); err != nil {
		t.Fatalf("a header with an IP strategy for requests without it: %v", err)
	}
	for _, sc := range []*SourceCriterion{
		{RequestHost: true, RequestHeaderName: "X-API-Key"},
		{RequestHost: true, IPStrategy: &IPStrategy{}},
	} {
		if _, err := compileSource(sc); err == nil {
			t.Fatalf("%+v: accepted, want requestHost alone", sc)
		}
	}
}
