package e2e

// Scenarios of what the plugin holds: its Redis connections (under many
// calls, shared by concurrent checks, over reloads), its goroutines, and
// the keys it leaves in Redis.

import (
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestManyNewCallsOpenNoMoreConnections(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		pod := e.pod()
		o := e.opts("average", 600, "period", "1m", "burst", 100)
		do(e.handler(pod, "warm@file", o), "GET", "/", "warm")
		before, err := e.redis.Clients()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			h := e.handler(pod, fmt.Sprintf("r%d@file", i), o)
			if c := do(h, "GET", "/", "k").Code; c != 200 && c != 429 {
				t.Fatalf("handler %d: %d", i, c)
			}
		}
		// At most two connections are in use at once, the check's and the
		// heartbeat's (one batch for all 1000 classes), and each may have
		// started a dial that completed after another connection was
		// returned: 4, plus this test's own.
		after, _ := e.redis.Clients()
		if after > 5 {
			t.Fatalf("connected clients %d -> %d after 1000 New calls, want at most 5", before, after)
		}
	})
}

func TestConcurrentChecksGetTheirOwnReplies(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// 16 goroutines on 4 pods, each with its own key and burst 50: any
		// reply delivered to the wrong request shows as a wrong r.
		var pods []http.Handler
		for i := 0; i < 4; i++ {
			pods = append(pods, e.handler(e.pod(), "api@file", e.opts("average", 60, "period", "1h", "burst", 50, "failureMode", "closed")))
		}
		var bad int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				key := fmt.Sprintf("%s-%d", uniqueKey(t), g)
				for i := 0; i < 50; i++ {
					rec := do(pods[g%4], "GET", "/", key)
					if rec.Code != 200 || !strings.Contains(rec.Header().Get("RateLimit"), fmt.Sprintf(";r=%d;", 49-i)) {
						atomic.AddInt64(&bad, 1)
					}
				}
			}(g)
		}
		wg.Wait()
		if bad != 0 {
			t.Fatalf("%d of 800 concurrent checks got a wrong answer", bad)
		}
	})
}

func TestKeysExpireWhenFullAndHideTheIdentity(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// 1 token/s, burst 10; the rule 1 token/2s, burst 3.
		h := e.handler(e.pod(), "api@file", e.opts("average", 60, "period", "1m", "burst", 10,
			"rules", []interface{}{map[string]interface{}{"name": "search", "pathPrefix": "/search", "average": 30, "period": "1m", "burst": 3}}))
		key := "sk_live_" + uniqueKey(t)
		for i := 0; i < 3; i++ {
			if c := do(h, "GET", "/search", key).Code; c != 200 {
				t.Fatalf("request %d: %d", i, c)
			}
		}
		keys, err := redisStrings(e.redis.Do("KEYS", "tg{??????????}*"))
		if err != nil || len(keys) != 2 {
			t.Fatalf("KEYS tg{<10>}* = %v (%v), want the client's two buckets", keys, err)
		}
		sort.Strings(keys)
		top, rule := keys[0], keys[1]
		if !strings.HasPrefix(top, "tg{") || !strings.HasSuffix(top, "}") || rule != top+":search" {
			t.Fatalf("keys %q, %q: want tg{tag} and tg{tag}:search (one hash slot)", top, rule)
		}
		if strings.Contains(top+rule, "sk_live") {
			t.Fatalf("the API key appears in Redis: %q", keys)
		}
		// Compact buckets: the TAT is an integer Redis keeps inside the
		// key's object, and the 14-byte key fits a 16-byte allocation.
		if enc, err := redisString(e.redis.Do("OBJECT", "ENCODING", top)); err != nil || enc != "int" {
			t.Fatalf("OBJECT ENCODING %s = %q (%v), want int", top, enc, err)
		}
		if n, err := redisInt(e.redis.Do("MEMORY", "USAGE", top)); err != nil || n > 64 {
			t.Fatalf("MEMORY USAGE %s = %d (%v), want at most 64 bytes", top, n, err)
		}
		// Each key expires when its bucket is full again: 3 tokens taken at
		// 1/s and at 1/2s.
		for _, k := range []struct {
			key    string
			lo, hi int64
		}{{top, 2000, 3000}, {rule, 4000, 6000}} {
			ttl, err := redisInt(e.redis.Do("PTTL", k.key))
			if err != nil || ttl <= k.lo || ttl > k.hi {
				t.Fatalf("PTTL %s = %d (%v), want in (%d, %d] ms", k.key, ttl, err, k.lo, k.hi)
			}
		}
	})
}

