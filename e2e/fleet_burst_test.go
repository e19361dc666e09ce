package e2e

// Bursts on a fleet configured as a new user would configure it (the
// configuration below, word for word): 100 a minute, burst 20, 3 replicas,
// a 5 ms budget per check, one redis-server.
//
//	average: 100
//	period: 1m
//	burst: 20
//	replicas: 3
//	sourceCriterion: {requestHeaderName: X-API-Key}
//	decisionHeader: X-Tollgate-Decision
//	redis: {endpoints: ["127.0.0.1:PORT"], timeout: 5ms, breakerThreshold: 3, probeInterval: 2s}
//
// Each test starts a fleet of its own, so a fresh fleet is fresh: no
// request has dialled a connection or beaten a heartbeat before the test's
// own.
//
// The bounds. A new key's bucket holds burst tokens and earns one every
// interval (600 ms; 1.8 s for one pod's local share), so over a span of
// elapsed at most burst + floor(elapsed/interval) requests pass. Every
// decision of a load falls between its first send and its last reply,
// which is the elapsed measured here. When Redis decides every request,
// the first burst of them pass: at least burst.

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

const (
	userBurst    = 20
	userInterval = time.Minute / 100 // one token per 600 ms
	userReplicas = 3
	userProbe    = 2 * time.Second
)

// userConf is the configuration above on redisAddr, with kv added.
func userConf(redisAddr string, kv ...interface{}) map[string]interface{} {
	opts := limitOpts(redisAddr, append([]interface{}{
		"average", 100, "period", "1m", "burst", userBurst, "replicas", userReplicas,
		"decisionHeader", "X-Tollgate-Decision",
		"redis.timeout", "5ms", "redis.breakerThreshold", 3, "redis.probeInterval", "2s",
	}, kv...)...)
	return dynamicConf(route{"api", "PathPrefix(`/`)", opts})
}

// burstAt sends n concurrent requests for key, request i to replica at(i),
// and returns the replies and the time from the first send to the last
// reply. The client's timeout (10 s) bounds it: a reply not in by then is
// a transport error.
func (fe *fleetEnv) burstAt(n int, key string, at func(i int) int) ([]reply, time.Duration) {
	return fe.burstTo(n, "/", key, at)
}

// burstTo is burstAt on path.
func (fe *fleetEnv) burstTo(n int, path, key string, at func(i int) int) ([]reply, time.Duration) {
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = fe.send(at(i), "GET", path, key)
		}(i)
	}
	wg.Wait()
	return out, time.Since(start)
}

func roundRobin(i int) int { return i % userReplicas }
func firstReplica(int) int { return 0 }

// sequential sends n requests for key to replica one after another, and
// returns the replies and the time they took; it fails the test when they
// take longer than within.
func (fe *fleetEnv) sequential(replica, n int, key string, within time.Duration) ([]reply, time.Duration) {
	fe.t.Helper()
	var out []reply
	start := time.Now()
	for i := 0; i < n; i++ {
		if time.Since(start) > within {
			fe.t.Fatalf("%d sequential requests on replica %d: only %d answered within %v", n, replica, i, within)
		}
		out = append(out, fe.mustSend(replica, "GET", "/", key))
	}
	return out, time.Since(start)
}

// tally returns the admitted replies and the decisions (X-Tollgate-Decision)
// of rs, "error" for a transport error.
func tally(rs []reply) (admitted int, how map[string]int) {
	how = map[string]int{}
	for _, r := range rs {
		if r.err != nil {
			how["error"]++
			continue
		}
		if r.status == http.StatusOK {
			admitted++
		}
		how[r.header.Get("X-Tollgate-Decision")]++
	}
	return admitted, how
}

func formatTally(how map[string]int) string {
	var ks []string
	for k := range how {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%d", k, how[k]))
	}
	return strings.Join(parts, " ")
}

// checkGlobal reports (without stopping the test, so that later loads still
// show their numbers) unless Redis decided every reply of rs, directly or
// through its deny cache, and exactly the global burst passed, plus what
// the bucket earned over elapsed. Then the headers (checkHeaders).
func checkGlobal(t *testing.T, what string, rs []reply, elapsed time.Duration) {
	t.Helper()
	n, how := tally(rs)
	refill := int(elapsed / userInterval)
	t.Logf("%s: %d of %d admitted in %v (allowed %d..%d); decisions: %s",
		what, n, len(rs), elapsed.Round(time.Millisecond), userBurst, userBurst+refill, formatTally(how))
	if n < userBurst || n > userBurst+refill {
		t.Errorf("%s: %d of %d admitted, want %d (+%d earned in %v)", what, n, len(rs), userBurst, refill, elapsed.Round(time.Millisecond))
	}
	if other := len(rs) - how["redis"] - how["cache"]; other > 0 {
		t.Errorf("%s: %d of %d decided without Redis (%s), want every one by redis or cache", what, other, len(rs), formatTally(how))
	}
	checkHeaders(t, rs)
}

