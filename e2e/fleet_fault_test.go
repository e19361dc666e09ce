package e2e

// Fault drills: "exact while Redis is up", checked on the first burst after
// an incident, on a fleet configured as a new user would (userConf). Each
// run of a drill makes the pools busy (drillWarm concurrent requests over
// the replicas, a warm-up key each, so each pod holds several connections),
// brings on one fault, and, drillSettle (probeInterval + 1.5 s) after Redis
// answers the test's PING again, sends drillBurst concurrent requests
// round-robin for a fresh key: checkGlobal (the burst plus what the bucket
// earned, every decision Redis's or its deny cache's). Each run logs what
// every replica counted from Redis answering again to the burst's end
// (fleet_fault_counters_test.go), so a burst that fell back says why.
//
// TOLLGATE_DRILL_RUNS (default 1) runs each drill that many times on its
// fleet, each run on fresh keys after a fresh fault:
//
//	TOLLGATE_DRILL_RUNS=10 go test -count=1 -run TestFleetFault -v .

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	drillWarm   = 300
	drillBurst  = 60
	drillSettle = userProbe + 1500*time.Millisecond
	drillOutage = time.Second             // Redis down, in the restart drills
	drillFreeze = 1500 * time.Millisecond // Redis stopped, in the freeze drills
)

// drillRuns is TOLLGATE_DRILL_RUNS, 1 when unset.
func drillRuns(t *testing.T) int {
	s := os.Getenv("TOLLGATE_DRILL_RUNS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 100 {
		t.Fatalf("TOLLGATE_DRILL_RUNS=%q: want a number from 1 to 100", s)
	}
	return n
}

// drill is one fault and what a run needs around it.
type drill struct {
	// fault brings on the fault and returns when Redis answered the
	// test's PING again.
	fault func(t *testing.T, run int) time.Time
	// after, when set, undoes what the fault left behind (a setting, a
	// dead node), once the run's burst is checked.
	after func(t *testing.T)
	// node is the Redis that holds the drill's keys (its clients are
	// logged).
	node func() *Redis
	// key, when set, returns a fresh client key where the drill wants its
	// bucket (a slot); fleetKey otherwise.
	key func(t *testing.T, suffix string) string
}

// run runs the drill drillRuns times on fe.
func (d drill) run(t *testing.T, fe *fleetEnv) {
	t.Helper()
	key := d.key
	if key == nil {
		key = fleetKey
	}
	for run := 1; run <= drillRuns(t); run++ {
		warm := key(t, fmt.Sprintf("warm%d", run))
		n, how := tally(fe.warmUp(drillWarm, func(i int) string { return fmt.Sprintf("%s-%d", warm, i) }))
		t.Logf("run %d: warm-up, %d concurrent: %d admitted; decisions: %s; Redis clients: %s",
			run, drillWarm, n, formatTally(how), clientsOf(d.node()))
		start := time.Now()
		back := d.fault(t, run)
		t.Logf("run %d: Redis answered the test's PING again %v after the fault began", run, back.Sub(start).Round(time.Millisecond))
		before := fe.counters()
		time.Sleep(time.Until(back.Add(drillSettle)))
		t.Logf("run %d: Redis clients before the burst: %s", run, clientsOf(d.node()))
		rs, elapsed := fe.burstAt(drillBurst, key(t, fmt.Sprintf("burst%d", run)), roundRobin)
		checkGlobal(t, fmt.Sprintf("run %d: %d concurrent %v after Redis answered again", run, drillBurst, drillSettle), rs, elapsed)
		t.Logf("run %d: per replica: %s", run, perReplica(rs))
		t.Logf("run %d: failed checks and dials by reason, breaker transitions, from Redis answering again to the burst's end: %s",
			run, countersGrown(before, fe.counters()))
		if _, how := tally(rs); how["local"] > 0 {
			fe.logTollgate(t, run)
		}
		if d.after != nil {
			d.after(t)
		}
	}
}

// warmUp sends n concurrent requests round-robin, request i for key(i),
// and returns the replies. With a key per request each one is a check in
// Redis (none is a refusal the deny cache repeats), so the pods' pools
// grow to carry them all at once.
func (fe *fleetEnv) warmUp(n int, key func(i int) string) []reply {
	out := make([]reply, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = fe.send(roundRobin(i), "GET", "/", key(i))
		}(i)
	}
	wg.Wait()
	return out
}

