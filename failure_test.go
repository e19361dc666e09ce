package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// handlerOn builds a middleware on addr. Each call names its own (unused:
// no password) username, so that it gets a backend (pool and breaker) of
// its own.
var backendSeq int64

func handlerOn(t *testing.T, addr string, mutate func(*config.Config)) *Tollgate {
	t.Helper()
	return handlerWith(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(200) }), mutate)
}

// handlerWith is handlerOn in front of next.
func handlerWith(t *testing.T, addr string, next http.Handler, mutate func(*config.Config)) *Tollgate {
	t.Helper()
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst = 60, "1m", 5
	cfg.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	cfg.Redis.Timeout = "500ms"
	cfg.Redis.ProbeInterval = "1h"
	cfg.Redis.Username = fmt.Sprintf("test-%d", atomic.AddInt64(&backendSeq, 1))
	if mutate != nil {
		mutate(cfg)
	}
	h, err := New(nil, next, cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	return h.(*Tollgate)
}

func serve(h http.Handler, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRepliesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		desc, reply string
		status      int
		remaining   string // the RateLimit r the client sees
		fallback    bool
	}{
		{desc: "a good reply is used", reply: "+1 3 0 2000\r\n", status: 200, remaining: "r=3;"},
		{desc: "a refusal with a wait", reply: "+0 0 1500 5000\r\n", status: 429, remaining: "r=0;t=2"},
		{desc: "a refusal without a wait is not believed", reply: "+0 0 0 5000\r\n", status: 200, fallback: true},
		{desc: "a negative number", reply: "+1 -3 0 2000\r\n", status: 200, fallback: true},
		{desc: "allowed flag out of range", reply: "+7 3 0 2000\r\n", status: 200, fallback: true},
		{desc: "too few elements", reply: "+1 3\r\n", status: 200, fallback: true},
		{desc: "an array (an older script's reply)", reply: "*4\r\n:1\r\n:3\r\n:0\r\n:2000\r\n", status: 200, fallback: true},
		{desc: "an error reply", reply: "-ERR something broke\r\n", status: 200, fallback: true},
		{desc: "a word", reply: "+OK\r\n", status: 200, fallback: true},
		{desc: "not a number", reply: "+1 x 0 2000\r\n", status: 200, fallback: true},
		{desc: "a huge number", reply: "+1 99999999999999999999 0 2000\r\n", status: 200, fallback: true},
		{desc: "an empty line", reply: "+\r\n", status: 200, fallback: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := redistest.StartFake(t, tc.reply)
			h := handlerOn(t, f.Addr(), nil)
			rec := serve(h, t.Name())
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			st := h.be.stats()
			if got := st.Fallbacks == 1; got != tc.fallback {
				t.Fatalf("fallback = %t (stats %+v), want %t", got, st, tc.fallback)
			}
			if tc.fallback {
				// The local bucket (burst 5) decided: 4 left.
				if r := rec.Header().Get("RateLimit"); !strings.Contains(r, "r=4;") || st.Failures != 1 {
					t.Fatalf("RateLimit %q, stats %+v: want the local bucket's r=4 and one failure", r, st)
				}
				return
			}
			if r := rec.Header().Get("RateLimit"); !strings.Contains(r, tc.remaining) {
				t.Fatalf("RateLimit %q, want %s", r, tc.remaining)
			}
		})
	}
}

func TestFailurePolicyCounters(t *testing.T) {
	// Nothing listens on port 1: every dial is refused.
	h := handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Redis.BreakerThreshold = 3 })
	// New's warm-up dial fails first: one failure.
	for deadline := time.Now().Add(2 * time.Second); h.be.stats().Failures != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the warm-up dial's failure was not counted", h.be.stats())
		}
	}
	for i := 0; i < 5; i++ {
		if rec := serve(h, t.Name()); rec.Code != 200 || rec.Header().Get("RateLimit") == "" {
			t.Fatalf("request %d with Redis down: %d %v, want 200 with headers", i, rec.Code, rec.Header())
		}
	}
	// Checks do not wait for the dials they start once one failed: how
	// many of the 5 were skipped depends on when those dials fail.
	redistest.WaitFor(t, func() bool { return h.be.stats().Breaker }, "the breaker to open")
	for i := 0; i < 3; i++ {
		serve(h, t.Name())
	}
	st := h.be.stats()
	if st.Fallbacks != 8 || st.Failures < 3 || st.Skipped < 3 || !st.Breaker || st.Open != 0 {
		t.Fatalf("stats %+v: want 8 fallbacks, at least 3 failed dials opening the breaker, the last 3 checks skipped, no connection", st)
	}
}

