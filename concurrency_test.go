package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// gate is a backend that holds every request until open is closed, and
// counts how many it holds at once.
type gate struct {
	open      chan struct{}
	in, most  int64
	arrived   chan struct{}
	panicking bool
}

func newGate() *gate { return &gate{open: make(chan struct{}), arrived: make(chan struct{}, 1000)} }

func (g *gate) ServeHTTP(rw http.ResponseWriter, _ *http.Request) {
	n := atomic.AddInt64(&g.in, 1)
	for {
		m := atomic.LoadInt64(&g.most)
		if n <= m || atomic.CompareAndSwapInt64(&g.most, m, n) {
			break
		}
	}
	g.arrived <- struct{}{}
	<-g.open
	atomic.AddInt64(&g.in, -1)
	if g.panicking {
		panic(http.ErrAbortHandler)
	}
	rw.WriteHeader(200)
}

// capHandler is handlerWith in front of g with cap c and no rate (a cap
// alone), its class its own.
func capHandler(t *testing.T, addr string, g http.Handler, c config.Concurrency, mutate func(*config.Config)) *Tollgate {
	t.Helper()
	return handlerWith(t, addr, g, func(cfg *config.Config) {
		cfg.Average = 0
		cfg.Class = fmt.Sprintf("cap-%d", atomic.AddInt64(&backendSeq, 1))
		cfg.DecisionHeader = "X-Decision"
		cfg.Concurrency = &c
		if mutate != nil {
			mutate(cfg)
		}
	})
}

// burst sends n requests of client key at once and returns their
// recorders once every one that was refused has answered and the others
// have reached the backend (arrived times).
func burst(h http.Handler, g *gate, n int, key func(i int) string) (recs []*httptest.ResponseRecorder, done *sync.WaitGroup) {
	recs = make([]*httptest.ResponseRecorder, n)
	done = &sync.WaitGroup{}
	for i := 0; i < n; i++ {
		recs[i] = httptest.NewRecorder()
		done.Add(1)
		go func(i int) {
			defer done.Done()
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", key(i))
			defer func() { _ = recover() }() // the backend's ErrAbortHandler
			h.ServeHTTP(recs[i], req)
		}(i)
	}
	return recs, done
}

// waitRefused waits until refused requests of recs have answered 429.
func waitRefused(t *testing.T, recs []*httptest.ResponseRecorder, refused int) {
	t.Helper()
	redistest.WaitFor(t, func() bool {
		n := 0
		for _, r := range recs {
			if r.Code == http.StatusTooManyRequests && r.Body.Len() > 0 {
				n++
			}
		}
		return n >= refused
	}, fmt.Sprintf("%d refusals", refused))
}

// waitArrived waits for n requests to reach g.
func waitArrived(t *testing.T, g *gate, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d requests reached the backend", i, n)
		}
	}
}

// slots returns the slots held in Redis at key.
func slots(t *testing.T, addr, key string) string {
	return redistest.Do(t, addr, "ZCARD", key)[0]
}

func TestConcurrencyClassCapHoldsAndFrees(t *testing.T) {
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 3, Key: "class", Name: "reports"}, nil)
	recs, done := burst(h, g, 12, func(i int) string { return fmt.Sprintf("client-%d", i) })
	waitArrived(t, g, 3)
	waitRefused(t, recs, 9)
	if n := atomic.LoadInt64(&g.in); n != 3 {
		t.Fatalf("%d requests in the backend, want 3 (the cap)", n)
	}
	zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
	if n := slots(t, addr, zkey); n != "3" {
		t.Fatalf("%s holds %s slots, want 3", zkey, n)
	}
	for _, r := range recs {
		if r.Code != http.StatusTooManyRequests {
			continue
		}
		if ra := r.Header().Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1", ra)
		}
		if p := r.Header().Get("RateLimit-Policy"); p != `"reports";q=3;qu="concurrent-requests"` {
			t.Errorf("RateLimit-Policy %q", p)
		}
		if rl := r.Header().Get("RateLimit"); rl != `"reports";r=0;t=1` {
			t.Errorf("RateLimit %q, want r=0;t=1", rl)
		}
		if b := r.Body.String(); !strings.Contains(b, "concurrency limit") || !strings.Contains(b, `"violated-policies":["reports"]`) {
			t.Errorf("problem %s, want a concurrency limit naming the cap", b)
		}
		if d := r.Header().Get("X-Decision"); d != "redis" {
			t.Errorf("refused by %q, want redis (a cap's refusal is not cached)", d)
		}
	}
	close(g.open)
	done.Wait()
	settle(t, h)
	if n := slots(t, addr, zkey); n != "0" {
		t.Fatalf("%s holds %s slots after the requests ended, want 0", zkey, n)
	}
	// Free again: 3 more pass (the gate stays open now).
	for i := 0; i < 3; i++ {
		if rec := serve(h, "again"); rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != `"reports";r=2;t=0` {
			t.Fatalf("after the slots came back: %d %q, want 200 with r=2", rec.Code, rec.Header().Get("RateLimit"))
		}
		settle(t, h) // its slot given back
	}
}

