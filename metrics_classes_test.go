package tollgate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// TestMetricsClassesRestrictTheEndpoint: a serveMetrics middleware showed
// every class's series to whoever its router lets through; with
// metricsClasses it shows those classes' series alone, and nothing of the
// process (deny caches, Redis, regions). Without it nothing changes.
func TestMetricsClassesRestrictTheEndpoint(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000 4 0 1000\r\n") // two buckets: the top level and login
	mine, other := uniqueName("tenant-a"), uniqueName("tenant-b")
	for _, class := range []string{mine, other} {
		class := class
		var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) {
			c.Class = class
			c.Rules = []config.Rule{{Name: "login", PathPrefix: "/", Average: 5}}
		})
		if rec := serve(h, "k"); rec.Code != 200 {
			t.Fatalf("%s: %d", class, rec.Code)
		}
	}
	has := func(m map[string]float64, class string) bool {
		for s := range m {
			if strings.Contains(s, `class="`+class+`"`) {
				return true
			}
		}
		return false
	}
	all := scrape(t)
	if !has(all, mine) || !has(all, other) {
		t.Fatalf("the default endpoint: %s %t, %s %t; want every class", mine, has(all, mine), other, has(all, other))
	}
	if _, ok := all["tollgate_deny_cache_entries"]; !ok {
		t.Fatal("the default endpoint: no tollgate_deny_cache_entries")
	}
	// A list as Docker labels give it, spaces and all.
	m := scrapeWith(t, func(c *config.Config) { c.MetricsClasses = []string{" " + mine, "absent-class"} })
	for s, want := range map[string]float64{
		requests(mine, mine, "redis", "allowed"):                         1,
		`tollgate_near_limit_total{class="` + mine + `",policy="login"}`: 0,
	} {
		if got, ok := m[s]; !ok || got != want {
			t.Errorf("%s = %v (present %t), want %v", s, got, ok, want)
		}
	}
	if has(m, other) {
		t.Errorf("restricted to %s: %s's series are served", mine, other)
	}
	for s := range m {
		if !strings.Contains(s, `class="`+mine+`"`) {
			t.Errorf("restricted to %s: %s served", mine, s)
		}
	}
}

func TestMetricsClassesValidated(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		metrics bool
		classes []string
		err     string
	}{
		{"on a limiter", false, []string{"api"}, "metricsClasses: set, but serveMetrics is not"},
		{"a bad name", true, []string{"api", "a b"}, `metricsClasses[1]: "a b" may hold only`},
		{"an empty name", true, []string{""}, "metricsClasses[0]: a name is required"},
		{"valid", true, []string{"api", "web"}, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := CreateConfig()
			cfg.ServeMetrics = tc.metrics
			if !tc.metrics {
				cfg.Average = 1
			}
			cfg.MetricsClasses = tc.classes
			_, err := New(nil, http.NotFoundHandler(), cfg, "m")
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("New: %v, want %q", err, tc.err)
			}
		})
	}
}
