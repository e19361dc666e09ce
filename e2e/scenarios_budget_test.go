package e2e

// Scenarios of the shared budget: one budget across instances, rules
// charged all or nothing, the time to retry, the pods counted by their
// heartbeats, a hot client split over shards.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOneBudgetAcrossInstances: three middleware instances of one class in
// this test process share one budget in Redis. Interpreted, each instance
// is a Yaegi interpreter of its own, with its own registry, pool, deny
// cache and fallback buckets, as separate Traefik processes have;
// compiled, the three share the process's. Separate processes, real
// Traefik replicas behind their own entrypoints: TestFleetOneBudget
// (fleet_test.go).
func TestOneBudgetAcrossInstances(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// 60 per hour refills one token a minute: nothing refills during
		// the test, so exactly burst requests may pass. failureMode closed
		// makes any Redis failure visible as a 503 instead of a fallback.
		o := e.opts("average", 60, "period", "1h", "burst", 20, "failureMode", "closed", "class", "api")
		var instances []http.Handler
		for i := 0; i < 3; i++ {
			instances = append(instances, e.handler(e.pod(), "api@file", o))
		}
		key := uniqueKey(t)
		codes := make([]int, 90)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				codes[i] = do(instances[i%3], "GET", "/", key).Code
			}(i)
		}
		wg.Wait()
		if c := count(codes); c[200] != 20 || c[429] != 70 {
			t.Fatalf("90 concurrent requests over 3 instances: %v, want 20 x 200 and 70 x 429", c)
		}
		// Another key has its own budget.
		other := uniqueKey(t) + "-other"
		for i := 0; i < 21; i++ {
			want := 200
			if i == 20 {
				want = 429
			}
			if got := do(instances[i%3], "GET", "/", other).Code; got != want {
				t.Fatalf("other key, request %d: status %d, want %d", i, got, want)
			}
		}
		// Another class has its own budget; the same class shares it.
		otherClass := e.handler(e.pod(), "other@file", e.opts("average", 60, "period", "1h", "burst", 20, "class", "other"))
		if got := do(otherClass, "GET", "/", key).Code; got != 200 {
			t.Fatalf("same key, other class: status %d, want 200", got)
		}
		sameClass := e.handler(e.pod(), "elsewhere@file", e.opts("average", 60, "period", "1h", "burst", 20, "class", "api"))
		if got := do(sameClass, "GET", "/", key).Code; got != 429 {
			t.Fatalf("same key, same class on another router: status %d, want 429", got)
		}
	})
}

func TestRulesChargedAllOrNothing(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 60, "period", "1h", "burst", 10, "class", "api",
			"rules", []interface{}{map[string]interface{}{
				"name": "login", "pathPrefix": "/login", "methods": "POST", "average": 60, "period": "1h", "burst": 3,
			}}))
		key := uniqueKey(t)
		for i := 0; i < 3; i++ {
			rec := do(h, "POST", "/login", key)
			want := fmt.Sprintf(`"api";r=%d;t=0, "login";r=%d;t=%d`, 9-i, 2-i, map[bool]int{true: 60, false: 0}[i == 2])
			if rec.Code != 200 || rec.Header().Get("RateLimit") != want {
				t.Fatalf("login %d: %d %q, want 200 %q", i, rec.Code, rec.Header().Get("RateLimit"), want)
			}
			if p := rec.Header().Get("RateLimit-Policy"); p != `"api";q=60;w=3600, "login";q=60;w=3600` {
				t.Fatalf("RateLimit-Policy = %q", p)
			}
		}
		rec := do(h, "POST", "/login", key)
		if rec.Code != 429 || !strings.Contains(rec.Body.String(), `"violated-policies":["login"]`) {
			t.Fatalf("4th login: %d %s, want 429 violating login", rec.Code, rec.Body)
		}
		// The refused login charged nothing: the top-level bucket holds 7
		// tokens, so this request leaves 6.
		rec = do(h, "GET", "/other", key)
		if rec.Code != 200 || rec.Header().Get("RateLimit") != `"api";r=6;t=0` {
			t.Fatalf("GET after refused login: %d %q, want 200 \"api\";r=6;t=0", rec.Code, rec.Header().Get("RateLimit"))
		}
		// GET /login does not match the POST-only rule.
		if rec = do(h, "GET", "/login", key); rec.Header().Get("RateLimit") != `"api";r=5;t=0` {
			t.Fatalf("GET /login: %q", rec.Header().Get("RateLimit"))
		}
	})
}