func TestFailClosedCountsAndAnswers503(t *testing.T) {
	h := handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.FailureMode = "closed"; c.Redis.ProbeInterval = "7s" })
	rec := serve(h, t.Name())
	if rl := rec.Header().Get("RateLimit"); !strings.HasSuffix(rl, ";r=0;t=7") {
		t.Fatalf("503 RateLimit %q, want r=0;t=7", rl)
	}
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "7" || h.be.stats().Closed != 1 {
		t.Fatalf("fail closed: %d Retry-After %q stats %+v, want 503, 7, one closed", rec.Code, rec.Header().Get("Retry-After"), h.be.stats())
	}
}

func TestNewSharesBackends(t *testing.T) {
	// Reloads that change limits, timeouts or breaker settings keep the
	// connection, hence the pool; another database is another connection.
	a := handlerOn(t, "127.0.0.1:1", nil)
	user := a.conf.Redis.Username
	b := handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Redis.Username, c.Average, c.Redis.Timeout, c.Redis.ProbeInterval, c.Redis.BreakerThreshold, c.Redis.PoolSize = user, 7, "9ms", "2s", 5, 3
	})
	c := handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Redis.Username, c.Redis.DB = user, 8 })
	if a.be != b.be || a.be == c.be {
		t.Fatal("backends: one per connection (address, credentials, db, TLS), whatever the other settings")
	}
	if a.be.pool.PoolSize() != 3 {
		t.Fatalf("pool size %d, want the latest config's 3", a.be.pool.PoolSize())
	}
}

func TestMultiBucketRepliesAreChecked(t *testing.T) {
	withRule := func(c *config.Config) { c.Rules = []config.Rule{{Name: "search", Average: 10, Burst: 5}} }
	for _, tc := range []struct {
		desc, reply, want string
	}{
		{desc: "good", reply: "+1 3 0 2000 4 0 100\r\n", want: `"api";r=3;t=0, "search";r=4;t=0`},
		{desc: "a field short", reply: "+1 3 0 2000 4 0\r\n", want: `"api";r=4;t=0, "search";r=4;t=0`},
		{desc: "negative", reply: "+1 3 0 2000 -4 0 100\r\n", want: `"api";r=4;t=0, "search";r=4;t=0`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := redistest.StartFake(t, tc.reply)
			h := handlerOn(t, f.Addr(), withRule)
			if got := serve(h, t.Name()).Header().Get("RateLimit"); got != tc.want {
				t.Fatalf("RateLimit = %q, want %q (bad replies fall back to the local buckets)", got, tc.want)
			}
		})
	}
}

func TestDecisionHeader(t *testing.T) {
	// (Each handler is held in a variable: Yaegi cannot pass a call's
	// *Tollgate result straight as an http.Handler argument.)
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	withHeader := func(c *config.Config) { c.DecisionHeader = "x-tollgate-decision" }
	var h http.Handler = handlerOn(t, f.Addr(), withHeader)
	if got := serve(h, t.Name()).Header().Get("X-Tollgate-Decision"); got != "redis" {
		t.Fatalf("decided by Redis: header %q, want redis", got)
	}
	h = handlerOn(t, "127.0.0.1:1", withHeader)
	if got := serve(h, t.Name()).Header().Get("X-Tollgate-Decision"); got != "local" {
		t.Fatalf("Redis unavailable: header %q, want local", got)
	}
	h = handlerOn(t, "127.0.0.1:1", func(c *config.Config) { withHeader(c); c.FailureMode = "closed" })
	if rec := serve(h, t.Name()); rec.Code != 503 || rec.Header().Get("X-Tollgate-Decision") != "unavailable" {
		t.Fatalf("fail closed: %d, header %q, want 503 unavailable", rec.Code, rec.Header().Get("X-Tollgate-Decision"))
	}
	h = handlerOn(t, f.Addr(), nil)
	if hd := serve(h, t.Name()).Header(); len(hd.Values("X-Tollgate-Decision")) != 0 {
		t.Fatalf("decision header sent without decisionHeader: %v", hd)
	}
}

func TestNewWarmsThePool(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.Addr(), nil)
	waitConns(t, h.be.pool, 1)
	if n := atomic.LoadInt64(&f.Evals); n != 0 {
		t.Fatalf("%d checks before any request", n)
	}
}

func TestFirstChecksWaitForTheWarmUpDial(t *testing.T) {
	// The dial takes 150 ms, the check's budget 50 ms: a burst that
	// arrives before the pool's first connection waits for it and is
	// decided by Redis, on one connection, not by the local fallback.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	atomic.StoreInt64(&f.SetName, time.Now().Add(150*time.Millisecond).UnixNano())
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Timeout = "50ms" })
	serveConcurrently(h, t.Name(), 50)
	if st := h.be.stats(); st.Fallbacks != 0 || st.Failures != 0 || atomic.LoadInt64(&f.Evals) != 50 {
		t.Fatalf("stats %+v, %d evals: want 50 checks answered by Redis", st, atomic.LoadInt64(&f.Evals))
	}
}

