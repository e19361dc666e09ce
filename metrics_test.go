package tollgate

import (
	"bufio"
	"bytes"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// The metrics are process-wide: each test names its own class (and Redis
// name), so that other tests' requests do not show in its series.
var metricsSeq int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, atomic.AddInt64(&metricsSeq, 1))
}

// scrape returns the metrics a serveMetrics middleware serves, by series
// (name and labels as written) and value.
func scrape(t *testing.T) map[string]float64 {
	t.Helper()
	return scrapeWith(t, nil)
}

// scrapeWith is scrape from an endpoint configured by mutate.
func scrapeWith(t *testing.T, mutate func(*config.Config)) map[string]float64 {
	t.Helper()
	cfg := CreateConfig()
	cfg.ServeMetrics = true
	if mutate != nil {
		mutate(cfg)
	}
	h, err := New(nil, nil, cfg, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(rec.Body.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if _, dup := out[line[:i]]; dup {
			t.Fatalf("series %q twice", line[:i])
		}
		out[line[:i]] = v
	}
	return out
}

func requests(class, policy, decision, result string) string {
	return `tollgate_requests_total{class="` + class + `",policy="` + policy + `",decision="` + decision + `",result="` + result + `"}`
}

func TestMetricsCountEachRequestOnce(t *testing.T) {
	admit := redistest.StartFake(t, "+1 0 0 1000\r\n")    // admitted, no token left: near the limit
	refuse := redistest.StartFake(t, "+0 0 500 1000\r\n") // refused, 500 ms to wait
	class := uniqueName("count")
	var h http.Handler = handlerOn(t, admit.Addr(), func(c *config.Config) { c.Class = class })
	for i := 0; i < 3; i++ {
		if rec := serve(h, "a"); rec.Code != 200 {
			t.Fatalf("admitted: %d", rec.Code)
		}
	}
	h = handlerOn(t, refuse.Addr(), func(c *config.Config) { c.Class = class })
	for i := 0; i < 2; i++ {
		if rec := serve(h, fmt.Sprint("r", i)); rec.Code != 429 {
			t.Fatalf("refused: %d", rec.Code)
		}
	}
	if rec := serve(h, "r0"); rec.Code != 429 { // from the deny cache
		t.Fatalf("refused again: %d", rec.Code)
	}
	h = handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Class = class })
	if rec := serve(h, "l"); rec.Code != 200 {
		t.Fatalf("local: %d", rec.Code)
	}
	h = handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Class = class; c.FailureMode = "closed" })
	if rec := serve(h, "u"); rec.Code != 503 {
		t.Fatalf("unavailable: %d", rec.Code)
	}
	m := scrape(t)
	for _, tc := range []struct {
		series string
		want   float64
	}{
		{requests(class, class, "redis", "allowed"), 3},
		{requests(class, class, "redis", "limited"), 2},
		{requests(class, class, "cache", "limited"), 1},
		{requests(class, class, "local", "allowed"), 1},
		{requests(class, class, "unavailable", "unavailable"), 1},
		{`tollgate_near_limit_total{class="` + class + `",policy="` + class + `"}`, 3},
	} {
		if got, ok := m[tc.series]; !ok || got != tc.want {
			t.Errorf("%s = %v (present %t), want %v", tc.series, got, ok, tc.want)
		}
	}
}

func TestMetricsSurviveReloads(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	class := uniqueName("reload")
	for i := 0; i < 3; i++ { // each New is a reload of the same class
		var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) { c.Class = class })
		serve(h, "k")
	}
	if got := scrape(t)[requests(class, class, "redis", "allowed")]; got != 3 {
		t.Fatalf("after 3 reloads, one request each: %v, want 3", got)
	}
}

func TestMetricsBreakerAndErrors(t *testing.T) {
	class, redis := uniqueName("breaker"), uniqueName("down")
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = class
		c.Redis.Name = redis
		c.Redis.BreakerThreshold = 2
	})
	for i := 0; i < 5; i++ {
		serve(h, "k")
	}
	m := scrape(t)
	lbl := `{redis="` + redis + `"}`
	if m["tollgate_breaker_open"+lbl] != 1 {
		t.Errorf("breaker_open = %v, want 1", m["tollgate_breaker_open"+lbl])
	}
	if got := m[`tollgate_breaker_transitions_total{redis="`+redis+`",to="open"}`]; got != 1 {
		t.Errorf("transitions to open = %v, want 1", got)
	}
	if got := m[`tollgate_redis_errors_total{redis="`+redis+`",reason="dial"}`]; got < 2 {
		t.Errorf("dial errors = %v, want at least 2 (the breaker opened)", got)
	}
	if got := m[requests(class, class, "local", "allowed")]; got != 5 {
		t.Errorf("local decisions = %v, want 5", got)
	}
	if _, ok := m[`tollgate_fallback_replicas{class="`+class+`"}`]; !ok {
		t.Error("no tollgate_fallback_replicas for the class")
	}
}

