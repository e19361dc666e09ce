package e2e

// Failovers under traffic: a Cluster primary killed, a Sentinel failover.

import (
	"fmt"
	"testing"
	"time"
)

// Switch-over bounds of the failover tests, 2.3-3x the worst measured
// (see each test).
const (
	// clusterBackBound bounds the time from a primary's kill to the
	// first request decided by Redis again.
	clusterBackBound = 7 * time.Second
	// clusterLagBound bounds the time from the promotion (as the test's
	// polling sees it) to the sending of the first request Redis decided
	// again.
	clusterLagBound = 750 * time.Millisecond
	// sentinelSwitchBound bounds the time from SENTINEL FAILOVER to the
	// new primary's first check.
	sentinelSwitchBound = 3 * time.Second
)

// TestClusterPrimaryKilledUnderTraffic kills the primary of 5 clients'
// slots while they send a request every 10 ms within their limit (Redis
// Cluster, node timeout 1 s). Every request passes, and the decision
// header says who decided: before the kill every request is decided by
// Redis; after it, the local fallback decides (fail-open) in one stretch
// until the replica is promoted, then Redis decides every request again,
// on the promoted replica (its script calls count them). The switch-over
// is bounded: Redis decides again at most clusterBackBound after the kill
// and clusterLagBound after the promotion.
//
// Measured (42 runs, compiled and Yaegi, 2 cores shared with other test
// runs): Redis decided again 2.05-2.96 s after the kill, from 0.1 s before
// to 0.25 s after the test saw every node agree on the promotion.
//
// Catches (tried): a changed slot map that does not let the next check
// through the open breaker (loadSlots without probeSoon): Redis never
// decides again within the test (the old version of this test passed 3
// times in 4 with it, under the default 3 s probe). Also a build whose
// checks fall back while the cluster is healthy, or for longer than the
// promotion (the map not read again after a failed check).
func TestClusterPrimaryKilledUnderTraffic(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		pod := e.pod()
		// A timeout of 1 s, not 50 ms: on a loaded machine a check now and
		// then takes longer than 50 ms (measured: 1 in ~5 runs, right after
		// the promotion or at random) and is decided locally, which would
		// blur who decided around the failover. The dead primary refuses
		// connections at once, whatever the timeout. The breaker opens
		// after the kill; its probe interval (10 s) is longer than the
		// test, so Redis decides again only if the new slot map lets the
		// next check through at once, not by the breaker's own probe.
		redisOpts := []interface{}{"redis.timeout", "1s", "redis.probeInterval", "10s"}
		h := e.handler(pod, "api@file", clusterOpts(c, append([]interface{}{"class", "api", "average", 6000, "period", "1m", "burst", 50}, redisOpts...)...))
		slow := e.handler(pod, "slow@file", clusterOpts(c, append([]interface{}{"class", "slow", "average", 50, "period", "1h", "burst", 50}, redisOpts...)...))
		waitDecidedByRedis(t, h, 5*time.Second)
		// Clients whose buckets live on the primary about to die.
		victim := c.Primaries()[0]
		before, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		victimSlots := map[int]bool{}
		for slot, owner := range before {
			if owner == victim.Addr {
				victimSlots[slot] = true
			}
		}
		var clients []string
		for i := 0; len(clients) < 5; i++ {
			k := fmt.Sprintf("%s-%d", t.Name(), i)
			if _, owner := slotOf(t, c, bucketKey("api", k)); owner == victim {
				clients = append(clients, k)
			}
		}
		// 5 clients at 20 requests/s each: within 100/s.
		stop := steadyTraffic(h, func(i int) string { return clients[i%len(clients)] })
		time.Sleep(time.Second)
		killed := time.Now()
		victim.Kill()
		dead := time.Now() // the process is gone: requests sent since cannot reach it
		err = c.WaitHealthy(20 * time.Second)
		promoted := time.Now()
		time.Sleep(2 * time.Second)
		results := stop()
		if err != nil {
			t.Fatal(err)
		}
		owners, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		var heir *Redis // the promoted replica
		for slot := range victimSlots {
			heir = c.Node(owners[slot])
			break
		}
		if heir == nil || heir == victim {
			t.Fatalf("the dead primary's slots are owned by %v", heir)
		}
		heirCalls, err := heir.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		story := timeline(results, killed)
		var healthy, local, again int
		var back *outcome // the first request after the kill decided by Redis
		for i := range results {
			r := &results[i]
			switch {
			case r.code != 200:
				t.Fatalf("%+.3fs: %d (%s): a client within its limit was refused around the failover: %s", r.sent.Sub(killed).Seconds(), r.code, r.decision, story)
			case r.at.Before(killed):
				if r.decision != "redis" {
					t.Fatalf("%+.3fs: decided by %q before the kill, want redis: %s", r.sent.Sub(killed).Seconds(), r.decision, story)
				}
				healthy++
			case r.sent.Before(dead):
				// In flight during the kill: either.
			case back == nil && r.decision == "local":
				local++
			case r.decision == "redis":
				if back == nil {
					back = r
				}
				again++
			case back == nil:
				t.Fatalf("%+.3fs: decided by %q after the kill, want local, then redis: %s", r.sent.Sub(killed).Seconds(), r.decision, story)
			default:
				t.Fatalf("%+.3fs: decided by %q after Redis decided again (%+.3fs), want redis: %s", r.sent.Sub(killed).Seconds(), r.decision, back.sent.Sub(killed).Seconds(), story)
			}
		}
		if healthy < 20 || local == 0 || back == nil || again < 50 {
			t.Fatalf("%d requests decided by Redis before the kill (want 20 or more), %d locally after it (want some), %d by Redis again (want 50 or more): %s", healthy, local, again, story)
		}
		t.Logf("primary killed; replica promoted after %v; %d requests decided locally (fail-open); Redis decided again %v after the kill, %v after the promotion was seen",
			promoted.Sub(killed).Round(time.Millisecond), local, back.at.Sub(killed).Round(time.Millisecond), back.sent.Sub(promoted).Round(time.Millisecond))
		if d := back.at.Sub(killed); d > clusterBackBound {
			t.Fatalf("Redis decided again %v after the kill, want at most %v: %s", d.Round(time.Millisecond), clusterBackBound, story)
		}
		if d := back.sent.Sub(promoted); d > clusterLagBound {
			t.Fatalf("Redis decided again %v after the promotion, want at most %v: %s", d.Round(time.Millisecond), clusterLagBound, story)
		}
		// Every request Redis decided after the kill ran on the promoted
		// replica (which ran no script before: replicas get the effects).
		if heirCalls < int64(again) {
			t.Fatalf("the promoted replica %s ran %d scripts, want at least the %d requests decided by Redis after the kill", heir.Addr, heirCalls, again)
		}
		// The limit holds again, on the promoted replica: a fresh client
		// whose bucket is in the dead primary's slots.
		fresh := ""
		for i := 0; fresh == ""; i++ {
			k := fmt.Sprintf("%s-after-%d", t.Name(), i)
			if slot, _ := slotOf(t, c, bucketKey("slow", k)); victimSlots[slot] {
				fresh = k
			}
		}
		if n := hammer(t, slow, fresh, 70); n != 50 {
			t.Fatalf("after the failover a fresh client got %d of 70, want the burst, 50", n)
		}
	})
}