// serveConcurrently serves n concurrent requests, each with a key of its
// own (prefix and a number).
func serveConcurrently(h http.Handler, prefix string, n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			serve(h, fmt.Sprint(prefix, i))
		}(i)
	}
	wg.Wait()
}

func TestBurstNeverWaitsForADial(t *testing.T) {
	// Once one connection is open, a burst far above the pool shares it
	// (and the ones dialled meanwhile, up to poolSize) instead of waiting
	// for dials: every dial after the first takes 10 s here.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Timeout = "200ms"; c.Redis.PoolSize = 4 })
	waitConns(t, h.be.pool, 1)
	atomic.StoreInt64(&f.SetName, time.Now().Add(10*time.Second).UnixNano())
	serveConcurrently(h, t.Name(), 300)
	if st := h.be.stats(); st.Fallbacks != 0 || atomic.LoadInt64(&f.Evals) != 300 || st.Open != 1 {
		t.Fatalf("stats %+v, %d evals: want 300 checks answered by Redis on the one open connection", st, atomic.LoadInt64(&f.Evals))
	}
}

func TestRefusedDialFailsFast(t *testing.T) {
	// Nothing listens: the check falls back as soon as the dial is
	// refused, not when its (long) budget runs out.
	h := handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Redis.Timeout = "3s" })
	start := time.Now()
	serve(h, t.Name())
	if el := time.Since(start); el > time.Second || h.be.stats().Fallbacks != 1 {
		t.Fatalf("refused dial: %v, stats %+v; want a fallback well before the 3 s budget", el, h.be.stats())
	}
}

// waitConns waits until c has n connections open.
func waitConns(t *testing.T, c *redis.Pool, n int) {
	t.Helper()
	redistest.WaitFor(t, func() bool { return c.OpenConns() == n }, fmt.Sprintf("%d connections open", n))
}

func TestBreakerProbesWithoutTraffic(t *testing.T) {
	// Redis goes away, the breaker opens; Redis returns and, with no
	// request at all, the breaker closes within probeInterval: the very
	// first request after is decided by Redis.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.ProbeInterval = "100ms"; c.Redis.BreakerThreshold = 2 })
	waitConns(t, h.be.pool, 1)
	f.Down(true)
	for i := 0; i < 5; i++ {
		serve(h, t.Name())
	}
	if !h.be.stats().Breaker {
		t.Fatalf("stats %+v: want the breaker open", h.be.stats())
	}
	f.Down(false)
	time.Sleep(350 * time.Millisecond)
	if st := h.be.stats(); st.Breaker {
		t.Fatalf("stats %+v: the breaker did not probe by itself", st)
	}
	evals := atomic.LoadInt64(&f.Evals)
	if serve(h, t.Name()); atomic.LoadInt64(&f.Evals) != evals+1 || h.be.stats().Fallbacks != 5 {
		t.Fatalf("first request after Redis returned: stats %+v; want it decided by Redis", h.be.stats())
	}
}

// The script sends 19-digit numbers for a valid config (burst >= 1e18:
// remaining, at the fastest rate, 1 token per ns, so that the bucket
// refills within the 100 years allowed): such a decision is Redis's, not
// a bad reply sent to the fallback. (The same against a real Redis: e2e
// TestNineteenDigitNumbersAreDecidedByRedis.)
func TestNineteenDigitDecisionsAreTaken(t *testing.T) {
	const burst = 2000000000000000000
	mutate := func(c *config.Config) {
		c.Average, c.Period, c.Burst = 1000000000, "1s", burst
		c.DecisionHeader = "x-tollgate-decision"
	}
	// What the script answers, by its Go twin (statement for statement).
	probe := handlerOn(t, "127.0.0.1:1", mutate)
	d := make([]int64, 4)
	bucket.TakeAll([]bucket.Limit{probe.top.ps[0].Lim}, []float64{0}, 1e12, d)
	f := redistest.StartFake(t, fmt.Sprintf("+%d %d %d %d\r\n", d[0], d[1], d[2], d[3]))
	var h http.Handler = handlerOn(t, f.Addr(), mutate)
	if got := serve(h, t.Name()).Header().Get("X-Tollgate-Decision"); got != "redis" || d[1] < 1e18 {
		t.Fatalf("a decision of 19-digit numbers (%v): decided %q, want redis", d, got)
	}
}
