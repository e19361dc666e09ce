package tollgate

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A refusal from the deny cache answered from its prepared answer is the
// answer the general path gives at that instant, byte for byte, at every
// instant around the seconds its waits tick down; and the prepared answer
// is what answers while none of them has (no Redis call, counted once).
func TestPreparedRefusalsAreTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		reply  string
		wait   time.Duration // the refusal's
		mutate func(*config.Config)
	}{
		{"one policy, IETF headers", "+0 0 5500 9200\r\n", 5500, nil},
		{"one policy, every header mode and a decision header", "+0 0 5500 9200\r\n", 5500, func(c *config.Config) {
			c.Headers = "both"
			c.DecisionHeader = "X-Decision"
		}},
		{"draft 07", "+0 0 5500 9200\r\n", 5500, func(c *config.Config) { c.Headers = "draft07" }},
		{"no headers", "+0 0 5500 9200\r\n", 5500, func(c *config.Config) { c.Headers = "none" }},
		{"two policies, the rule refusing", "+0 3 0 800 0 2700 3900\r\n", 2700, func(c *config.Config) {
			c.Rules = []config.Rule{{Name: "search", Average: 2, Burst: 2}}
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := redistest.StartFake(t, tc.reply)
			h := handlerOn(t, f.Addr(), tc.mutate)
			now := 10 * time.Second
			set := h.top
			if len(h.conf.Rules) > 0 {
				set = h.policiesFor(httptest.NewRequest("GET", "/", nil))
			}
			set.denied.now = func() int64 { return int64(now) }
			if rec := serve(h, "k"); rec.Code != 429 {
				t.Fatalf("first request: %d, want a refusal from Redis", rec.Code)
			}
			limited := &set.ps[0].Metrics.N[decidedCache*metrics.NResults+metrics.Limited]
			if len(set.ps) > 1 {
				limited = &set.ps[1].Metrics.N[decidedCache*metrics.NResults+metrics.Limited]
			}
			for _, at := range []time.Duration{0, 1, 499, 500, 501, 699, 700, 999, 1000, 1499, 1500, 2199, 2200, 2699, 4499, 4500, 5000, 5499} {
				if at >= tc.wait {
					break
				}
				now = 10*time.Second + at*time.Millisecond
				before := atomic.LoadInt64(limited)
				got := serve(h, "k")
				if n := atomic.LoadInt64(limited) - before; n != 1 {
					t.Fatalf("at %d ms: counted %d cache refusals, want 1", at, n)
				}
				// The general path's answer at the same instant.
				d := make([]int64, set.decisionLen)
				if !set.denied.lookup(clientKeyOf(h, "k"), d) {
					t.Fatalf("at %d ms: the refusal is no longer cached", at)
				}
				want := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("X-API-Key", "k")
				h.answer(want, req, set, d, decidedCache)
				atomic.AddInt64(limited, -1) // answer counted it too
				if got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) || got.Body.String() != want.Body.String() {
					t.Fatalf("at %d ms: answered\n%d %v %s\nthe general path:\n%d %v %s", at, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
				}
				// From here to the next tick, the prepared answer answers.
				if r := refuseCached(set.denied, clientKeyOf(h, "k"), httptest.NewRecorder()); r != refused {
					t.Fatalf("at %d ms: refuseCached = %d, want the prepared answer", at, r)
				}
			}
			if n := atomic.LoadInt64(&f.Evals); n != 1 {
				t.Fatalf("%d Redis calls, want 1 (every other refusal from the cache)", n)
			}
		})
	}
}

// clientKeyOf is the key h's requests with API key k are charged under.
func clientKeyOf(h *Tollgate, k string) string {
	return bucket.HashKey(h.conf.HeaderTag + k)
}

// A prepared answer is never used past the refusal: once the wait is over
// the request goes to Redis; and a reload (a new instance) starts afresh.
func TestPreparedRefusalEndsWithItsRefusal(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 1500 1500\r\n")
	h := handlerOn(t, f.Addr(), nil)
	now := 10 * time.Second
	h.top.denied.now = func() int64 { return int64(now) }
	serve(h, "k")
	serve(h, "k")
	if n := atomic.LoadInt64(&f.Evals); n != 1 {
		t.Fatalf("%d Redis calls, want 1", n)
	}
	now += 1500 * time.Millisecond
	if rec := serve(h, "k"); rec.Code != 429 {
		t.Fatalf("after the wait: %d", rec.Code)
	}
	if n := atomic.LoadInt64(&f.Evals); n != 2 {
		t.Fatalf("after the wait: %d Redis calls in all, want 2 (the request went to Redis)", n)
	}
}

// Shadow policies and regions keep the general path: a prepared answer
// would skip what they do per request.
func TestNoPreparedRefusalsForShadowOrRegions(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 1500 5000\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Shadow = true })
	if h.top.denied.prepare != nil {
		t.Fatal("a shadow policy's refusals are prepared")
	}
	rec := serve(h, "k")
	rec = serve(h, "k")
	if rec.Code != http.StatusOK {
		t.Fatalf("a shadow refusal from the cache: %d, want it let through", rec.Code)
	}
	r := handlerOn(t, f.Addr(), func(c *config.Config) {
		c.Region = &config.RegionConfig{Name: "a", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:1"}}}}
	})
	if r.top.denied.prepare != nil {
		t.Fatal("a region's refusals are prepared (they are noted per request)")
	}
}

// Checks that waited for the cache's lock read their clock before the one
// that held it: the cache's time is its latest reading (denyCache.last), so
// a prepared answer still answers them while that time is before its end,
// and never once it is past it. (Under load most refusals are such checks:
// sending them to the general path made the prepared answers worthless.)
func TestPreparedRefusalOnTheCachesTime(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 5500 9200\r\n")
	h := handlerOn(t, f.Addr(), nil)
	now := 10 * time.Second
	c := h.top.denied
	c.now = func() int64 { return int64(now) }
	serve(h, "k") // refused by Redis
	serve(h, "k") // from the cache: its answer prepared, until 10.5 s
	key := clientKeyOf(h, "k")
	c.mu.Lock()
	c.last = int64(10*time.Second + 400*time.Millisecond) // another check's later reading
	c.mu.Unlock()
	if r := refuseCached(c, key, httptest.NewRecorder()); r != refused {
		t.Fatalf("a check whose clock read is behind the cache's (both before the answer's end): %d, want the prepared answer", r)
	}
	c.mu.Lock()
	c.last = int64(10*time.Second + 500*time.Millisecond) // the answer's second has ticked
	c.mu.Unlock()
	if r := refuseCached(c, key, httptest.NewRecorder()); r != inForce {
		t.Fatalf("a check whose clock read is behind the cache's, past the answer's end: %d, want the general path", r)
	}
	if rec := serve(h, "k"); rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("the general path at the cache's 10.5 s: Retry-After %q, want 5", rec.Header().Get("Retry-After"))
	}
}
