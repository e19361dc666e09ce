package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// concurrently runs g goroutines of n requests each, each goroutine with its
// own key, and counts the responses that are not 200 with the right r for
// a burst of n (each reply must reach its own request).
func concurrently(t *testing.T, h http.Handler, g, n int) int64 {
	var bad int64
	var wg sync.WaitGroup
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := fmt.Sprintf("%s-%d", uniqueKey(t), i)
			for j := 0; j < n; j++ {
				rec := do(h, "GET", "/", key)
				if rec.Code != 200 || !strings.Contains(rec.Header().Get("RateLimit"), fmt.Sprintf(";r=%d;", n-1-j)) {
					atomic.AddInt64(&bad, 1)
				}
			}
		}(i)
	}
	wg.Wait()
	return bad
}

// commandsPerRead is Redis's EVALSHA calls per read event during f.
func commandsPerRead(t *testing.T, r *Redis, f func()) float64 {
	t.Helper()
	stat := func() (int64, int64) {
		calls, err := r.Calls("evalsha")
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Info("stats")
		if err != nil {
			t.Fatal(err)
		}
		reads, _ := strconv.ParseInt(m["total_reads_processed"], 10, 64)
		return calls, reads
	}
	c0, r0 := stat()
	f()
	c1, r1 := stat()
	return float64(c1-c0) / float64(r1-r0-2) // the two INFO reads
}

func TestCoalescedChecksShareRoundTrips(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		pod := e.pod()
		// Burst 40 per key, failing closed: a lost or misdelivered reply
		// shows as a wrong r or a 503.
		limit := []interface{}{"average", 40, "period", "1h", "burst", 40, "failureMode", "closed", "redis.timeout", "1s"}
		off := e.handler(pod, "off@file", e.opts(append(limit, "redis.pipeline", 0)...))
		on := e.handler(pod, "on@file", e.opts(append(limit, "redis.pipeline", 1)...))
		for _, h := range []http.Handler{off, on} {
			do(h, "GET", "/", "warm") // EVALSHA loaded, pools dialled
		}
		var bad int64
		perReadOff := commandsPerRead(t, e.redis, func() { bad += concurrently(t, off, 32, 40) })
		perReadOn := commandsPerRead(t, e.redis, func() { bad += concurrently(t, on, 32, 40) })
		t.Logf("EVALSHA per Redis read event, 32 goroutines: %.2f one connection per check, %.2f coalesced on 1 lane", perReadOff, perReadOn)
		if bad != 0 {
			t.Fatalf("%d of 2560 concurrent checks got a wrong answer", bad)
		}
		if perReadOff > 1.2 || perReadOn < 1.5 {
			t.Fatalf("EVALSHA per read %.2f without coalescing, %.2f with: want about 1, then several", perReadOff, perReadOn)
		}
		// After SCRIPT FLUSH every check of a batch is answered NOSCRIPT and
		// sent again as EVAL: nothing fails.
		if _, err := e.redis.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if bad = concurrently(t, on, 32, 40); bad != 0 {
			t.Fatalf("after SCRIPT FLUSH %d of 1280 coalesced checks got a wrong answer", bad)
		}
	})
}

func TestCoalescedChecksKeepTheirTimeout(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 600, "period", "1m", "burst", 100,
			"redis.timeout", "20ms", "redis.breakerThreshold", 1000, "redis.pipeline", 2))
		do(h, "GET", "/", "warm")
		if err := e.redis.Pause(); err != nil {
			t.Fatal(err)
		}
		defer e.redis.Resume()
		var slowest int64
		var failed int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					start := time.Now()
					if do(h, "GET", "/", fmt.Sprintf("k%d", g)).Code != 200 {
						atomic.AddInt64(&failed, 1)
					}
					d := int64(time.Since(start))
					for {
						s := atomic.LoadInt64(&slowest)
						if d <= s || atomic.CompareAndSwapInt64(&slowest, s, d) {
							break
						}
					}
				}
			}(g)
		}
		wg.Wait()
		// A check waits for the batch in flight and then its own, each
		// bounded by a deadline no later than its own: 20 ms, plus
		// scheduling on a loaded machine.
		if failed > 0 || time.Duration(slowest) > 20*time.Millisecond+300*time.Millisecond {
			t.Fatalf("Redis frozen, 80 coalesced checks: %d failed, slowest %v; want all to fall back within the 20ms timeout", failed, time.Duration(slowest))
		}
		t.Logf("Redis frozen: slowest of 80 coalesced checks %v (timeout 20ms)", time.Duration(slowest))
	})
}