func TestRefusalTellsWhenToRetry(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 6, "period", "1m", "burst", 2, "class", "api", "headers", "both"))
		key := uniqueKey(t)
		do(h, "GET", "/", key)
		do(h, "GET", "/", key)
		rec := do(h, "GET", "/", key)
		if rec.Code != 429 {
			t.Fatalf("status %d, want 429", rec.Code)
		}
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > 10 {
			t.Fatalf("Retry-After = %q, want 1..10 s", rec.Header().Get("Retry-After"))
		}
		if got, want := rec.Header().Get("RateLimit"), fmt.Sprintf(`"api";r=0;t=%d`, ra); got != want {
			t.Fatalf("RateLimit = %q, want %q", got, want)
		}
		if rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("Content-Type = %q", rec.Header().Get("Content-Type"))
		}
		var body map[string]interface{}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
		if body["status"] != float64(429) || body["retry_after"] != float64(ra) ||
			body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" {
			t.Fatalf("problem body = %v", body)
		}
		if rec.Header().Get("X-RateLimit-Limit") != "6" || rec.Header().Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("legacy headers: %v", rec.Header())
		}
	})
}

func TestHeartbeatCountsPods(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// Three pods serve a class; one stops; within 3 heartbeats the
		// others count 2, and a pod's fallback then admits burst/2. Each
		// yaegi pod is an interpreter of its own, hence a pod of its own.
		// Compiled handlers share the test process, hence one pod: the
		// other two are stand-ins that the test registers as another
		// process would (ZADD at Redis's TIME, in ms), and the third
		// stops by no longer registering. Either way the drop-out is the
		// plugin's: its heartbeat removes members silent for 3 heartbeats
		// and takes the count it divides by. Caught: members never
		// dropped (the count stays 3, the share 20).
		const n = 3
		pods := make([]http.Handler, n)
		for i := range pods {
			pods[i] = e.handler(e.pod(), "api@file", e.opts("class", "hb", "average", 600, "period", "1m", "burst", 60,
				"redis.heartbeat", "200ms", "redis.timeout", "50ms"))
		}
		beat := func(member string) {
			if _, err := e.redis.Do("EVAL", `local t = redis.call('TIME')
return redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[1])`, 1, "tg{hb:hb}", member); err != nil {
				t.Fatal(err)
			}
		}
		// serveFor runs the first k pods for d: each serves traffic (a
		// compiled stand-in beats instead).
		serveFor := func(k int, d time.Duration) {
			for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
				for p := 0; p < k; p++ {
					if e.kind == "compiled" && p > 0 {
						beat(fmt.Sprintf("stand-in-%d", p))
						continue
					}
					do(pods[p], "GET", "/", fmt.Sprintf("client-%d", i))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		serveFor(n, 700*time.Millisecond)
		if got, err := redisInt(e.redis.Do("ZCARD", "tg{hb:hb}")); err != nil || got != n {
			t.Fatalf("pods registered: %d (%v), want %d", got, err, n)
		}
		// The third pod stops; within 3 heartbeats (600 ms) the others
		// count 2.
		serveFor(n-1, 1300*time.Millisecond)
		if got, err := redisInt(e.redis.Do("ZCARD", "tg{hb:hb}")); err != nil || got != n-1 {
			t.Fatalf("pods registered after one stopped: %d (%v), want %d", got, err, n-1)
		}
		// What the pods saw is what their fallback divides by: a fresh key
		// gets burst/2 on a pod once Redis is gone.
		e.redis.Kill()
		var codes []int
		runaway := uniqueKey(t)
		for i := 0; i < 60; i++ {
			codes = append(codes, do(pods[0], "GET", "/", runaway).Code)
		}
		if c := count(codes); c[200] != 60/(n-1) {
			t.Fatalf("local share with Redis down: %v, want %d admitted (burst 60 / %d pods)", c, 60/(n-1), n-1)
		}
	})
}

func TestShardsSplitAHotClient(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// 40 per hour, burst 40, over 4 shards of 10: a client hammering
		// gets exactly the limit, from four keys.
		h := e.handler(e.pod(), "api@file", e.opts("average", 40, "period", "1h", "burst", 40, "shards", 4))
		key := uniqueKey(t)
		var codes []int
		for i := 0; i < 200; i++ {
			rec := do(h, "GET", "/", key)
			codes = append(codes, rec.Code)
			if i == 0 && rec.Header().Get("RateLimit") != `"api@file";r=36;t=0` {
				t.Fatalf("first request: RateLimit %q, want r = 4 x the shard's 9", rec.Header().Get("RateLimit"))
			}
		}
		if c := count(codes); c[200] != 40 || c[429] != 160 {
			t.Fatalf("hammering a sharded limit: %v, want exactly 40 admitted", c)
		}
		keys, err := redisStrings(e.redis.Do("KEYS", "tg{??????????:?}"))
		if err != nil || len(keys) != 4 {
			t.Fatalf("shard keys %v (%v), want 4", keys, err)
		}
	})
}
