package e2e

import (
	"fmt"
	"testing"
	"time"
)

func TestFleetReload(t *testing.T) {
	// 200 rewrites of the dynamic file under traffic, changing limits and
	// adding and removing routers (each with its own Tollgate middleware):
	// Traefik calls New for each, with no close hook.
	var addr string
	conf := func(i int, average int) map[string]interface{} {
		routes := []route{{"api", "PathPrefix(`/`)", limitOpts(addr, "average", average, "period", "1m", "burst", 1000, "redis.poolSize", 4)}}
		for j := 0; j < i%4; j++ {
			routes = append(routes, route{fmt.Sprintf("extra%d", j), fmt.Sprintf("PathPrefix(`/extra%d`)", j),
				limitOpts(addr, "average", 50+i, "period", "1m", "burst", 10, "class", fmt.Sprintf("extra%d", j), "redis.poolSize", 4)})
		}
		return dynamicConf(routes...)
	}
	fe := startFleet(t, 3, func(a string) map[string]interface{} { addr = a; return conf(0, 100000) }, "api@file")
	keys := []string{fleetKey(t, "a"), fleetKey(t, "b"), fleetKey(t, "c")}
	flows := []flow{{keys[0], "GET", "/", 10 * time.Millisecond}, {keys[1], "GET", "/", 10 * time.Millisecond},
		{keys[2], "GET", "/extra0", 10 * time.Millisecond}}
	// The baseline is taken as the end is: after a second of the same
	// traffic, once it has stopped and the keep-alive connections it left
	// (clients to Traefik, Traefik to the backend: goroutines of their
	// own, as many as the traffic's concurrency happened to open) are
	// closed.
	warm := fe.drive(flows...)
	time.Sleep(time.Second)
	warm.Stop()
	fe.closeIdle()
	clients0, err := fe.redis.Clients()
	if err != nil {
		t.Fatal(err)
	}
	var g0, r0 []float64
	for _, tr := range fe.fleet.Replicas {
		g, _, err := goroutineFloor(tr, time.Second, -1)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := tr.Metric("traefik_config_reloads_total")
		g0, r0 = append(g0, float64(g)), append(r0, r)
	}
	d := fe.drive(flows...)
	// Each rewrite is waited for until every replica has applied it
	// (Traefik coalesces rewrites that come faster than it applies them).
	applied := append([]float64(nil), r0...)
	for i := 1; i <= 200; i++ {
		if err := fe.fleet.WriteDynamic(conf(i, 100000+i)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for j, tr := range fe.fleet.Replicas {
			for {
				r, err := tr.Metric("traefik_config_reloads_total")
				if err == nil && r > applied[j] {
					applied[j] = r
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s did not apply rewrite %d", tr.Name, i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// The last configuration: the starting routers, a new limit.
	if err := fe.fleet.WriteDynamic(conf(0, 777)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := range fe.fleet.Replicas {
		for fe.mustSend(i, "GET", "/", "probe").header.Get("RateLimit-Policy") != `"api-limit@file";q=777;w=60` {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: the last configuration is not in force", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := fe.fleet.WaitRouters("", "extra0@file"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let Traefik finish closing the old handlers
	d.Stop()
	fe.closeIdle()
	for _, k := range keys[:2] {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d requests failed during the reloads, first: %v", len(f), f[0])
		}
	}
	// Every New shares its replica's pool: the connections are bounded by
	// poolSize (4) and the heartbeat's own on each of 3 replicas, plus this
	// query's, whatever the number of reloads (a pool per New would leave
	// hundreds). A connection being replaced (closed as stale under load,
	// its successor dialled) may be counted twice for a moment (once in
	// 10 runs, 17 at the first look): the bound must hold within 5 s.
	var clients1 int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if clients1, err = fe.redis.Clients(); err != nil {
			t.Fatal(err)
		}
		if clients1 <= 3*(4+1)+1 || time.Now().After(end) {
			break
		}
	}
	t.Logf("Redis connected clients: %d before, %d after", clients0, clients1)
	if clients1 > 3*(4+1)+1 {
		t.Fatalf("Redis connected clients: %d before 200 reloads, %d after", clients0, clients1)
	}
	for i, tr := range fe.fleet.Replicas {
		// Short-lived goroutines (a dial, a heartbeat batch, Traefik
		// closing a connection) may be running at any one sample: the
		// floor over 5 s is compared (sampled every 100 ms, it stops as
		// soon as it is within the bound). Measured (2 cores shared with
		// other test runs, 5 runs): 26 before and 26 after on every
		// replica, every sample. (Before the idle connections were
		// closed, the count moved by up to 7 with them.) One goroutine
		// leaked per New (a goroutine started in New that never ends)
		// is hundreds more; 3 leaked in all fail too.
		g, samples, err := goroutineFloor(tr, 5*time.Second, g0[i]+goroutineSlack)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := tr.Metric("traefik_config_reloads_total")
		t.Logf("%s: %d reloads applied; goroutines %v before, %d after (samples %v)", tr.Name, int(r-r0[i]), g0[i], g, samples)
		if float64(g) > g0[i]+goroutineSlack {
			t.Fatalf("%s: %v goroutines before 200 reloads, at least %d after for 5 s (samples %v), want at most %v more:\n%s",
				tr.Name, g0[i], g, samples, goroutineSlack, tr.GoroutineDump())
		}
	}
}

// closeIdle closes the idle keep-alive connections to the replicas and
// from them to the backend.
func (fe *fleetEnv) closeIdle() {
	fleetClient.CloseIdleConnections()
	fe.fleet.Backend.CloseIdle()
}

// goroutineSlack is how many more goroutines than its baseline a replica
// may run after the reload drill (see TestFleetReload): none were seen.
const goroutineSlack = 2

// goroutineFloor samples tr's goroutines every 100 ms for d and returns
// the fewest seen and the samples; it returns early once a sample is at
// most stopAt.
func goroutineFloor(tr *Traefik, d time.Duration, stopAt float64) (int, []int, error) {
	var samples []int
	floor := -1
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		g, err := tr.Goroutines()
		if err != nil {
			return 0, samples, err
		}
		samples = append(samples, g)
		if floor < 0 || g < floor {
			floor = g
		}
		if float64(g) <= stopAt || time.Now().After(end) {
			return floor, samples, nil
		}
	}
}