func redisStrings(v interface{}, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	vs, ok := v.([]interface{})
	if !ok {
		return nil, fmt.Errorf("not an array: %v", v)
	}
	var out []string
	for _, x := range vs {
		b, ok := x.([]byte)
		if !ok {
			return nil, fmt.Errorf("not a bulk string: %v", x)
		}
		out = append(out, string(b))
	}
	return out, nil
}

func redisInt(v interface{}, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("not an integer: %v", v)
	}
	return n, nil
}

func TestReloadsKeepConnectionsFlat(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// Traefik calls New again on every reload. 200 reloads changing the
		// limit, timeout, pool size and breaker settings, with traffic in
		// between, reuse one pool: Redis sees no more connections.
		pod := e.pod()
		do(e.handler(pod, "api@file", e.opts("average", 600, "period", "1m", "burst", 100)), "GET", "/", "warm")
		// The heartbeat's connection, dialled after the first check.
		time.Sleep(200 * time.Millisecond)
		before, err := e.redis.Clients()
		if err != nil {
			t.Fatal(err)
		}
		g0 := goroutinesFloor(time.Second, -1)
		var h http.Handler
		for i := 0; i < 200; i++ {
			h = e.handler(pod, "api@file", e.opts("average", 600+i, "period", "1m", "burst", 100,
				"redis.timeout", fmt.Sprintf("%dms", 500+i), "redis.poolSize", 8+i%5,
				"redis.breakerThreshold", 3+i%2, "redis.probeInterval", fmt.Sprintf("%ds", 2+i%3)))
			for j := 0; j < 3; j++ {
				if c := do(h, "GET", "/", fmt.Sprintf("client-%d-%d", i, j)).Code; c != 200 {
					t.Fatalf("reload %d, request %d: %d", i, j, c)
				}
			}
		}
		after, _ := e.redis.Clients()
		if after > before {
			t.Fatalf("connected clients %d -> %d after 200 reloads, want no growth", before, after)
		}
		if p := do(h, "GET", "/", "client-last").Header().Get("RateLimit-Policy"); !strings.Contains(p, "q=799;") {
			t.Fatalf("after the reloads RateLimit-Policy = %q, want the latest limit q=799", p)
		}
		// Nor does the process keep more goroutines: every one the plugin
		// starts ends by itself (dials, the heartbeat batch). The floor
		// over up to 5 s is compared (a dial or a heartbeat may be running
		// at any one look). Measured (3 runs, compiled and interpreted): 3
		// before, 3 after, the floor over 5 s. Caught: a goroutine started
		// in New that never ends (200 more).
		g1 := goroutinesFloor(5*time.Second, g0+reloadSlack)
		t.Logf("goroutines: %d before 200 reloads, %d after", g0, g1)
		if g1 > g0+reloadSlack {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before 200 reloads, at least %d for 5 s after, want at most %d more:\n%s",
				g0, g1, reloadSlack, buf[:runtime.Stack(buf, true)])
		}
	})
}

// reloadSlack is how many more goroutines than before the test process
// may run after TestReloadsKeepConnectionsFlat's reloads.
const reloadSlack = 2

// goroutinesFloor samples the process's goroutines every 10 ms for d and
// returns the fewest seen, early once a sample is at most stopAt.
func goroutinesFloor(d time.Duration, stopAt int) int {
	floor := runtime.NumGoroutine()
	for end := time.Now().Add(d); floor > stopAt && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		if g := runtime.NumGoroutine(); g < floor {
			floor = g
		}
	}
	return floor
}