func TestConcurrencyPerClient(t *testing.T) {
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 2}, func(c *config.Config) { c.Average, c.Period, c.Burst = 100, "1m", 100 })
	recs, done := burst(h, g, 10, func(i int) string { return fmt.Sprintf("c%d", i%2) })
	waitArrived(t, g, 4)
	waitRefused(t, recs, 6)
	if n := atomic.LoadInt64(&g.in); n != 4 {
		t.Errorf("%d requests in the backend, want 2 per client", n)
	}
	for _, r := range recs {
		if r.Code == http.StatusTooManyRequests && !strings.Contains(r.Header().Get("RateLimit"), `"`+h.conf.Class+`";r=`) {
			t.Errorf("RateLimit %q: want the rate's item beside the cap's", r.Header().Get("RateLimit"))
		}
		if r.Code == http.StatusTooManyRequests && !strings.HasSuffix(r.Header().Get("RateLimit-Policy"), `"`+h.conf.Class+`-concurrency";q=2;qu="concurrent-requests"`) {
			t.Errorf("RateLimit-Policy %q", r.Header().Get("RateLimit-Policy"))
		}
	}
	close(g.open)
	done.Wait()
	settle(t, h)
	// A cap's refusal charged no rate: 4 admissions, 96 left.
	if rl := serve(h, "c0").Header().Get("RateLimit"); !strings.HasPrefix(rl, `"`+h.conf.Class+`";r=97;`) {
		t.Errorf("RateLimit %q: want c0 charged for its 2 admissions and this one only (r=97): a cap's refusal takes no token", rl)
	}
}

func TestConcurrencySlotBackAfterPanic(t *testing.T) {
	addr := redistest.Start(t)
	g := newGate()
	g.panicking = true
	h := capHandler(t, addr, g, config.Concurrency{Max: 1, Key: "class"}, nil)
	_, done := burst(h, g, 1, func(int) string { return "k" })
	waitArrived(t, g, 1)
	close(g.open)
	done.Wait()
	settle(t, h)
	if n := slots(t, addr, bucket.KeyPrefix+"c:"+h.conf.Class+"}}c"); n != "0" {
		t.Fatalf("%s slots held after next panicked, want 0", n)
	}
}

func TestConcurrencyLocalCapWithRedisDown(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		g := newGate()
		h := capHandler(t, "127.0.0.1:1", g, config.Concurrency{Max: 6, Key: "class"}, func(c *config.Config) {
			c.Replicas = 3
			c.FailureMode = mode
			c.Redis.Timeout = "5ms"
		})
		recs, done := burst(h, g, 8, func(i int) string { return fmt.Sprint(i) })
		if mode == "closed" {
			close(g.open)
			done.Wait()
			for _, r := range recs {
				if r.Code != http.StatusServiceUnavailable {
					t.Errorf("closed, Redis down: %d, want 503", r.Code)
				}
			}
			continue
		}
		waitArrived(t, g, 2)
		waitRefused(t, recs, 6)
		if n := atomic.LoadInt64(&g.in); n != 2 {
			t.Errorf("open, Redis down: %d in the backend, want 6/3 = 2", n)
		}
		for _, r := range recs {
			if r.Code == http.StatusTooManyRequests && r.Header().Get("X-Decision") != "local" {
				t.Errorf("decided by %q, want local", r.Header().Get("X-Decision"))
			}
		}
		close(g.open)
		done.Wait()
		h.local.heldMu.Lock()
		left := len(h.local.held)
		h.local.heldMu.Unlock()
		if left != 0 {
			t.Errorf("local slots still held after the requests ended: %d keys", left)
		}
	}
}

func TestConcurrencyGiveBackBeforeTheTakeLeavesATombstone(t *testing.T) {
	// A take whose reply the pod never read (a timeout) is given back at
	// once; when the give-back reaches Redis first, the take must not
	// hold the slot.
	addr := redistest.Start(t)
	h := capHandler(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {}), config.Concurrency{Max: 1, Key: "class"}, nil)
	set := h.top
	keys := capKeysOf(h, set, httptest.NewRequest("GET", "/", nil), "unused")
	member := newMember()
	returnSlots(h, set, capCall(set, keys, member))
	settle(t, h)
	d := make([]int64, set.decisionLen)
	if err := h.be.rc.Check(set.cmd, capCall(set, keys, member), d, time.Second); err != nil {
		t.Fatal(err)
	}
	zkey := keys[0] + set.ps[0].KeySuffix
	if n := slots(t, addr, zkey); n != "0" {
		t.Fatalf("the late take holds %s slots, want 0 (its give-back came first)", n)
	}
	// The next take is an ordinary one.
	if rec := serve(h, "k"); rec.Code != http.StatusOK {
		t.Fatalf("next request: %d", rec.Code)
	}
}