func startSentinels(t *testing.T) *Sentinels {
	t.Helper()
	s, err := StartSentinels(t.TempDir())
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestSentinelFailoverUnderTraffic runs SENTINEL FAILOVER while clients
// send a request every 10 ms within their limit. Every request passes,
// and the decision header says who decided: before the command every
// request is decided by Redis; local decisions (fail-open) happen only in
// the switch-over window, from the command until switchSlack after the new
// primary ran its first check; after it every request is decided by Redis,
// on the new primary (the old one runs no more checks, the new one at
// least as many as those requests). The new primary runs its first check
// at most sentinelSwitchBound after the command.
//
// Measured (24 runs, compiled and Yaegi, 2 cores shared with other test
// runs): the new primary ran its first check 1.12-1.31 s after the
// command (Sentinel announces +switch-master once it has seen the replica
// report itself primary, polled every second); no request was decided
// locally (the old primary stays writable until Sentinel demotes it).
//
// Catches (tried): a watcher that ignores +switch-master: the old
// primary, writable for 11 s more, keeps the checks until it is demoted
// and answers READONLY (first check on the new primary after 11.2 s).
// Also a build that keeps checking on the old primary, or falls back
// outside the switch-over.
func TestSentinelFailoverUnderTraffic(t *testing.T) {
	const switchSlack = 300 * time.Millisecond
	forEachKindBare(t, func(t *testing.T, e *env) {
		s := startSentinels(t)
		// A timeout of 1 s, not 50 ms, as in the cluster's failover test.
		h := e.handler(e.pod(), "api@file", topoOpts(map[string]interface{}{
			"mode": "sentinel", "endpoints": s.Addrs(), "masterName": MasterName,
			"sentinelPassword": SentinelPassword, "password": DataPassword, "timeout": "1s",
		}, "class", "api", "average", 600, "period", "1m", "burst", 20))
		waitDecidedByRedis(t, h, 5*time.Second)
		if n := hammer(t, h, t.Name()+"-before", 30); n != 20 {
			t.Fatalf("before the failover: %d of 30 admitted, want 20", n)
		}
		if n, _ := s.Primary.ScriptCalls(); n == 0 {
			t.Fatal("the primary ran no script")
		}
		// 20 clients at 5 requests/s each at most: within 10/s.
		stop := steadyTraffic(h, func(i int) string { return fmt.Sprintf("steady-%d", i%20) })
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		if _, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", MasterName); err != nil {
			stop()
			t.Fatal(err)
		}
		var switched time.Duration
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n, _ := s.Replica.ScriptCalls(); n > 0 {
				switched = time.Since(start)
				break
			}
		}
		// The window ends: checks in flight on the old primary are done.
		time.Sleep(switchSlack)
		oldAt, err1 := s.Primary.ScriptCalls()
		newAt, err2 := s.Replica.ScriptCalls()
		settled := time.Now()
		time.Sleep(time.Second)
		results := stop()
		oldEnd, err3 := s.Primary.ScriptCalls()
		newEnd, err4 := s.Replica.ScriptCalls()
		for _, err := range []error{err1, err2, err3, err4} {
			if err != nil {
				t.Fatal(err)
			}
		}
		story := timeline(results, start)
		if switched == 0 {
			t.Fatalf("the promoted replica ran no script within 20 s of SENTINEL FAILOVER: %s", story)
		}
		var healthy, local, after int
		for _, o := range results {
			at := o.sent.Sub(start).Seconds()
			switch {
			case o.code != 200:
				t.Fatalf("%+.3fs: %d (%s): a client within its limit was refused around the failover: %s", at, o.code, o.decision, story)
			case o.at.Before(start):
				if o.decision != "redis" {
					t.Fatalf("%+.3fs: decided by %q before the failover, want redis: %s", at, o.decision, story)
				}
				healthy++
			case o.sent.After(settled):
				if o.decision != "redis" {
					t.Fatalf("%+.3fs: decided by %q after the switch-over (the new primary's first check at %+.3fs), want redis: %s", at, o.decision, switched.Seconds(), story)
				}
				after++
			case o.decision == "local":
				local++
			case o.decision != "redis":
				t.Fatalf("%+.3fs: decided by %q during the switch-over, want redis or local: %s", at, o.decision, story)
			}
		}
		t.Logf("SENTINEL FAILOVER: the new primary ran its first check %v later; %d requests decided locally; %s", switched.Round(time.Millisecond), local, story)
		if healthy < 20 || after < 30 {
			t.Fatalf("%d requests decided by Redis before the failover (want 20 or more), %d after it (want 30 or more): %s", healthy, after, story)
		}
		if switched > sentinelSwitchBound {
			t.Fatalf("the new primary ran its first check %v after SENTINEL FAILOVER, want at most %v: %s", switched.Round(time.Millisecond), sentinelSwitchBound, story)
		}
		if oldEnd != oldAt || newEnd-newAt < int64(after) {
			t.Fatalf("after the switch-over the old primary ran %d scripts (want none), the new one %d (want at least the %d requests)", oldEnd-oldAt, newEnd-newAt, after)
		}
		if addr, err := s.MasterAddr(); err != nil || addr != s.Replica.Addr {
			t.Fatalf("sentinels name %s (%v) as primary, want the replica %s", addr, err, s.Replica.Addr)
		}
		if n := hammer(t, h, t.Name()+"-after", 30); n != 20 {
			t.Fatalf("after the failover: %d of 30 admitted, want 20", n)
		}
	})
}
