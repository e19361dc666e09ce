package e2e

// Connections Redis closes while the fleet is busy, and bursts far above
// a pod's connections, on the user's configuration (fleet_burst_test.go:
// 100 a minute, burst 20, 3 replicas, a 5 ms budget per check). Each
// connection has a reader of its own that sees Redis's FIN when it comes,
// so the checks after a kill go to live connections or wait for a dial:
// decided by Redis, exactly. Only a check written before the kill and
// unanswered may have run; it is decided locally, never run twice.

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// flowing sends requests for key to every replica, one at a time per
// replica, every `every`, until stop is closed; wait returns once they
// ended.
func (fe *fleetEnv) flowing(key string, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for rep := range fe.fleet.Replicas {
		wg.Add(1)
		go func(rep int) {
			defer wg.Done()
			for i := 0; i < 10000; i++ { // bounded: 10,000 x every at most
				select {
				case <-done:
					return
				case <-time.After(every):
				}
				fe.send(rep, "GET", "/", key)
			}
		}(rep)
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// clientKill closes every normal client of the fleet's Redis (what a
// failover, a proxy restart or an operator's CLIENT KILL does) and
// returns how many.
func (fe *fleetEnv) clientKill() int {
	fe.t.Helper()
	n, err := fe.redis.Do("CLIENT", "KILL", "TYPE", "normal")
	if err != nil {
		fe.t.Fatalf("CLIENT KILL: %v", err)
	}
	k, _ := n.(int64)
	return int(k)
}

func TestFleetBurstAfterClientKill(t *testing.T) {
	// Traffic flows (one request at a time per replica, every 10 ms), Redis
	// drops every client, and a burst of 60 for a new key comes 100 ms
	// later, then (after another kill) at once. Seen before: connections
	// used less than 500 ms ago were trusted, the burst's checks written
	// to them read EOF, and 1-13 of 60 were decided locally (23-29
	// admitted of 20).
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	for _, delay := range []time.Duration{100 * time.Millisecond, 0} {
		stop := fe.flowing(fleetKey(t, "flow"), 10*time.Millisecond)
		time.Sleep(time.Second)
		killed := fe.clientKill()
		time.Sleep(delay)
		rs, elapsed := fe.burstAt(60, fleetKey(t, "after-"+delay.String()), roundRobin)
		stop()
		t.Logf("%d clients killed %v before the burst", killed, delay)
		checkGlobal(t, "CLIENT KILL, then "+delay.String()+" later 60 concurrent over 3 replicas", rs, elapsed)
		time.Sleep(userProbe) // a breaker a killed check opened has probed
	}
}

func TestFleetBurstIdleClosedByRedis(t *testing.T) {
	// Redis's own `timeout` closes connections idle for 1 s; light
	// traffic (a request per replica every 1.5 s) finds each of its
	// connections closed, then a burst of 60 does: every decision Redis's.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	if _, err := fe.redis.Do("CONFIG", "SET", "timeout", "1"); err != nil {
		t.Fatal(err)
	}
	light := fleetKey(t, "light")
	var rs []reply
	for round := 0; round < 3; round++ {
		time.Sleep(1500 * time.Millisecond)
		for rep := 0; rep < userReplicas; rep++ {
			rs = append(rs, fe.mustSend(rep, "GET", "/", light))
		}
	}
	checkDecided(t, "a request per replica every 1.5 s, Redis closing clients idle 1 s", rs, "redis", "cache")
	time.Sleep(1500 * time.Millisecond)
	burst, elapsed := fe.burstAt(60, fleetKey(t, "burst"), roundRobin)
	checkGlobal(t, "Redis closed idle clients, then 60 concurrent over 3 replicas", burst, elapsed)
}

func TestFleetBurstFarAboveThePool(t *testing.T) {
	// 300 and 600 concurrent requests for one key over 3 replicas: each
	// pod holds 100 or 200 checks at once. Seen before: queued in the pod
	// and then in Redis (15-19 us of Redis CPU each, 4.5-11 ms in all),
	// checks outlived the 5 ms budget and were decided locally (5 of 300,
	// 23 admitted of 20). A check behind the node's own queue waits while
	// Redis answers, up to 10 budgets.
	for _, leased := range []bool{false, true} {
		name := "leases off"
		conf := func(addr string) map[string]interface{} { return userConf(addr) }
		if leased {
			name = "leases on"
			conf = func(addr string) map[string]interface{} { return userConf(addr, "lease", leaseOf(4, "")) }
		}
		t.Run(name, func(t *testing.T) {
			fe := startFleet(t, userReplicas, conf, "api@file")
			fe.mustSend(0, "GET", "/", fleetKey(t, "warm"))
			for _, n := range burstSizes {
				granted := grants(t, fe.redis)
				rs, elapsed := fe.burstAt(n, fleetKey(t, name), roundRobin)
				what := name + ", " + itoa(n) + " concurrent for one key over 3 replicas"
				if !leased {
					checkGlobal(t, what, rs, elapsed)
					continue
				}
				l := leaseLimit{burst: userBurst, iv: userInterval, max: 4}
				checkLeased(t, what, rs, elapsed, l, grants(t, fe.redis)-granted, false)
			}
		})
	}
}

// burstSizes are TestFleetBurstFarAboveThePool's bursts; TOLLGATE_BURSTS
// (comma-separated) sets others, for the figures of a run by hand.
var burstSizes = func() []int {
	v := os.Getenv("TOLLGATE_BURSTS")
	if v == "" {
		return []int{300, 600, 1000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 5000 {
			panic("TOLLGATE_BURSTS: " + v)
		}
		out = append(out, n)
	}
	return out
}()

func TestFleetClientKillMidBurst(t *testing.T) {
	// Redis drops every client while 200 concurrent requests for one key
	// are being checked. A check written before the kill and unanswered
	// may have run: it is decided by its pod's local share, never run
	// again. So Redis ran the script at most once per request, admitted
	// no more than the bucket allows, and the local decisions no more
	// than the pods' local shares.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} { return userConf(addr) }, "api@file")
	fe.mustSend(0, "GET", "/", fleetKey(t, "warm"))
	for round := 0; round < 3; round++ {
		calls, err := fe.redis.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		key := fleetKey(t, "mid"+itoa(round))
		var killed int
		kill := make(chan struct{})
		go func() {
			defer close(kill)
			time.Sleep(time.Duration(2+round) * time.Millisecond)
			killed = fe.clientKill()
		}()
		rs, elapsed := fe.burstAt(200, key, roundRobin)
		<-kill
		after, err := fe.redis.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		n, how := tally(rs)
		refill := int(elapsed / userInterval)
		t.Logf("round %d: %d clients killed; %d of 200 admitted in %v; %d script calls; decisions: %s",
			round, killed, n, elapsed.Round(time.Millisecond), after-calls, formatTally(how))
		if int(after-calls) > len(rs)+1 { // +1: CLIENT KILL's own connection is no script
			t.Errorf("round %d: %d script calls for %d requests: a check ran twice", round, after-calls, len(rs))
		}
		byRedis, byLocal := 0, 0
		for _, r := range rs {
			if r.status != http.StatusOK {
				continue
			}
			if r.header.Get("X-Tollgate-Decision") == "local" {
				byLocal++
			} else {
				byRedis++
			}
		}
		if byRedis > userBurst+refill {
			t.Errorf("round %d: %d admitted by Redis, want at most %d (+%d earned)", round, byRedis, userBurst, refill)
		}
		// A check that may have run is decided by its pod's local share
		// (burst/replicas, rounded up): at most that many more per pod.
		if share := (userBurst + userReplicas - 1) / userReplicas; byLocal > userReplicas*share {
			t.Errorf("round %d: %d admitted locally, more than %d pods' local shares of %d", round, byLocal, userReplicas, share)
		}
		checkHeaders(t, rs)
		time.Sleep(userProbe) // any breaker the kill opened has probed
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