// logTollgate logs the plugin's own lines of each replica's log (why a
// check fell back), the last 20 of each.
func (fe *fleetEnv) logTollgate(t *testing.T, run int) {
	t.Helper()
	for i, tr := range fe.fleet.Replicas {
		var lines []string
		for _, l := range strings.Split(tr.Log(), "\n") {
			if strings.Contains(l, "tollgate: ") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		t.Logf("run %d: replica %d's tollgate log:\n%s", run, i, strings.Join(lines, "\n"))
	}
}

// standalone is a drill's node for fe's one redis-server.
func (fe *fleetEnv) standalone() *Redis { return fe.redis }

func clientsOf(r *Redis) string {
	if r == nil {
		return "?"
	}
	n, err := r.Clients()
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(n)
}

// perReplica returns each replica's admitted replies and decisions.
func perReplica(rs []reply) string {
	by := map[int][]reply{}
	for _, r := range rs {
		by[r.replica] = append(by[r.replica], r)
	}
	var ids []int
	for i := range by {
		ids = append(ids, i)
	}
	sort.Ints(ids)
	var parts []string
	for _, i := range ids {
		n, how := tally(by[i])
		parts = append(parts, fmt.Sprintf("replica %d: %d of %d admitted (%s)", i, n, len(by[i]), formatTally(how)))
	}
	return strings.Join(parts, "; ")
}

// answering waits until r answers the test's PING (a new connection each
// try) and returns when it did.
func answering(t *testing.T, r *Redis, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := r.Do("PING")
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis %s did not answer PING within %v: %v", r.Addr, within, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// during sends requests to every replica, one after another on each (50 ms
// apart), until d has passed, and returns the replies.
func (fe *fleetEnv) during(d time.Duration, method, path, key string) []reply {
	var mu sync.Mutex
	var out []reply
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range fe.fleet.Replicas {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(end) {
				r := fe.send(i, method, path, key)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}(i)
	}
	wg.Wait()
	return out
}

// logTraffic logs what the requests sent during a fault got.
func logTraffic(t *testing.T, run int, what string, rs []reply) {
	t.Helper()
	n, how := tally(rs)
	t.Logf("run %d: %s: %d requests, %d admitted; statuses %v; decisions: %s", run, what, len(rs), n, statuses(rs), formatTally(how))
}

// userFleet starts the user's fleet, and the metrics router, on one
// redis-server.
func userFleet(t *testing.T) *fleetEnv {
	return startFleet(t, userReplicas, func(addr string) map[string]interface{} { return withMetricsRouter(userConf(addr)) }, "api@file", drillMetrics)
}

// restart kills Redis, runs meanwhile (which must return within the
// outage), waits out the outage and starts Redis again, empty, on its port.
func (fe *fleetEnv) restart(t *testing.T, meanwhile func()) time.Time {
	t.Helper()
	fe.redis.Kill()
	end := time.Now().Add(drillOutage)
	if meanwhile != nil {
		meanwhile()
	}
	time.Sleep(time.Until(end))
	if err := fe.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	return answering(t, fe.redis, 5*time.Second)
}

// freeze stops Redis (SIGSTOP), runs meanwhile, waits out the freeze and
// lets Redis go on (SIGCONT).
func (fe *fleetEnv) freeze(t *testing.T, meanwhile func()) time.Time {
	t.Helper()
	if err := fe.redis.Pause(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(drillFreeze)
	if meanwhile != nil {
		meanwhile()
	}
	time.Sleep(time.Until(end))
	if err := fe.redis.Resume(); err != nil {
		t.Fatal(err)
	}
	return answering(t, fe.redis, 5*time.Second)
}

func TestFleetFaultRestartIdle(t *testing.T) {
	// Redis restarted after a busy period; nothing is sent while it is
	// down.
	fe := userFleet(t)
	drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
		return fe.restart(t, nil)
	}}.run(t, fe)
}

func TestFleetFaultRestartUnderTraffic(t *testing.T) {
	// Redis restarted after a busy period; every replica serves requests
	// while it is down (their breakers open).
	fe := userFleet(t)
	drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
		return fe.restart(t, func() {
			logTraffic(t, run, "Redis down", fe.during(drillOutage-100*time.Millisecond, "GET", "/", fleetKey(t, "down")))
		})
	}}.run(t, fe)
}

