package tollgate

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestDenyCacheSteps(t *testing.T) {
	t0 := time.Hour // the monotonic clock
	now := t0
	c := newDenyCache(8)
	c.now = func() int64 { return int64(now) }
	// One policy refused: 0 left, 1500 ms to wait, 5000 ms until full.
	c.remember("k", []int64{0, 0, 1500, 5000})
	steps := []struct {
		desc       string
		at         time.Duration
		found      bool
		wait, full int64
	}{
		{"just refused", 0, true, 1500, 5000},
		{"counted down", 500 * time.Millisecond, true, 1000, 4500},
		{"last ms", 1499 * time.Millisecond, true, 1, 3501},
		{"wait over", 1500 * time.Millisecond, false, 0, 0},
		{"forgotten", 0, false, 0, 0},
	}
	for i, s := range steps {
		now = t0 + s.at
		d := make([]int64, 4)
		found := c.lookup("k", d)
		if found != s.found || found && (d[0] != 0 || d[1] != 0 || d[2] != s.wait || d[3] != s.full) {
			t.Fatalf("step %d (%s): found = %t, d = %v; want %t, wait %d, full %d", i, s.desc, found, d, s.found, s.wait, s.full)
		}
	}
	if c.n != 0 {
		t.Fatalf("%d entries after the wait, want 0", c.n)
	}
	// An allowed decision, or one naming no wait, is not cached.
	c.remember("ok", []int64{1, 3, 0, 2000})
	if c.n != 0 {
		t.Fatal("an allowed decision was cached")
	}
}

// The cache's waits count down with its clock and never grow, even when the
// clock it is given steps back (the wall clock did: a step back of an hour
// kept refusals, with Retry-After near 3600 s, for that hour).
func TestDenyCacheWaitsNeverGrow(t *testing.T) {
	now := 10 * time.Second // the monotonic clock
	c := newDenyCache(8)
	c.now = func() int64 { return int64(now) }
	c.remember("k", []int64{0, 0, 3000, 9000})
	steps := []struct {
		desc       string
		at         time.Duration
		found      bool
		wait, full int64
	}{
		{"refused", 10 * time.Second, true, 3000, 9000},
		{"1s later", 11 * time.Second, true, 2000, 8000},
		{"clock back 1h", 11*time.Second - time.Hour, true, 2000, 8000},
		{"clock back 500ms", 10500 * time.Millisecond, true, 2000, 8000},
		{"clock past its latest reading", 12 * time.Second, true, 1000, 7000},
		{"wait over", 13 * time.Second, false, 0, 0},
		{"clock back again: still over", 10 * time.Second, false, 0, 0},
	}
	for i, s := range steps {
		now = s.at
		d := make([]int64, 4)
		found := c.lookup("k", d)
		if found != s.found || found && (d[2] != s.wait || d[3] != s.full) {
			t.Fatalf("step %d (%s): found = %t, wait %d, full %d; want %t, %d, %d", i, s.desc, found, d[2], d[3], s.found, s.wait, s.full)
		}
	}
	// A refusal remembered while the clock is behind counts from the
	// cache's latest reading: it ends its wait after it, not later.
	now = time.Second
	c.remember("j", []int64{0, 0, 1000, 1000})
	now = 14 * time.Second
	if d := make([]int64, 4); c.lookup("j", d) {
		t.Fatalf("a 1s refusal remembered at the cache's 13s, looked up at 14s: still in force, wait %d", d[2])
	}
}

func TestDenyCacheIsBounded(t *testing.T) {
	c := newDenyCache(8)
	for i := 0; i < 20; i++ {
		c.remember(fmt.Sprint("k", i), []int64{0, 0, 60000, 60000})
		if c.n > 8 {
			t.Fatalf("after %d refusals: %d entries, at most 8", i+1, c.n)
		}
	}
	d := make([]int64, 4)
	if !c.lookup("k19", d) {
		t.Fatal("the latest refusal was evicted")
	}
}

func TestRefusalsAreRepeatedWithoutRedis(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 1500 5000\r\n")
	var h http.Handler = handlerOn(t, f.Addr(), func(c *config.Config) { c.DecisionHeader = "X-Decision" })
	for i := 0; i < 5; i++ {
		rec := serve(h, t.Name())
		want := "cache"
		if i == 0 {
			want = "redis"
		}
		if rec.Code != 429 || rec.Header().Get("X-Decision") != want || rec.Header().Get("Retry-After") != "2" ||
			rec.Header().Get("RateLimit") != `"api";r=0;t=2` || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("refusal %d: %d %v; want 429 decided by %s with the same headers", i, rec.Code, rec.Header(), want)
		}
	}
	if n := atomic.LoadInt64(&f.Evals); n != 1 {
		t.Fatalf("5 refusals cost %d Redis calls, want 1", n)
	}
	// Another client is not refused by this one's refusal.
	serve(h, t.Name()+"-other")
	if n := atomic.LoadInt64(&f.Evals); n != 2 {
		t.Fatalf("another client: %d Redis calls in all, want 2", n)
	}
}

func TestAdmissionsAreNotCached(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	var h http.Handler = handlerOn(t, f.Addr(), nil)
	for i := 0; i < 5; i++ {
		serve(h, t.Name())
	}
	if n := atomic.LoadInt64(&f.Evals); n != 5 {
		t.Fatalf("5 admitted requests cost %d Redis calls, want 5", n)
	}
}
