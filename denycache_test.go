package tollgate

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

func TestDenyCacheSteps(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	now := t0
	c := newDenyCache(8)
	c.now = func() time.Time { return now }
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
		now = t0.Add(s.at)
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
	f := startFake(t, "+0 0 1500 5000\r\n")
	var h http.Handler = handlerOn(t, f.l.Addr().String(), func(c *Config) { c.DecisionHeader = "X-Decision" })
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
	if n := atomic.LoadInt64(&f.evals); n != 1 {
		t.Fatalf("5 refusals cost %d Redis calls, want 1", n)
	}
	// Another client is not refused by this one's refusal.
	serve(h, t.Name()+"-other")
	if n := atomic.LoadInt64(&f.evals); n != 2 {
		t.Fatalf("another client: %d Redis calls in all, want 2", n)
	}
}

func TestAdmissionsAreNotCached(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	var h http.Handler = handlerOn(t, f.l.Addr().String(), nil)
	for i := 0; i < 5; i++ {
		serve(h, t.Name())
	}
	if n := atomic.LoadInt64(&f.evals); n != 5 {
		t.Fatalf("5 admitted requests cost %d Redis calls, want 5", n)
	}
}
