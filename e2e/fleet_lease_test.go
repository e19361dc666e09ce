package e2e

// Leases (lease: {max, ttl}) on a fleet of 3 replicas and one redis-server:
// the user's configuration of fleet_burst_test.go with a lease added.
//
// The bound. Redis charges a lease's tokens when it grants it, and keeps
// what live leases hold out of the bucket (at most burst less that), so
// over any span of length L the fleet admits at most burst + what the
// bucket earns in L, leases included: at the span's start the bucket and
// the leases hold burst between them. A reply counts for a span only when
// its decision surely fell inside it: sent at or after the span's start,
// answered by its end (client-side skew can only leave a request out).
//
// The bursts keep the user's 5 ms budget per check; the other loads, about
// exactness alone, give a check 1 s (TestFleetOneBudget's reason): on a
// loaded machine a check past 5 ms is decided locally.
//
// Under-admission. A lease's unspent tokens are out of the bucket until it
// ends; the tests count grants (Redis's HSET calls: one per grant of a
// one-bucket set) and lease decisions, so a burst's floor is burst less
// what its leases did not spend.

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// The bursts' limits: 60 concurrent on / (burst 40, leases of 3: one is
// granted while 18 tokens stay after it), 300 on /big (burst 200, leases
// of 10: granted while 60 stay). Both 100 a minute.
var (
	leaseSmall = leaseLimit{burst: 40, iv: userInterval, max: 3}
	leaseBig   = leaseLimit{burst: 200, iv: userInterval, max: 10}
)

func leaseBurstConf(addr string) map[string]interface{} {
	return dynamicConf(
		leaseRoute("api", "/", addr, "average", 100, "period", "1m", "burst", leaseSmall.burst, "lease", leaseOf(leaseSmall.max, "")),
		leaseRoute("big", "/big", addr, "average", 100, "period", "1m", "burst", leaseBig.burst, "lease", leaseOf(leaseBig.max, "")),
	)
}

// leaseBursts runs the two bursts on new keys and checks them.
func leaseBursts(t *testing.T, fe *fleetEnv, what string) {
	g := grants(t, fe.redis)
	rs, elapsed := fe.burstPath(60, "/", fleetKey(t, "small"))
	g2 := grants(t, fe.redis)
	checkLeased(t, what+", 60 concurrent over 3 replicas, burst 40", rs, elapsed, leaseSmall, g2-g)
	rs, elapsed = fe.burstPath(300, "/big", fleetKey(t, "big"))
	checkLeased(t, what+", 300 concurrent over 3 replicas, burst 200", rs, elapsed, leaseBig, grants(t, fe.redis)-g2)
}

func TestFleetLeaseBurstColdStart(t *testing.T) {
	fe := startFleet(t, userReplicas, leaseBurstConf, "api@file", "big@file")
	leaseBursts(t, fe, "cold fleet")
}

func TestFleetLeaseBurstAfterRedisRestart(t *testing.T) {
	// As TestFleetBurstAfterRedisRestart: every breaker open, Redis back
	// empty (no script, no lease hash), then the bursts.
	fe := startFleet(t, userReplicas, leaseBurstConf, "api@file", "big@file")
	fe.redis.Kill()
	outage := fleetKey(t, "outage")
	for i := 0; i < userReplicas; i++ {
		rs, _ := fe.sequential(i, 10, outage, 10*time.Second)
		if got := rs[len(rs)-1].header.Get("X-Tollgate-Decision"); got != "local" {
			t.Fatalf("replica %d with Redis down: decided by %q, want local", i, got)
		}
	}
	if err := fe.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(userProbe + time.Second)
	leaseBursts(t, fe, "Redis restarted 3 s ago")
}

// A hot client at 200 requests a second per replica for 10 s (each
// replica's sender keeps at most 4 out).
const (
	hotEvery    = 5 * time.Millisecond
	hotTicks    = 2000
	hotInflight = 4
)

var (
	// Over the limit: 150 a second, burst 150, leases of 10 (granted while
	// 60 stay after the request: at the start only).
	hotOver = leaseLimit{burst: 150, iv: time.Second / 150, max: 10}
	// Under it: 3000 a second; every lease asked for is granted.
	hotUnder = leaseLimit{burst: 3000, iv: time.Second / 3000, max: 10}
)

