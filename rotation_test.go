package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestOneSlash64SharesOneBucket: the addresses of one IPv6 /64 are one
// client by default, so rotating them gains nothing (decided by the local
// fallback, Redis down, whose buckets are exact).
func TestOneSlash64SharesOneBucket(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("slash64")
		c.Average, c.Period, c.Burst = 5, "1h", 5
		c.SourceCriterion = nil // the connection's address
	})
	admitted := 0
	for i := 1; i <= 100; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = fmt.Sprintf("[2001:db8:1:2::%x]:4711", i)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == 200 {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("100 addresses of one /64: %d admitted, want 5 (one bucket)", admitted)
	}
}

// TestKeylessRequestsAreKeyedByTheirIP: behind a proxy, requests without
// the key header are keyed by their client IP under the IP strategy, not
// by the proxy's address.
func TestKeylessRequestsAreKeyedByTheirIP(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("keyless")
		c.Average, c.Period, c.Burst = 1, "1h", 1
		c.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &config.IPStrategy{Depth: 1}}
	})
	for i := 1; i <= 3; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.0.0.1:4711" // the proxy
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("key-less client %d behind the proxy: %d, want 200 (a bucket of its own)", i, rec.Code)
		}
	}
}

// TestRuleMethods: methods match case-insensitively, and a GET rule
// covers HEAD.
func TestRuleMethods(t *testing.T) {
	tg := handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Rules = []config.Rule{{Name: "reads", Average: 1, Methods: []string{"get"}}, {Name: "writes", Average: 1, Methods: []string{"POST"}}}
	})
	for _, tc := range []struct {
		method string
		want   string
	}{{"GET", "reads"}, {"HEAD", "reads"}, {"get", "reads"}, {"post", "writes"}, {"PUT", ""}} {
		set := tg.policiesFor(httptest.NewRequest(tc.method, "/", nil))
		got := ""
		if set != nil && len(set.ps) > 1 {
			got = set.ps[1].Name
		}
		if got != tc.want {
			t.Errorf("%s: rule %q, want %q", tc.method, got, tc.want)
		}
	}
}

// TestSanitisedClassesDoNotCollide: two middleware names that become one
// class are refused, naming both; the same name again (another router, a
// reload) is not.
func TestSanitisedClassesDoNotCollide(t *testing.T) {
	long := uniqueName("m") + strings.Repeat("x", 80)
	cfg := CreateConfig()
	cfg.Average = 1
	cfg.Redis.Endpoints = []string{"127.0.0.1:1"}
	if _, err := New(nil, http.NotFoundHandler(), cfg, long+"-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, http.NotFoundHandler(), cfg, long+"-a"); err != nil {
		t.Fatalf("the same name again: %v", err)
	}
	_, err := New(nil, http.NotFoundHandler(), cfg, long+"-b")
	if err == nil || !strings.Contains(err.Error(), long+"-a") || !strings.Contains(err.Error(), long+"-b") {
		t.Fatalf("two names, one class: %v, want an error naming both", err)
	}
	cfg.Class = "explicit-" + uniqueName("c")
	if _, err := New(nil, http.NotFoundHandler(), cfg, long+"-c"); err != nil {
		t.Fatalf("an explicit class: %v", err)
	}
}