func TestFleetFaultRestartClosedOnly(t *testing.T) {
	// Redis restarted after a busy period; while it is down, replica 0
	// serves one request, of a policy that fails closed (a 503), and
	// nothing else is sent. The fail-closed policy is another middleware
	// on the same Redis (its own router, /login), or a rule of the main
	// middleware (POST /rule-login); either shares the replica's pool and
	// breaker with the main route.
	fe := startFleet(t, userReplicas, func(addr string) map[string]interface{} {
		rule := map[string]interface{}{"name": "login", "pathPrefix": "/rule-login", "methods": []interface{}{"POST"},
			"average": 60, "period": "1m", "burst": 10, "failureMode": "closed"}
		return withMetricsRouter(dynamicConf(route{"api", "PathPrefix(`/`)", userOpts(addr, "rules", []interface{}{rule})},
			route{"login", "PathPrefix(`/login`)", userOpts(addr, "failureMode", "closed")}))
	}, "api@file", "login@file", drillMetrics)
	for _, c := range []struct{ desc, method, path string }{
		{"middleware", "GET", "/login"},
		{"rule", "POST", "/rule-login"},
	} {
		c := c
		t.Run(c.desc, func(t *testing.T) {
			drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
				return fe.restart(t, func() {
					r := fe.send(0, c.method, c.path, fleetKey(t, "closed"))
					if r.err != nil || r.status != http.StatusServiceUnavailable {
						t.Errorf("run %d: %s %s on replica 0 with Redis down: %d %v, want 503 (failureMode closed)", run, c.method, c.path, r.status, r.err)
					}
					logTraffic(t, run, "Redis down, one fail-closed request on replica 0", []reply{r})
				})
			}}.run(t, fe)
		})
	}
}

// userOpts is userConf's middleware options.
func userOpts(redisAddr string, kv ...interface{}) map[string]interface{} {
	conf := userConf(redisAddr, kv...)
	mw := conf["http"].(map[string]interface{})["middlewares"].(map[string]interface{})["api-limit"]
	return mw.(map[string]interface{})["plugin"].(map[string]interface{})["tollgate"].(map[string]interface{})
}

func TestFleetFaultFreezeIdle(t *testing.T) {
	// Redis frozen (SIGSTOP) after a busy period, nothing sent, then let
	// go on (SIGCONT): the pooled connections were never closed.
	fe := userFleet(t)
	drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
		return fe.freeze(t, nil)
	}}.run(t, fe)
}

func TestFleetFaultFreezeUnderTraffic(t *testing.T) {
	// Redis frozen after a busy period while every replica serves
	// requests (each check times out; the breakers open).
	fe := userFleet(t)
	drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
		return fe.freeze(t, func() {
			logTraffic(t, run, "Redis frozen", fe.during(drillFreeze-100*time.Millisecond, "GET", "/", fleetKey(t, "frozen")))
		})
	}}.run(t, fe)
}

func TestFleetFaultIdleTimeout(t *testing.T) {
	// Redis closes clients idle for a second (CONFIG SET timeout 1): the
	// pools' connections, idle for the drill's wait, are closed under them.
	fe := userFleet(t)
	drill{node: fe.standalone,
		fault: func(t *testing.T, run int) time.Time {
			if _, err := fe.redis.Do("CONFIG", "SET", "timeout", "1"); err != nil {
				t.Fatal(err)
			}
			return answering(t, fe.redis, time.Second)
		},
		after: func(t *testing.T) {
			if _, err := fe.redis.Do("CONFIG", "SET", "timeout", "0"); err != nil {
				t.Fatal(err)
			}
		}}.run(t, fe)
}

func TestFleetFaultClientKill(t *testing.T) {
	// CLIENT KILL TYPE normal closes every client connection at once.
	fe := userFleet(t)
	drill{node: fe.standalone, fault: func(t *testing.T, run int) time.Time {
		n, err := fe.redis.Do("CLIENT", "KILL", "TYPE", "normal")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d: CLIENT KILL TYPE normal closed %v connections", run, n)
		return answering(t, fe.redis, time.Second)
	}}.run(t, fe)
}
