package e2e

// Redis Cluster and Sentinel, for real: 3 primaries + 3 replicas created by
// redis-cli --cluster create; a primary, its replica and 3 sentinels. Each
// test runs compiled and through the Yaegi loader, on a fresh deployment.

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// forEachKindBare runs body once per kind, with an env without a Redis.
func forEachKindBare(t *testing.T, body func(t *testing.T, e *env)) {
	for _, kind := range kinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			body(t, &env{t: t, kind: kind, logs: &syncBuffer{}})
		})
	}
}

func startCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := StartCluster(t.TempDir(), 3)
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// topoOpts are options for a limit keyed by X-API-Key on a deployment.
func topoOpts(redisOpts map[string]interface{}, kv ...interface{}) map[string]interface{} {
	return withOptions(map[string]interface{}{
		"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
		"decisionHeader":  "X-Tollgate-Decision",
		"redis":           redisOpts,
	}, kv...)
}

func clusterOpts(c *Cluster, kv ...interface{}) map[string]interface{} {
	return topoOpts(map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "50ms"}, kv...)
}

// bucketKey is the Redis key of an API key's top-level bucket in a class
// (the plugin's clientKey, written out: the format is part of the spec).
func bucketKey(class, apiKey string) string {
	sum := sha256.Sum256([]byte(class + "\x00h:" + apiKey))
	return "tg{" + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
}

// decided returns the decision header of a response.
func decided(rec interface{ Header() http.Header }) string {
	return rec.Header().Get("X-Tollgate-Decision")
}

// outcome is one request of steadyTraffic: when it was sent and
// answered, its status and who decided it (the decision header).
type outcome struct {
	sent, at time.Time
	code     int
	decision string
}

// steadyTraffic sends a request every 10 ms, for key(i), i = 0, 1, ...,
// until the returned stop is called, which returns what happened.
func steadyTraffic(h http.Handler, key func(i int) string) (stop func() []outcome) {
	var mu sync.Mutex
	var out []outcome
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			sent := time.Now()
			rec := do(h, "GET", "/", key(i))
			mu.Lock()
			out = append(out, outcome{sent, time.Now(), rec.Code, decided(rec)})
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() []outcome {
		close(done)
		wg.Wait()
		return out
	}
}

// timeline summarises outcomes as runs of one status and decision, each
// with when its first request was sent, relative to origin:
// "200 redis x52 from -0.512s, 200 local x3 from +0.021s, ...".
func timeline(out []outcome, origin time.Time) string {
	var b strings.Builder
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && out[j].code == out[i].code && out[j].decision == out[i].decision {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s x%d from %+.3fs", out[i].code, out[i].decision, j-i, out[i].sent.Sub(origin).Seconds())
		i = j
	}
	return b.String()
}

// waitDecidedByRedis sends requests for a throw-away key until Redis
// decides one (the topology is learnt off the request's clock).
func waitDecidedByRedis(t *testing.T, h http.Handler, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if decided(do(h, "GET", "/", fmt.Sprintf("warm-%d", time.Now().UnixNano()))) == "redis" {
			return
		}
	}
	t.Fatalf("no request decided by Redis within %v", within)
}

// hammer sends n requests for one key and returns how many passed; every
// decision must be Redis's (or its cached refusal).
func hammer(t *testing.T, h http.Handler, key string, n int) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		rec := do(h, "GET", "/", key)
		if d := decided(rec); d != "redis" && d != "cache" {
			t.Fatalf("request %d for %s: decided by %q (%d), want redis", i, key, d, rec.Code)
		}
		if rec.Code == 200 {
			ok++
		}
	}
	return ok
}
