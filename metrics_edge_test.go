package tollgate

// Metrics and shadow mode at their edges: each test was first written
// against a defect an independent review found (it failed then), and says
// which.

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// TestShadowRuleCachesNoRefusalPastTheEnforcingWait: a request refused by
// both an enforcing top level (short wait) and a shadow rule (long wait)
// is remembered in the deny cache until the LONGEST wait, and the cache's
// countDown keeps the enforcing policy's wait at >= 1 ms. So once the top
// level's bucket has refilled, the client is still refused (429) by the
// cache, for as long as the shadow rule's wait: the shadow rule refuses
// traffic that the enforcing policies alone would admit.
func TestShadowRuleCachesNoRefusalPastTheEnforcingWait(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-shadowcache")
	h := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1s", 1 // one token every 100 ms
		c.Rules = []config.Rule{{Name: "slow", Average: 1, Period: "1h", Burst: 1, Shadow: "true"}}
		c.DecisionHeader = "X-Decision"
	})
	if rec := serve(h, "k"); rec.Code != 200 {
		t.Fatalf("first request: %d, want 200", rec.Code)
	}
	if rec := serve(h, "k"); rec.Code != 429 { // the top level is empty: refused, rightly
		t.Fatalf("second request: %d, want 429 (top level empty)", rec.Code)
	}
	time.Sleep(300 * time.Millisecond) // the top level has refilled (100 ms per token)
	rec := serve(h, "k")
	if rec.Code != 200 {
		t.Fatalf("after the enforcing top level refilled: %d (decision %q), want 200: only the shadow rule would refuse",
			rec.Code, rec.Header().Get("X-Decision"))
	}
}

// TestDenyCachesAreNotKeptAcrossReloads: every deny cache that ever
// held a refusal is put in the metrics registry (watchDeny) and only a
// scrape removes it. Without a serveMetrics middleware (the default) the
// set grows with every reload (each New builds new caches) and pins the
// caches and their entries for ever.
func TestDenyCachesAreNotKeptAcrossReloads(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 1 1\r\n") // refused, 1 ms to wait
	user := uniqueName("review-denyleak")
	denies := func() int {
		deniesWatched.mu.Lock()
		defer deniesWatched.mu.Unlock()
		return len(deniesWatched.denies)
	}
	before := denies()
	const reloads = 200
	for i := 0; i < reloads; i++ { // each New is a reload; the old instance is dropped
		h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Username = user })
		if rec := serve(h, "k"); rec.Code != 429 {
			t.Fatalf("reload %d: %d, want 429", i, rec.Code)
		}
	}
	time.Sleep(20 * time.Millisecond) // every refusal has expired
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Username = user })
	serve(h, "k")
	if grown := denies() - before; grown > 10 {
		t.Fatalf("after %d reloads with no scrape, the metrics registry holds %d more deny caches (all of dropped instances, "+
			"their refusals expired): unbounded", reloads, grown)
	}
}

// TestShadowFailClosedAsksRedisOnce: a shadow rule that fails
// closed, Redis unavailable: the full set is decided unavailable, then
// passShadow decides the enforcing set again, which asks Redis a second
// time. One request makes two failed checks: two timeouts of latency, two
// errors and two breaker failures (the breaker opens at half its
// threshold of requests).
func TestShadowFailClosedAsksRedisOnce(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000 4 0 1000\r\n")
	class, redis := uniqueName("review-shadow2x"), uniqueName("review-shadow2x-redis")
	h := handlerOn(t, f.Addr(), func(c *config.Config) {
		c.Class = class
		c.Redis.Name = redis
		c.Redis.Timeout = "200ms"
		c.Rules = []config.Rule{{Name: "r", Average: 100, Burst: 100, Shadow: "true", FailureMode: "closed"}}
	})
	if rec := serve(h, "k"); rec.Code != 200 { // warm: a connection is up
		t.Fatalf("warm-up: %d", rec.Code)
	}
	f.Freeze()
	start := time.Now()
	rec := serve(h, "k2")
	took := time.Since(start)
	if rec.Code != 200 {
		t.Fatalf("shadow rule fails closed, top level open, Redis frozen: %d, want 200 (local)", rec.Code)
	}
	var errs int64
	for _, v := range h.be.metrics.Errors {
		errs += v
	}
	if errs != 1 || took >= 400*time.Millisecond {
		t.Fatalf("one request with Redis frozen: %d failed checks counted, took %v; want 1 failed check within one 200ms timeout",
			errs, took)
	}
}

