package e2e

// The fleet under steady traffic while its Redis is killed, frozen, or
// restarted empty.

import (
	"strconv"
	"testing"
	"time"
)

func TestFleetRedisKilled(t *testing.T) {
	// 600 a minute, burst 20, 3 replicas: while Redis is down each replica
	// allows 200 a minute (3.33/s) and bursts of 6. POST /login fails closed.
	// No replicas setting: the pods count each other by heartbeat (with
	// replicas at its default, 1, each would allow the whole limit).
	const probe = time.Second
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		login := map[string]interface{}{"name": "login", "pathPrefix": "/login", "methods": []interface{}{"POST"},
			"average": 60, "period": "1m", "burst": 10, "failureMode": "closed"}
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 600, "period", "1m", "burst", 20,
			"redis.heartbeat", "500ms", "rules", []interface{}{login}, "redis.probeInterval", "1s", "decisionHeader", "X-Tollgate-Decision")})
	}, "api@file")
	steady := []string{fleetKey(t, "steady1"), fleetKey(t, "steady2")}
	runaway, login := fleetKey(t, "runaway"), fleetKey(t, "login")
	d := fe.drive(
		flow{steady[0], "GET", "/", 300 * time.Millisecond},
		flow{steady[1], "GET", "/", 300 * time.Millisecond},
		flow{runaway, "GET", "/", 10 * time.Millisecond},
		flow{login, "POST", "/login", 200 * time.Millisecond},
	)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	fe.redis.Kill()
	const down = 4 * time.Second
	time.Sleep(down)
	// Requests sent while Restart runs may meet the new Redis: the checks
	// of "Redis down" end when it starts.
	restarting := time.Now()
	if err := fe.redis.Restart(); err != nil {
		d.Stop()
		t.Fatal(err)
	}
	restarted := time.Now()
	recovered := waitScriptCalls(t, fe.redis, probe+time.Second)
	time.Sleep(2 * time.Second)
	before, _ := fe.redis.ScriptCalls()
	from := time.Now()
	time.Sleep(2 * time.Second)
	to := time.Now()
	after, _ := fe.redis.ScriptCalls()
	d.Stop()

	// Fail-open: nothing on GET failed, before, during or after.
	for _, k := range append(steady, runaway) {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d failed requests on a fail-open route, first: %v", len(f), f[0])
		}
	}
	for _, k := range steady {
		ss := d.window(k, time.Time{}, to)
		if n, _ := admitted(ss); n != len(ss) {
			t.Fatalf("steady key %s: %d of %d admitted", k, n, len(ss))
		}
	}
	// Who decided: Redis before the kill, the local buckets during the
	// outage (the decision header, as an access log would record it).
	// (A check that misses its 5 ms budget falls back by design; on a
	// shared 2-core machine a few do, so up to 2% may be local.)
	var local int
	preKill := d.window(runaway, time.Time{}, killed.Add(-50*time.Millisecond)) // not in flight at the kill
	for _, s := range preKill {
		switch got := s.header.Get("X-Tollgate-Decision"); got {
		case "redis", "cache":
		case "local":
			local++
		default:
			t.Fatalf("before the kill: %v decided by %q", s, got)
		}
	}
	if local*50 > len(preKill) {
		t.Fatalf("before the kill: %d of %d requests decided locally", local, len(preKill))
	}
	// (From 200 ms after the kill: a refusal cached just before it is in
	// force for at most one token's refill, 100 ms.)
	for _, s := range d.window(runaway, killed.Add(200*time.Millisecond), restarting) {
		if got := s.header.Get("X-Tollgate-Decision"); got != "local" {
			t.Fatalf("Redis down: %v decided by %q", s, got)
		}
	}
	// The runaway key is held near each replica's local share.
	ss := d.window(runaway, killed, restarted)
	n, per := admitted(ss)
	secs := restarted.Sub(killed).Seconds()
	share := 6 + 200.0/60*secs // one replica's local bucket over the outage
	if float64(n) > 3*share+3 || float64(n) < share {
		t.Fatalf("runaway key admitted %d of %d while Redis was down (%.1f s), want about 3 x %.0f", n, len(ss), secs, share)
	}
	for rep, c := range per {
		if float64(c) > share+2 {
			t.Fatalf("replica %d admitted %d for the runaway key while Redis was down, local share %.0f", rep, c, share)
		}
	}
	// The login rule fails closed: 503 problem+json with Retry-After.
	var closed int
	for _, s := range d.window(login, killed.Add(100*time.Millisecond), restarting) {
		if s.err != nil || s.status != 503 {
			t.Fatalf("POST /login while Redis was down: %v, want 503", s)
		}
		if s.header.Get("Retry-After") != "1" || s.header.Get("Content-Type") != "application/problem+json" || s.header.Get("RateLimit") == "" {
			t.Fatalf("503 headers %v", s.header)
		}
		closed++
	}
	if closed < 5 {
		t.Fatalf("only %d POST /login answered while Redis was down", closed)
	}
	// Recovery: Redis sees checks again within probeInterval + 1 s, and
	// then every request is checked there.
	t.Logf("Redis down %.1f s; runaway admitted %d (%v) of %d; scripts again %v after restart; %d script calls for the last 2 s",
		secs, n, per, len(ss), recovered.Sub(restarted).Round(time.Millisecond), after-before)
	// (Refusals Redis made and that are still in force are repeated by
	// each replica's deny cache without a call: "cache".)
	var sent, cached int
	for _, k := range append(steady, runaway, login) {
		for _, s := range d.window(k, from, to) {
			switch s.header.Get("X-Tollgate-Decision") {
			case "cache":
				cached++
			case "redis":
				sent++
			default:
				t.Fatalf("after recovery: %v decided by %q", s, s.header.Get("X-Tollgate-Decision"))
			}
		}
	}
	t.Logf("after recovery: %d requests decided by Redis, %d by the deny cache", sent, cached)
	// The 429s (from Redis, the deny cache and the local buckets) and the
	// 503s of the closed rule never reached the backend.
	var every []reply
	d.mu.Lock()
	for _, s := range d.samples {
		every = append(every, s.reply)
	}
	d.mu.Unlock()
	checkBackendHits(t, fe, every)
	if after-before < int64(sent)*9/10 || sent < len(d.window(steady[0], from, to)) {
		t.Fatalf("after recovery Redis ran %d scripts for %d requests", after-before, sent)
	}
}

