package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// request builds a request with the given headers (name, value pairs).
func request(method, path string, headers ...string) *http.Request {
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return req
}

// admitted serves n requests with the given headers (name, value pairs;
// a value holding %d is formatted with the request's number) and counts
// the 200s. (No closures: Yaegi mixes up the variables of closures made in
// a loop.)
func admitted(h http.Handler, n int, method, path string, headers ...string) int {
	ok := 0
	for i := 0; i < n; i++ {
		req := httptest.NewRequest(method, path, nil)
		for j := 0; j+1 < len(headers); j += 2 {
			v := headers[j+1]
			if strings.Contains(v, "%d") {
				v = fmt.Sprintf(v, i)
			}
			req.Header.Add(headers[j], v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == 200 {
			ok++
		}
	}
	return ok
}

func plansConfig(class string) func(*config.Config) {
	return func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 1, "1m", 1 // the top level: for no plan at all
		c.PlanHeader = "X-Plan"
		c.DefaultPlan = "free"
		c.Plans = []config.Plan{
			{Name: "free", Average: 2, Period: "1m", Burst: 2},
			{Name: "pro", Average: 4, Period: "1m", Burst: 4},
			{Name: "internal", Unlimited: true},
		}
		c.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 1, Period: "1m", Burst: 1}}
	}
}

