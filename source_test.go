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