func TestFleetLeaseHotClient(t *testing.T) {
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} {
		return dynamicConf(
			leaseRoute("api", "/", addr, "average", 150, "period", "1s", "burst", hotOver.burst, "lease", leaseOf(hotOver.max, ""), "redis.timeout", "1s"),
			leaseRoute("fast", "/fast", addr, "average", 3000, "period", "1s", "burst", hotUnder.burst, "lease", leaseOf(hotUnder.max, ""), "redis.timeout", "1s"),
		)
	}, "api@file", "fast@file")

	rs, skipped := fe.pacedPath("/", fleetKey(t, "over"), hotEvery, hotTicks, hotInflight)
	n, how := tally(rs)
	first, last := span(rs)
	t.Logf("over the limit (150/s, burst 150): %d sent (%d ticks skipped) in %v, %d admitted; decisions: %s",
		len(rs), skipped, last.Sub(first).Round(time.Millisecond), n, formatTally(how))
	checkWindows(t, "over the limit", rs, hotOver, time.Second, 100*time.Millisecond)
	if how["lease"] == 0 || n == len(rs) {
		t.Errorf("over the limit: %d of %d admitted, %d from leases: want some from leases and some refused", n, len(rs), how["lease"])
	}
	if other := len(rs) - how["redis"] - how["cache"] - how["lease"]; other > 0 {
		t.Errorf("over the limit: %d of %d decided otherwise (%s), want every one by redis, cache or lease", other, len(rs), formatTally(how))
	}
	checkHeaders(t, rs)

	// Under the limit, most requests are the pods' own: script calls
	// (give-backs included: their ttl is 1 s) per request admitted.
	time.Sleep(1500 * time.Millisecond) // the first run's give-backs
	before, err := fe.redis.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	rs, skipped = fe.pacedPath("/fast", fleetKey(t, "under"), hotEvery, hotTicks, hotInflight)
	time.Sleep(1500 * time.Millisecond) // this run's give-backs
	after, err := fe.redis.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	n, how = tally(rs)
	first, last = span(rs)
	calls := after - before
	perAdmitted := float64(calls) / float64(n)
	t.Logf("under the limit (3000/s): %d sent (%d ticks skipped) in %v, %d admitted; %d script calls: %.3f per admitted request; decisions: %s",
		len(rs), skipped, last.Sub(first).Round(time.Millisecond), n, calls, perAdmitted, formatTally(how))
	if n != len(rs) {
		t.Errorf("under the limit: %d of %d admitted, want all (%s)", n, len(rs), formatTally(how))
	}
	if other := len(rs) - how["redis"] - how["lease"]; other > 0 {
		t.Errorf("under the limit: %d of %d decided otherwise (%s), want every one by redis or lease", other, len(rs), formatTally(how))
	}
	if n == 0 || perAdmitted > 0.2 {
		t.Errorf("under the limit: %d script calls for %d admitted (%.3f each), want at most 0.2 each", calls, n, perAdmitted)
	}
	checkHeaders(t, rs)
}

// A client busy enough to hold a lease on every replica (a request a
// second on each, 4 times: each replica's first is Redis's, with a grant
// of 20, the rest spend it), under a limit that refills the bucket to
// burst less the leases while they are out (30 a second, burst 200:
// leases granted while 120 stay), then 300 concurrent within the leases'
// ttl (5 s). The replicas' leases hold 51 requests then: a fleet that
// also gave the bucket back what they hold would admit burst + 51.
var leaseHeld = leaseLimit{burst: 200, iv: time.Second / 30, max: 20}

func TestFleetLeaseHeldThenBurst(t *testing.T) {
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} {
		return dynamicConf(leaseRoute("api", "/", addr, "average", 30, "period", "1s", "burst", leaseHeld.burst, "lease", leaseOf(leaseHeld.max, "5s"), "redis.timeout", "1s"))
	}, "api@file")
	key := fleetKey(t, "held")
	g := grants(t, fe.redis)
	hot, _ := fe.pacedPath("/", key, 800*time.Millisecond, 4, 1)
	hn, hhow := tally(hot)
	t.Logf("hot client: %d of %d admitted; decisions: %s", hn, len(hot), formatTally(hhow))
	if hn != len(hot) {
		t.Fatalf("hot client: %d of %d admitted (%s), want all", hn, len(hot), formatTally(hhow))
	}
	for rep := range fe.fleet.Replicas {
		leased := 0
		for _, r := range hot {
			if r.replica == rep && r.header.Get("X-Tollgate-Decision") == "lease" {
				leased++
			}
		}
		if leased == 0 {
			t.Fatalf("hot client: replica %d admitted none from a lease (%s), want a lease on every replica", rep, formatTally(hhow))
		}
	}
	keys, err := redis.Strings(fe.redis.Do("KEYS", "tg{*}l"))
	if err != nil || len(keys) != 1 {
		t.Fatalf("lease hashes %v (%v), want one", keys, err)
	}
	fields, err := redis.StringMap(fe.redis.Do("HGETALL", keys[0]))
	if err != nil || len(fields) != userReplicas {
		t.Fatalf("lease hash %s: %v (%v), want a lease of each replica", keys[0], fields, err)
	}
	t.Logf("leases out before the burst: %v", fields)

	rs, elapsed := fe.burstPath(300, "/", key)
	granted := grants(t, fe.redis) - g
	n, how := tally(rs)
	t.Logf("then 300 concurrent: %d admitted in %v, allowed at most %d (burst %d + earned); decisions: %s; %d leases granted in all, %d of their requests unspent",
		n, elapsed.Round(time.Millisecond), leaseHeld.allows(elapsed), leaseHeld.burst, formatTally(how), granted, granted*leaseHeld.max-how["lease"]-hhow["lease"])
	if n > leaseHeld.allows(elapsed) {
		t.Errorf("300 concurrent with leases out on every replica: %d admitted in %v, want at most %d: what the leases hold is part of the burst",
			n, elapsed.Round(time.Millisecond), leaseHeld.allows(elapsed))
	}
	first, last := span(append(append([]reply(nil), hot...), rs...))
	if all := hn + n; all > leaseHeld.allows(last.Sub(first)) {
		t.Errorf("hot client and burst: %d admitted in %v, want at most %d", all, last.Sub(first).Round(time.Millisecond), leaseHeld.allows(last.Sub(first)))
	}
	if how["lease"] == 0 {
		t.Errorf("300 concurrent: none admitted from the leases out (%s)", formatTally(how))
	}
	if other := len(rs) - how["redis"] - how["cache"] - how["lease"]; other > 0 {
		t.Errorf("300 concurrent: %d of %d decided otherwise (%s), want every one by redis, cache or lease", other, len(rs), formatTally(how))
	}
	checkHeaders(t, rs)
}