// TestPlansReplaceTheTopLevelLimit: a plan's limit replaces the top
// level's for its clients; an unknown, missing or repeated plan value is
// the default plan; an unlimited plan passes with no headers of its own;
// rules still apply. Decided by the local fallback (Redis down), exact.
func TestPlansReplaceTheTopLevelLimit(t *testing.T) {
	class := uniqueName("plans")
	var h http.Handler = handlerOn(t, "127.0.0.1:1", plansConfig(class))
	for _, tc := range []struct {
		desc    string
		headers []string
		want    int
	}{
		{"pro", []string{"X-Plan", "pro"}, 4},
		{"free", []string{"X-Plan", "free"}, 2},
		{"unknown plan: the default", []string{"X-Plan", "platinum"}, 2},
		{"no plan: the default", nil, 2},
		{"two plan lines: the default", []string{"X-Plan", "internal", "X-Plan", "pro"}, 2},
		{"unlimited", []string{"X-Plan", "internal"}, 20},
	} {
		got := admitted(h, 20, "GET", "/", append([]string{"X-API-Key", uniqueName("client")}, tc.headers...)...)
		if got != tc.want {
			t.Errorf("%s: %d of 20 admitted, want %d", tc.desc, got, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("GET", "/", "X-API-Key", uniqueName("k"), "X-Plan", "pro"))
	if got := rec.Header().Get("RateLimit-Policy"); got != `"pro";q=4;w=60` {
		t.Errorf("RateLimit-Policy %q, want the plan's", got)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, request("GET", "/", "X-API-Key", uniqueName("k"), "X-Plan", "internal"))
	if got := rec.Header().Values("RateLimit-Policy"); len(got) != 0 {
		t.Errorf("unlimited: RateLimit-Policy %q, want none", got)
	}
	if got := admitted(h, 5, "POST", "/login", "X-API-Key", uniqueName("client"), "X-Plan", "internal"); got != 1 {
		t.Errorf("an unlimited plan's login: %d of 5 admitted, want the rule's 1", got)
	}
}

// TestPlanChangeMovesToItsBucket: each plan has a bucket of its own per
// client: a client upgraded from free (its 2 spent) starts pro full, and
// back on free finds free as it left it.
func TestPlanChangeMovesToItsBucket(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", plansConfig(uniqueName("planchange")))
	key := uniqueName("client")
	if got := admitted(h, 5, "GET", "/", "X-API-Key", key, "X-Plan", "free"); got != 2 {
		t.Fatalf("free: %d, want 2", got)
	}
	if got := admitted(h, 5, "GET", "/", "X-API-Key", key, "X-Plan", "pro"); got != 4 {
		t.Fatalf("then pro: %d, want pro's full 4", got)
	}
	if got := admitted(h, 5, "GET", "/", "X-API-Key", key, "X-Plan", "free"); got != 0 {
		t.Fatalf("back on free: %d, want 0 (free's bucket as it was left)", got)
	}
}

// TestExemptSourceRange: clients in an exempt range pass untouched, with
// no headers; others are limited.
func TestExemptSourceRange(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("exempt")
		c.Average, c.Period, c.Burst = 1, "1m", 1
		c.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key", IPStrategy: &config.IPStrategy{Depth: 1}}
		c.ExemptSourceRange = []string{"10.0.0.0/8", "2001:db8::/32"}
	})
	for _, tc := range []struct {
		xff  string
		want int
	}{{"10.1.2.3", 10}, {"2001:db8:ffff::1", 10}, {"198.51.100.1", 1}, {"::ffff:10.9.9.9", 10}} {
		got := admitted(h, 10, "GET", "/", "X-API-Key", uniqueName("k"), "X-Forwarded-For", tc.xff)
		if got != tc.want {
			t.Errorf("from %s: %d of 10 admitted, want %d", tc.xff, got, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("GET", "/", "X-API-Key", "x", "X-Forwarded-For", "10.0.0.1"))
	if len(rec.Header()) != 0 {
		t.Errorf("an exempt request got headers: %v", rec.Header())
	}
}

// TestLoginKeyedByIPHoldsFreshAPIKeys: a login rule keyed by IP while the
// top level keys by API key: 50 logins with a fresh API key each from one
// IP get the rule's 5 through, another IP its own 5; decided by a real
// Redis (one script over both keys) and by the local fallback.
func TestLoginKeyedByIPHoldsFreshAPIKeys(t *testing.T) {
	for _, tc := range []struct {
		desc string
		addr func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return redistest.Start(t) }},
		{"local fallback", func(_ *testing.T) string { return "127.0.0.1:1" }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var h http.Handler = handlerOn(t, tc.addr(t), func(c *config.Config) {
				c.Class = uniqueName("login")
				c.Average, c.Period, c.Burst = 100, "1m", 100
				c.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
				c.Redis.Timeout = "1s"
				c.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Methods: []string{"POST"}, Average: 5, Period: "1m", Burst: 5,
					FailureMode: "closed", SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}}}
				if tc.desc != "redis" {
					c.Rules[0].FailureMode = "open" // the fallback decides
				}
			})
			for _, ip := range []string{"198.51.100.7", "198.51.100.8"} {
				got := admitted(h, 50, "POST", "/login", "X-API-Key", "fresh-"+ip+"-%d", "X-Forwarded-For", ip)
				if got != 5 {
					t.Errorf("50 logins from %s with fresh API keys: %d admitted, want 5", ip, got)
				}
			}
			if got := admitted(h, 3, "GET", "/", "X-API-Key", uniqueName("steady"), "X-Forwarded-For", "198.51.100.7"); got != 3 {
				t.Errorf("that IP's other requests: %d of 3, want 3 (the login rule keys only logins)", got)
			}
		})
	}
}

// TestPlansWithoutDefaultRefused: with plans, no defaultPlan and no
// top-level average, a request whose plan header is missing, repeated or
// names no plan was not limited at all: anyone could send a bogus plan.
// New refuses that configuration, naming the fields that fix it; either
// one makes it valid.
func TestPlansWithoutDefaultRefused(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		average int64
		def     string
		err     string
	}{
		{desc: "neither", err: "set defaultPlan (e.g. the lowest plan, or an unlimited one to say so) or a top-level average"},
		{desc: "a default plan", def: "free"},
		{desc: "a top-level average", average: 10},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := CreateConfig()
			cfg.Average, cfg.PlanHeader, cfg.DefaultPlan = tc.average, "X-Plan", tc.def
			cfg.Plans = []config.Plan{{Name: "free", Average: 5}, {Name: "internal", Unlimited: true}}
			_, err := config.Compile(cfg, "api@file")
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), "plans: ") || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("compile: %v, want %q", err, tc.err)
			}
		})
	}
}
