package e2e

import (
	"fmt"
	"strconv"
	"testing"
)

// With Redis down, a flood of new clients on one middleware must not free
// a limited client on another: each class has its own local buckets. On
// one store shared by the pod (100000 buckets, a quarter dropped at random
// whenever full) the flood below empties it a dozen times or more, and K's
// empty bucket goes with it: K is let through again.
func TestLocalFloodOnOneClassFreesNoClientOfAnother(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// Each flood client fills rules+1 buckets on A: compiled, 960000 in
		// all; interpreted (slower per request), 680000.
		clients, rules := 120000, 7
		if e.kind == "yaegi" {
			clients, rules = 40000, 16
		}
		pod := e.pod()
		b := e.handler(pod, "b@file", e.opts("average", 60, "period", "1h", "burst", 3, "class", "isolate-b",
			"decisionHeader", "X-Tollgate-Decision", "redis.timeout", "50ms"))
		var rs []interface{}
		for i := 0; i < rules; i++ {
			rs = append(rs, map[string]interface{}{"name": "r" + strconv.Itoa(i), "pathPrefix": "/", "average": 60, "period": "1h", "burst": 10})
		}
		// A's buckets stay far from full for the whole test (60 per hour),
		// so none can be dropped as full again.
		a := e.handler(pod, "a@file", e.opts("average", 60, "period", "1h", "burst", 10, "class", "isolate-a", "rules", rs,
			"decisionHeader", "X-Tollgate-Decision", "redis.timeout", "50ms"))
		e.redis.Kill()
		key := uniqueKey(t)
		for i, want := range []int{200, 200, 200, 429} {
			rec := do(b, "GET", "/", key)
			if rec.Code != want || rec.Header().Get("X-Tollgate-Decision") != "local" {
				t.Fatalf("K on B with Redis down, request %d: %d decided by %q, want %d by local", i, rec.Code, rec.Header().Get("X-Tollgate-Decision"), want)
			}
		}
		prefix := fmt.Sprintf("%s-flood-", key)
		for i := 0; i < clients; i++ {
			if rec := do(a, "GET", "/", prefix+strconv.Itoa(i)); rec.Code != 200 {
				t.Fatalf("flood client %d on A: %d decided by %q, want 200 (a first request)", i, rec.Code, rec.Header().Get("X-Tollgate-Decision"))
			}
		}
		rec := do(b, "GET", "/", key)
		if rec.Code != 429 || rec.Header().Get("X-Tollgate-Decision") != "local" {
			t.Fatalf("K on B after %d new clients on A (%d buckets): %d decided by %q, want 429 by local (its empty bucket was evicted)",
				clients, clients*(rules+1), rec.Code, rec.Header().Get("X-Tollgate-Decision"))
		}
	})
}