func TestFleetRedisFrozen(t *testing.T) {
	// SIGSTOP: connections stay open and nothing answers. Each check gives
	// up after the timeout (5 ms); the breaker then stops trying.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100,
			"replicas", 3, "redis.timeout", "5ms", "redis.probeInterval", "1s")})
	}, "api@file")
	var flows []flow
	var keys []string
	for i := 0; i < 3; i++ {
		keys = append(keys, fleetKey(t, strconv.Itoa(i)))
		flows = append(flows, flow{keys[i], "GET", "/", 20 * time.Millisecond})
	}
	d := fe.drive(flows...)
	time.Sleep(500 * time.Millisecond) // connections dialled
	started := time.Now()
	time.Sleep(3 * time.Second)
	paused := time.Now()
	if err := fe.redis.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	resumed := time.Now()
	_ = fe.redis.Resume()
	time.Sleep(time.Second)
	d.Stop()
	var base, stall []sample
	for _, k := range keys {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d failed requests, first: %v", len(f), f[0])
		}
		base = append(base, d.window(k, started, paused)...)
		stall = append(stall, d.window(k, paused, resumed)...)
	}
	p99b, p99s := percentile(base, 99), percentile(stall, 99)
	t.Logf("p50/p99 latency: %v/%v with Redis, %v/%v while frozen (%d, %d requests)",
		percentile(base, 50), p99b, percentile(stall, 50), p99s, len(base), len(stall))
	// A check waits at most its timeout for Redis, renewed once when the
	// reply before it on its connection arrives (a burst pipelined ahead
	// of it): the checks in flight at the freeze may wait two timeouts.
	if p99s-p99b > 11*time.Millisecond {
		t.Fatalf("frozen Redis added %v at p99, want at most two timeouts (5 ms) + 1 ms", p99s-p99b)
	}
}

func TestFleetRedisRestartedAndFlushed(t *testing.T) {
	// /strict fails closed, so a check that Redis did not answer shows as a
	// 503: SCRIPT FLUSH must be invisible (NOSCRIPT, then EVAL). / fails
	// open: a restart of Redis, empty, must not fail a request.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(
			route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100, "redis.probeInterval", "1s")},
			route{"strict", "PathPrefix(`/strict`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100,
				"failureMode", "closed", "redis.timeout", "1s")})
	}, "api@file", "strict@file")
	open, strict := fleetKey(t, "open"), fleetKey(t, "strict")
	d := fe.drive(flow{open, "GET", "/", 10 * time.Millisecond}, flow{strict, "GET", "/strict", 10 * time.Millisecond})
	time.Sleep(time.Second)
	evals, _ := fe.redis.Calls("eval")
	if _, err := fe.redis.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	evalsAfter, _ := fe.redis.Calls("eval")
	if f := d.failures(strict); len(f) > 0 {
		d.Stop()
		t.Fatalf("after SCRIPT FLUSH %d requests failed, first: %v", len(f), f[0])
	}
	if evalsAfter <= evals {
		d.Stop()
		t.Fatalf("no EVAL after SCRIPT FLUSH (%d before, %d after): the flush was not seen", evals, evalsAfter)
	}
	if err := fe.redis.Restart(); err != nil {
		d.Stop()
		t.Fatal(err)
	}
	restarted := time.Now()
	recovered := waitScriptCalls(t, fe.redis, 2*time.Second)
	time.Sleep(time.Second)
	d.Stop()
	if f := d.failures(open); len(f) > 0 {
		t.Fatalf("Redis restart: %d failed requests on a fail-open route, first: %v", len(f), f[0])
	}
	t.Logf("SCRIPT FLUSH: %d EVAL after; restart: scripts again after %v", evalsAfter-evals, recovered.Sub(restarted).Round(time.Millisecond))
}
