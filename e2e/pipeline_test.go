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

func TestConcurrentChecksShareRoundTrips(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		pod := e.pod()
		// Burst 40 per key, failing closed: a lost or misdelivered reply
		// shows as a wrong r or a 503.
		h := e.handler(pod, "api@file", e.opts("average", 40, "period", "1h", "burst", 40, "failureMode", "closed", "redis.timeout", "1s"))
		do(h, "GET", "/", "warm") // EVALSHA loaded, pool dialled
		var bad int64
		perRead := commandsPerRead(t, e.redis, func() { bad += concurrently(t, h, 32, 40) })
		clients, err := e.redis.Clients()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("32 goroutines: %.2f EVALSHA per Redis read event, %d connections to Redis (this test's own included)", perRead, clients)
		if bad != 0 {
			t.Fatalf("%d of 1280 concurrent checks got a wrong answer", bad)
		}
		// One connection per concurrent check would be 32.
		if clients > 10 {
			t.Fatalf("%d connections: want concurrent checks pipelined on a few shared connections", clients)
		}
		// Pipelining, seen exactly: behind a gate that holds what the pod
		// sends (none answered meanwhile), 32 concurrent checks are all
		// written, on the connections the pod has (a dial cannot complete
		// while held). A pod that waits for a free connection, or for a
		// reply before the next write, has at most one check in flight per
		// connection and never gets there. (EVALSHA per Redis read event,
		// measured above, depends on the scheduling: whether Redis reads
		// before the next write arrives. Under load it reads each alone.)
		held, carriers := heldChecks(t, e, pod, 32)
		if held != 32 || carriers > 10 {
			t.Fatalf("%d of 32 concurrent checks written while none was answered, on %d connections: want all 32, pipelined on a few shared connections", held, carriers)
		}
		// After SCRIPT FLUSH every pipelined check is answered NOSCRIPT and
		// sent again as EVAL: nothing fails.
		if _, err := e.redis.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if bad = concurrently(t, h, 32, 40); bad != 0 {
			t.Fatalf("after SCRIPT FLUSH %d of 1280 concurrent checks got a wrong answer", bad)
		}
	})
}

// heldChecks sends n concurrent requests (a key each) through a new
// handler on pod whose Redis is behind a holdGate, held once the pool is
// dialled, and returns how many checks were written while held and on
// how many connections; then it releases the gate and fails the test
// unless every request passed.
func heldChecks(t *testing.T, e *env, pod Factory, n int) (held, carriers int) {
	t.Helper()
	g := startHoldGate(t, e.redis.Addr)
	// A timeout far beyond the hold: no check gives up while held.
	h := e.handler(pod, "gated@file", e.opts("average", 40, "period", "1h", "burst", 40, "failureMode", "closed",
		"redis.endpoints", []interface{}{g.Addr()}, "redis.timeout", "20s"))
	do(h, "GET", "/", "warm")
	g.Hold()
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i] = do(h, "GET", "/", fmt.Sprintf("%s-held-%d", uniqueKey(t), i)).Code
		}(i)
	}
	per := g.waitHeld(n, 10*time.Second)
	g.Release()
	wg.Wait()
	for _, k := range per {
		held += k
		if k > 0 {
			carriers++
		}
	}
	t.Logf("%d concurrent checks behind a held gate: %d written, per connection %v", n, held, per)
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d of %d sent while the gate held: status %d, want 200", i, n, c)
		}
	}
	return held, carriers
}