func TestFleetBurstColdStart(t *testing.T) {
	// No warm-up request: the pools are empty when the burst arrives, and
	// their first dials must not send checks to the local fallback.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	rs, elapsed := fe.burstAt(60, fleetKey(t, "a"), roundRobin)
	checkGlobal(t, "cold fleet, 60 concurrent over 3 replicas", rs, elapsed)
	rs, elapsed = fe.burstAt(300, fleetKey(t, "b"), roundRobin)
	checkGlobal(t, "then a new key, 300 concurrent over 3 replicas", rs, elapsed)
}

// restartAfterOutage kills Redis, opens every replica's breaker, restarts
// Redis (empty, same port) and sends nothing for a probe interval and a
// second.
func (fe *fleetEnv) restartAfterOutage() {
	fe.t.Helper()
	fe.redis.Kill()
	outage := fleetKey(fe.t, "outage")
	for i := 0; i < userReplicas; i++ {
		// breakerThreshold (3) failures open each replica's breaker; 10
		// leave no doubt.
		rs, _ := fe.sequential(i, 10, outage, 10*time.Second)
		if got := rs[len(rs)-1].header.Get("X-Tollgate-Decision"); got != "local" {
			fe.t.Fatalf("replica %d with Redis down: decided by %q, want local", i, got)
		}
	}
	if err := fe.redis.Restart(); err != nil {
		fe.t.Fatal(err)
	}
	time.Sleep(userProbe + time.Second)
}

func TestFleetBurstAfterRedisRestart(t *testing.T) {
	// Redis dies, every breaker opens, Redis comes back (empty, same
	// port), and nothing is sent for a probe interval and a second: the
	// first burst afterwards is the global limit's again.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	fe.restartAfterOutage()
	rs, elapsed := fe.burstAt(60, fleetKey(t, "after"), roundRobin)
	checkGlobal(t, "Redis restarted 3 s ago, 60 concurrent over 3 replicas", rs, elapsed)
}

func TestFleetBurstHeartbeatCountUntrusted(t *testing.T) {
	// replicas: 3, and the heartbeat (default 5 s) counts the pods itself.
	// Only replica 0 has beaten when Redis dies: its count is 1, from a
	// pod that has not watched a window (3 heartbeats) in which the others
	// would have shown. Until it has, the divisor is max(replicas, count),
	// so replica 0's share is a third of the limit, not all of it.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	warm := fleetKey(t, "warm")
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A successful check asks for a heartbeat; ZCARD is its last command.
		fe.mustSend(0, "GET", "/", warm)
		if n, err := fe.redis.Calls("zcard"); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 0 sent no heartbeat within 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the ZCARD reply reaches the pod
	keys, err := redis.Strings(fe.redis.Do("KEYS", "tg{hb:*"))
	if err != nil || len(keys) == 0 {
		t.Fatalf("heartbeat sets %v (%v), want one", keys, err)
	}
	for _, k := range keys {
		if n, err := redis.Int(fe.redis.Do("ZCARD", k)); err != nil || n != 1 {
			t.Fatalf("heartbeat set %s counts %d pods (%v), want 1: only replica 0 has had traffic", k, n, err)
		}
	}
	fe.redis.Kill()
	rs, elapsed := fe.sequential(0, 30, fleetKey(t, "down"), 10*time.Second)
	n, how := tally(rs)
	share := (userBurst + userReplicas - 1) / userReplicas // ceil(20/3) = 7
	refill := int(elapsed / (userInterval * userReplicas)) // 100/3 a minute: one per 1.8 s
	t.Logf("replica 0 alone with Redis down: %d of %d admitted in %v (allowed at most %d); decisions: %s",
		n, len(rs), elapsed.Round(time.Millisecond), share+refill, formatTally(how))
	checkHeaders(t, rs)
	if n > share+refill {
		t.Fatalf("replica 0 admitted %d of 30 with Redis down, want at most %d (its third of burst %d, +%d earned in %v)",
			n, share+refill, userBurst, refill, elapsed.Round(time.Millisecond))
	}
}

func TestFleetBurstSmallPool(t *testing.T) {
	// redis.poolSize 4 and 200 concurrent requests on one replica: checks
	// wait their turn for a connection (or share one) rather than fall back.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} {
		return userConf(addr, "redis.poolSize", 4)
	}, "api@file")
	rs, elapsed := fe.burstAt(200, fleetKey(t, "a"), firstReplica)
	checkGlobal(t, "poolSize 4, 200 concurrent on replica 0", rs, elapsed)
}