func TestMetricsCheckDurations(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	redis := uniqueName("timed")
	var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Name = redis })
	for i := 0; i < 2000; i++ { // (63/64)^2000: no check timed, once in 10^13
		serve(h, "k")
	}
	m := scrape(t)
	count := m[`tollgate_redis_check_duration_seconds_count{redis="`+redis+`"}`]
	inf := m[`tollgate_redis_check_duration_seconds_bucket{redis="`+redis+`",le="+Inf"}`]
	if count < 1 || count > 200 || inf != count {
		t.Fatalf("timed checks: count %v, +Inf bucket %v; want 1 to 200 of 2000 (one in %d), equal", count, inf, metrics.HistSample)
	}
	if m[`tollgate_redis_connections{redis="`+redis+`",state="idle"}`] < 1 {
		t.Fatalf("no idle connection counted: %v", m[`tollgate_redis_connections{redis="`+redis+`",state="idle"}`])
	}
}

func TestShadowNeverRefuses(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 500 1000\r\n")
	class := uniqueName("shadow")
	var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) {
		c.Class = class
		c.Shadow = true
		c.DecisionHeader = "X-Tollgate-Decision"
	})
	for i := 0; i < 3; i++ {
		rec := serve(h, "k")
		if rec.Code != 200 {
			t.Fatalf("shadow: %d, want 200", rec.Code)
		}
		want := "redis;shadow"
		if i > 0 {
			want = "cache;shadow" // the refusal is remembered, as when enforcing
		}
		if got := rec.Header().Get("X-Tollgate-Decision"); got != want {
			t.Fatalf("request %d: decision header %q, want %q", i, got, want)
		}
		if got := rec.Header().Get("RateLimit"); got != `"`+class+`";r=0;t=1` {
			t.Fatalf("request %d: RateLimit %q, want what enforcing shows", i, got)
		}
	}
	h = handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Class = class; c.Shadow = true; c.FailureMode = "closed" })
	if rec := serve(h, "k"); rec.Code != 200 {
		t.Fatalf("shadow, fail closed, Redis down: %d, want 200", rec.Code)
	}
	m := scrape(t)
	if got := m[requests(class, class, "redis", "shadow_limited")]; got != 1 {
		t.Errorf("redis shadow_limited = %v, want 1", got)
	}
	if got := m[requests(class, class, "cache", "shadow_limited")]; got != 2 {
		t.Errorf("cache shadow_limited = %v, want 2", got)
	}
	if got := m[requests(class, class, "unavailable", "shadow_limited")]; got != 1 {
		t.Errorf("unavailable shadow_limited = %v, want 1", got)
	}
}

// TestShadowRuleLeavesTheTopLevelEnforced: a request a shadow rule alone
// refuses is charged to the enforcing top level by itself; when that one is
// empty the request is refused as usual. Decided by the local fallback
// (Redis down), whose buckets are exact.
func TestShadowRuleLeavesTheTopLevelEnforced(t *testing.T) {
	class := uniqueName("shadowrule")
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 3, "1h", 3
		c.Rules = []config.Rule{{Name: "search", Average: 1, Period: "1h", Burst: 1, Shadow: "true"}}
	})
	var codes []int
	for i := 0; i < 5; i++ {
		codes = append(codes, serve(h, "k").Code)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("codes %v, want the top level's 3 admitted, then refused", codes)
	}
	m := scrape(t)
	if got := m[requests(class, "search", "local", "shadow_limited")]; got != 2 {
		t.Errorf("search shadow_limited = %v, want 2", got)
	}
	if got := m[requests(class, class, "local", "limited")]; got != 2 {
		t.Errorf("top level limited = %v, want 2", got)
	}
}

// TestShadowOffEnforcesWithTheBucketsAsTheyAre: a reload that turns
// shadow off enforces at once with what shadow mode charged (no fresh
// burst). Decided by the local fallback (Redis down), which a reload of the
// class keeps.
func TestShadowOffEnforcesWithTheBucketsAsTheyAre(t *testing.T) {
	class := uniqueName("shadowoff")
	limit := func(shadow bool) func(*config.Config) {
		return func(c *config.Config) {
			c.Class = class
			c.Average, c.Period, c.Burst = 3, "1h", 3
			c.Shadow = shadow
		}
	}
	var h http.Handler = handlerOn(t, "127.0.0.1:1", limit(true))
	for i := 0; i < 5; i++ {
		if rec := serve(h, "k"); rec.Code != 200 {
			t.Fatalf("shadow request %d: %d, want 200", i, rec.Code)
		}
	}
	h = handlerOn(t, "127.0.0.1:1", limit(false))
	if rec := serve(h, "k"); rec.Code != 429 {
		t.Fatalf("after shadow off, the bucket shadow mode emptied: %d, want 429", rec.Code)
	}
	if rec := serve(h, "other"); rec.Code != 200 {
		t.Fatalf("another client after shadow off: %d, want 200", rec.Code)
	}
}

// TestShadowLogsOncePerProbeInterval: shadow refusals are logged at most
// once per probeInterval per policy, never once per request.
func TestShadowLogsOncePerProbeInterval(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	f := redistest.StartFake(t, "+0 0 500 1000\r\n")
	class := uniqueName("shadowlog")
	var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) { c.Class = class; c.Shadow = true })
	for i := 0; i < 20; i++ {
		serve(h, fmt.Sprint("k", i)) // fresh keys: each asks Redis
	}
	if n := strings.Count(buf.String(), "tollgate: shadow: policy"); n != 1 {
		t.Fatalf("%d shadow log lines for 20 refusals within one probeInterval, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), `of class "`+class+`"`) {
		t.Fatalf("the log line does not name the class: %s", buf.String())
	}
}