func TestConcurrencyExpiredSlotsAreSwept(t *testing.T) {
	// A pod that died holding a slot holds it maxDuration, no longer.
	addr := redistest.Start(t)
	h := capHandler(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {}), config.Concurrency{Max: 1, Key: "class", MaxDuration: "300ms"}, nil)
	set := h.top
	keys := capKeysOf(h, set, httptest.NewRequest("GET", "/", nil), "unused")
	d := make([]int64, set.decisionLen)
	if err := h.be.rc.Check(set.cmd, capCall(set, keys, newMember()), d, time.Second); err != nil || d[0] != 1 {
		t.Fatalf("a dead pod's take: %v %v", err, d)
	}
	start := time.Now()
	if rec := serve(h, "k"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("while the dead pod's slot is held: %d, want 429", rec.Code)
	}
	redistest.WaitFor(t, func() bool { return serve(h, "k").Code == http.StatusOK }, "the slot back")
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("the slot came back after %v, before its maxDuration (300ms)", took)
	}
}

func TestConcurrencyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		mutate func(*config.Config)
		want   string
	}{
		{"max 0", func(c *config.Config) { c.Concurrency = &config.Concurrency{} }, "concurrency.max"},
		{"bad key", func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 1, Key: "ip"} }, "concurrency.key"},
		{"bad duration", func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 1, MaxDuration: "forever"} }, "concurrency.maxDuration"},
		{"long duration", func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 1, MaxDuration: "48h"} }, "concurrency.maxDuration"},
		{"name taken", func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 1, Name: "api"} }, "used twice"},
		{"shards", func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 1}; c.Shards = 2; c.Burst = 10 }, "not with shards"},
		{"class in a cluster", func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 1, Key: "class"}
			c.Redis.Mode = "cluster"
		}, "not for a Redis Cluster"},
		{"rule's bad max", func(c *config.Config) {
			c.Rules = []config.Rule{{Name: "r", Average: 1, Concurrency: &config.Concurrency{Max: -1}}}
		}, "rules[0].concurrency.max"},
	} {
		cfg := CreateConfig()
		cfg.Average, cfg.Period = 10, "1m"
		tc.mutate(cfg)
		_, err := New(nil, http.NotFoundHandler(), cfg, "api")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.desc, err, tc.want)
		}
	}
}

func TestConcurrencySequentialClientIsNeverRefused(t *testing.T) {
	// One request at a time under a cap of 1: each finds its slot free,
	// the last one's given back before its response was complete.
	addr := redistest.Start(t)
	h := capHandler(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {}), config.Concurrency{Max: 1}, nil)
	for i := 0; i < 50; i++ {
		if rec := serve(h, "k"); rec.Code != http.StatusOK {
			t.Fatalf("sequential request %d: %d %s, want 200 (the one before gave its slot back)", i, rec.Code, rec.Body.String())
		}
	}
}

func TestConcurrencySlotsFurtherThanAnyHoldAreSwept(t *testing.T) {
	// A slot whose deadline lies further ahead than the longest hold any
	// cap may ask (24 h: Redis's clock stepped back a day since its take)
	// is swept by the next take; one within it is another cap's (a longer
	// maxDuration of the same class) and is held. (Caps of other
	// maxDurations sharing a key: TestCapsOfOtherMaxDurationsShareTheirSlots.)
	addr := redistest.Start(t)
	noop := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {})
	h := capHandler(t, addr, noop, config.Concurrency{Max: 1, Key: "class", MaxDuration: "1s"}, nil)
	zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
	now := int64(redisNowUS(t, addr))
	for _, tc := range []struct {
		desc  string
		ahead time.Duration
		want  int
	}{
		{"a slot 23 h ahead (a cap of a longer maxDuration)", 23 * time.Hour, http.StatusTooManyRequests},
		{"a slot 25 h ahead (a clock stepped back)", 25 * time.Hour, http.StatusOK},
	} {
		redistest.Do(t, addr, "DEL", zkey)
		redistest.Do(t, addr, "ZADD", zkey, strconv.FormatInt(now+int64(tc.ahead/time.Microsecond), 10), "123456789012345678")
		if rec := serve(h, "k"); rec.Code != tc.want {
			t.Errorf("%s, max 1: %d, want %d", tc.desc, rec.Code, tc.want)
		}
	}
}