// A lease spent on its pod just before its ttl ends, then a burst just
// after: the requests it admitted count against the burst. 10 a second,
// burst 200, a lease of 25 for 3 s (the bucket refills to burst less the
// lease within it); 25 concurrent on the lease's replica 2 s after the
// grant, then 300 concurrent over the replicas once the ttl is over.
var leaseEnds = leaseLimit{burst: 200, iv: time.Second / 10, max: 25}

func TestFleetLeaseEndsThenBurst(t *testing.T) {
	const ttl = 3 * time.Second
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} {
		return dynamicConf(leaseRoute("api", "/", addr, "average", 10, "period", "1s", "burst", leaseEnds.burst, "lease", leaseOf(leaseEnds.max, ttl.String()), "redis.timeout", "1s"))
	}, "api@file")
	key := fleetKey(t, "ends")
	g := grants(t, fe.redis)
	r0 := fe.mustSend(0, "GET", "/", key)
	if got := grants(t, fe.redis) - g; r0.status != 200 || got != 1 {
		t.Fatalf("first request: status %d (%s), %d leases granted; want 200 and one", r0.status, r0.header.Get("X-Tollgate-Decision"), got)
	}
	granted := r0.at.Add(r0.latency) // Redis's end of the lease is at most ttl after
	time.Sleep(time.Until(r0.at.Add(2 * time.Second)))
	spend, _ := fe.burstAt(leaseEnds.max, key, firstReplica)
	if n, how := tally(spend); n != leaseEnds.max || how["lease"] != leaseEnds.max {
		t.Fatalf("%d concurrent on replica 0, 2 s into its lease: %d admitted (%s), want all from the lease", leaseEnds.max, n, formatTally(how))
	}
	time.Sleep(time.Until(granted.Add(ttl + 50*time.Millisecond)))
	rs, elapsed := fe.burstPath(300, "/", key)
	all := append(append([]reply(nil), spend...), rs...)
	n, how := tally(rs)
	first, last := span(all)
	t.Logf("lease spent %v before its end, then 300 concurrent: %d admitted in %v (decisions: %s); with the lease's %d: %d in %v, allowed at most %d",
		granted.Add(ttl).Sub(first).Round(time.Millisecond), n, elapsed.Round(time.Millisecond), formatTally(how),
		leaseEnds.max, n+leaseEnds.max, last.Sub(first).Round(time.Millisecond), leaseEnds.allows(last.Sub(first)))
	if n+leaseEnds.max > leaseEnds.allows(last.Sub(first)) {
		t.Errorf("a lease of %d spent, then 300 concurrent after it ended: %d admitted in %v, want at most %d: the lease's requests are part of the burst",
			leaseEnds.max, n+leaseEnds.max, last.Sub(first).Round(time.Millisecond), leaseEnds.allows(last.Sub(first)))
	}
	if other := len(rs) - how["redis"] - how["cache"] - how["lease"]; other > 0 {
		t.Errorf("300 concurrent: %d of %d decided otherwise (%s), want every one by redis, cache or lease", other, len(rs), formatTally(how))
	}
	checkHeaders(t, rs)
}