func TestConcurrentChecksKeepTheirTimeout(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 600, "period", "1m", "burst", 100,
			"redis.timeout", "20ms", "redis.breakerThreshold", 1000))
		do(h, "GET", "/", "warm")
		if err := e.redis.Pause(); err != nil {
			t.Fatal(err)
		}
		defer e.redis.Resume()
		took := make([]time.Duration, 80)
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
					took[g*5+i] = time.Since(start)
				}
			}(g)
		}
		wg.Wait()
		sortDurations(took)
		median, p90 := took[39], took[71]
		t.Logf("Redis frozen, 80 concurrent checks (timeout 20ms): median %v, 90th percentile %v, slowest %v", median, p90, took[79])
		// Each check's deadline is its write time plus 20 ms, whoever
		// reads the connection it shares with the others: every check
		// falls back at about 20 ms. Measured on 2 cores shared with other
		// test runs (16 runs each, compiled and interpreted): median 21.7
		// to 27.7 ms, 90th percentile 22 to 54 ms, slowest 22 to 152 ms.
		// The slowest measures the machine's scheduling, not the plugin,
		// and is not bounded; the median and the 90th percentile are, at
		// about 3 times their worst excess over the timeout. Caught: a
		// check given the renewal's cap (10 timeouts) from its write
		// (median 200 ms), and checks timing out in turn on their shared
		// connection, each renewed when the one before it gives up (90th
		// percentile 200 ms). The old bound (slowest within 320 ms)
		// passed both.
		if failed > 0 || median > 50*time.Millisecond || p90 > 120*time.Millisecond {
			t.Fatalf("Redis frozen, 80 concurrent checks: %d failed, median %v, 90th percentile %v; want all to fall back at the 20ms timeout (median at most 50ms, 90th percentile at most 120ms)",
				failed, median, p90)
		}
	})
}

// burstAdmitted sends n concurrent requests for key to h and returns how
// many were admitted and the decision header's tally.
func burstAdmitted(h http.Handler, n int, key string) (int, map[string]int) {
	codes := make([]int, n)
	how := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rec := do(h, "GET", "/", key)
			codes[i], how[i] = rec.Code, rec.Header().Get("X-Tollgate-Decision")
		}(i)
	}
	wg.Wait()
	admitted, tally := 0, map[string]int{}
	for i := range codes {
		if codes[i] == 200 {
			admitted++
		}
		tally[how[i]]++
	}
	return admitted, tally
}

// decidedByRedis reports whether every decision of tally was Redis's
// (or the deny cache's, which repeats Redis's refusals).
func decidedByRedis(tally map[string]int) bool {
	for how := range tally {
		if how != "redis" && how != "cache" {
			return false
		}
	}
	return true
}

func TestBurstAtAColdPodIsExact(t *testing.T) {
	// A pod that just started (its pool's first connection still being
	// dialled), 300 concurrent requests for one key, burst 20 per hour:
	// exactly 20 admitted, all decided by Redis. The same with poolSize 4
	// and 200 concurrent requests.
	forEachKind(t, func(t *testing.T, e *env) {
		for _, tc := range []struct {
			desc     string
			n        int
			poolSize int
		}{
			{desc: "300 concurrent, default pool", n: 300},
			{desc: "200 concurrent, poolSize 4", n: 200, poolSize: 4},
		} {
			o := e.opts("average", 20, "period", "1h", "burst", 20, "decisionHeader", "X-Tollgate-Decision", "redis.timeout", "5ms")
			if tc.poolSize > 0 {
				o = withOptions(o, "redis.poolSize", tc.poolSize)
			}
			h := e.handler(e.pod(), "api@file", o)
			admitted, tally := burstAdmitted(h, tc.n, uniqueKey(t))
			t.Logf("%s: %d admitted, decisions %v", tc.desc, admitted, tally)
			if admitted != 20 || !decidedByRedis(tally) {
				t.Fatalf("%s: %d admitted, decisions %v; want exactly 20, all by Redis", tc.desc, admitted, tally)
			}
		}
	})
}

func TestBurstAfterRedisReturnsIsExact(t *testing.T) {
	// Redis dies, the breaker opens; Redis returns and no request comes
	// for probeInterval + 1 s; then a burst: exact, decided by Redis.
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 20, "period", "1h", "burst", 20, "decisionHeader", "X-Tollgate-Decision",
			"redis.timeout", "5ms", "redis.breakerThreshold", 3, "redis.probeInterval", "1s"))
		do(h, "GET", "/", "warm")
		e.redis.Kill()
		for i := 0; i < 10; i++ {
			do(h, "GET", "/", "during")
		}
		if got := do(h, "GET", "/", "during").Header().Get("X-Tollgate-Decision"); got != "local" {
			t.Fatalf("Redis down: decided %q, want local", got)
		}
		if err := e.redis.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		admitted, tally := burstAdmitted(h, 60, uniqueKey(t))
		t.Logf("60 concurrent 2 s after Redis returned: %d admitted, decisions %v", admitted, tally)
		if admitted != 20 || !decidedByRedis(tally) {
			t.Fatalf("%d admitted, decisions %v; want exactly 20, all by Redis", admitted, tally)
		}
	})
}