// TestLocalNearLimitIsOfThePodsShare: near the limit is "less than a
// fifth of the burst left"; for a local decision d[1] is the tokens left in
// the pod's share (burst/replicas), compared with the whole burst. With 4
// replicas, a local bucket still 60% full counts as near the limit.
func TestLocalNearLimitIsOfThePodsShare(t *testing.T) {
	class := uniqueName("review-localnear")
	h := handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Replicas = 4 // local share: 25 tokens
	})
	for i := 0; i < 10; i++ { // leaves 15 of 25 tokens: 60%
		if rec := serve(h, "k"); rec.Code != 200 {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	m := scrape(t)
	if got := m[requests(class, class, "local", "allowed")]; got != 10 {
		t.Fatalf("local allowed = %v, want 10", got)
	}
	if got := m[`tollgate_near_limit_total{class="`+class+`",policy="`+class+`"}`]; got != 0 {
		t.Fatalf("near_limit = %v after 10 of a 25-token local bucket (15 left, 60%%), want 0", got)
	}
}

// TestRedisNameFollowsReloads: redis.name is not part of the
// backend's key and the label is the FIRST New's (backend.base), so a
// reload that renames the deployment keeps serving the old name (for as
// long as the connection is used), and two middlewares naming one
// connection differently get one of the names.
func TestRedisNameFollowsReloads(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	user := uniqueName("review-rename")
	oldName, newName := uniqueName("review-old"), uniqueName("review-new")
	for _, name := range []string{oldName, newName} {
		name := name
		h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Username = user; c.Redis.Name = name })
		serve(h, "k")
	}
	m := scrape(t)
	if _, ok := m[`tollgate_breaker_open{redis="`+newName+`"}`]; !ok {
		_, old := m[`tollgate_breaker_open{redis="`+oldName+`"}`]
		t.Fatalf("after a reload renaming redis.name to %q: no series with it (the old name served: %t)", newName, old)
	}
}

// TestConcurrentScrapesServesAndReloads runs requests (refused, so the
// deny caches register), reloads and scrapes at once, for -race and lock
// order.
func TestConcurrentScrapesServesAndReloads(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 50 1000\r\n")
	class := uniqueName("review-concurrent")
	mk := func() http.Handler {
		return handlerOn(t, f.Addr(), func(c *config.Config) { c.Class = class; c.Redis.Username = class })
	}
	var wg sync.WaitGroup
	var done int32
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				if atomic.LoadInt32(&done) == 1 {
					return
				}
				h := mk()
				for j := 0; j < 20; j++ {
					serve(h, fmt.Sprint(g, "-", i, "-", j))
				}
			}
		}(g)
	}
	for i := 0; i < 50; i++ {
		scrape(t)
	}
	atomic.StoreInt32(&done, 1)
	wg.Wait()
}

// TestReplacedBackendLeavesTheGauges: a reload that changes the
// connection (here the username; in practice a corrected password) makes
// a new backend; the old one, no longer used, keeps its open breaker but
// leaves the gauges once it has had no check for gaugeIdle (the review
// found it held tollgate_breaker_open at 1 for backendIdle). Its counters
// stay in the name's totals.
func TestReplacedBackendLeavesTheGauges(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	redis := uniqueName("abandoned")
	f.Down(true)
	old := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Name = redis; c.Redis.BreakerThreshold = 2 })
	for i := 0; i < 10; i++ {
		serve(old, "k")
	}
	if !old.be.breaker.isOpen() {
		t.Fatal("setup: the old backend's breaker did not open")
	}
	f.Down(false)
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Name = redis; c.Redis.BreakerThreshold = 2 })
	for i := 0; i < 3; i++ {
		if rec := serve(h, "k"); rec.Code != 200 {
			t.Fatalf("after the reload: %d", rec.Code)
		}
	}
	if got := scrape(t)[`tollgate_breaker_open{redis="`+redis+`"}`]; got != 1 {
		t.Fatalf("tollgate_breaker_open = %v right after the reload, want 1 (the old backend was used within gaugeIdle)", got)
	}
	atomic.StoreInt64(&old.be.lastUsed, shared.now()-int64(gaugeIdle)-1) // gaugeIdle without a check
	m := scrape(t)
	if got := m[`tollgate_breaker_open{redis="`+redis+`"}`]; got != 0 {
		t.Fatalf("tollgate_breaker_open = %v, want 0: the only backend checked within gaugeIdle is closed", got)
	}
	if got := m[`tollgate_breaker_transitions_total{redis="`+redis+`",to="open"}`]; got != 1 {
		t.Fatalf("transitions to open = %v, want 1 (the old backend's, still counted)", got)
	}
}

// TestForgottenPolicyReturnsAtItsNextNew: the registry keeps at most
// metrics.MaxPolicies policies; once full, a policy neither compiled nor
// counting for metrics.Idle is forgotten, and an instance still serving it
// counts where no scrape looks, until New builds the class again (the
// review found the README promised it back with its totals).
func TestForgottenPolicyReturnsAtItsNextNew(t *testing.T) {
	saved, savedNow := shared.metrics, shared.now
	shared.metrics = metrics.NewRegistry()
	defer func() { shared.metrics, shared.now = saved, savedNow }()
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	class := uniqueName("forgotten")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Class = class })
	serve(h, "k")
	scrape(t) // its total seen
	later := shared.now() + int64(metrics.Idle) + int64(time.Minute)
	for i := 0; i < metrics.MaxPolicies; i++ { // other classes compiled 11 minutes later fill the registry
		shared.metrics.Policy("other", fmt.Sprint(i), later)
	}
	shared.now = func() int64 { return later + int64(time.Second) }
	if _, ok := scrape(t)[requests(class, class, "redis", "allowed")]; ok {
		t.Fatal("a forgotten policy is still served")
	}
	h = handlerOn(t, f.Addr(), func(c *config.Config) { c.Class = class }) // a reload
	serve(h, "k")
	if got := scrape(t)[requests(class, class, "redis", "allowed")]; got != 1 {
		t.Fatalf("after the class's next New: allowed = %v, want 1 (counting again, from zero)", got)
	}
}
