// Command demo runs a real Tollgate fleet on loopback and drives it: a
// redis-server, a backend, and three Traefik replicas (the binary
// scripts/traefik.sh builds) loading the plugin in local mode from one
// dynamic configuration file. Limit: 100 requests/minute, burst 20, per
// X-API-Key, shared by the three replicas.
//
// Traffic goes round-robin over the replicas from three keys: alice (1/s),
// bob (about 86/minute, under the limit) and runaway (30/s). Once a second
// it prints, per replica and in total, the requests allowed, denied (429)
// and decided by the local fallback (the X-Tollgate-Decision header), and
// the runaway key's admissions against its budget. Midway it kills Redis
// (each replica falls back to a local bucket of 100/3 per minute, burst 6:
// the replicas count each other by heartbeat, there is no replicas setting),
// then restarts it (global limiting resumes after the breaker's probe). At
// the end it prints each replica's Tollgate counters, as its metrics router
// (/tollgate-metrics: a Tollgate middleware with serveMetrics) serves them
// to Prometheus.
//
//	go run ./cmd/demo            # about a minute, then cleans up
//	go run ./cmd/demo -keep      # leaves the fleet up and prints curl commands
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// tally counts outcomes; the fields are updated atomically.
type tally struct{ ok, denied, local, failed int64 }

func (t *tally) reset() {
	atomic.StoreInt64(&t.ok, 0)
	atomic.StoreInt64(&t.denied, 0)
	atomic.StoreInt64(&t.local, 0)
	atomic.StoreInt64(&t.failed, 0)
}

func (t *tally) String() string {
	return fmt.Sprintf("%3d %3d %3d", atomic.LoadInt64(&t.ok), atomic.LoadInt64(&t.denied), atomic.LoadInt64(&t.local))
}

func main() {
	keep := flag.Bool("keep", false, "leave the fleet up after the run and print curl commands")
	phase := flag.Duration("phase", 15*time.Second, "length of each phase: Redis up, Redis down, Redis back")
	flag.Parse()
	log.SetFlags(0)
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if err := run(ctx, *phase, *keep); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, phase time.Duration, keep bool) error {
	dir, err := os.MkdirTemp("", "tollgate-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r, err := e2e.StartRedis(dir)
	if err != nil {
		return err
	}
	defer r.Kill()

	fmt.Println("Starting redis-server, a backend and three Traefik replicas with Tollgate...")
	conf := map[string]interface{}{"http": map[string]interface{}{
		"routers": map[string]interface{}{
			"api": map[string]interface{}{
				"rule": "PathPrefix(`/`)", "service": "backend", "entryPoints": []interface{}{"web"},
				"middlewares": []interface{}{"api-limit"}},
			// Each replica's Tollgate counters, for Prometheus.
			"tollgate-metrics": map[string]interface{}{
				"rule": "Path(`" + metricsPath + "`)", "priority": 1000, "service": "noop@internal",
				"entryPoints": []interface{}{"web"}, "middlewares": []interface{}{"tollgate-metrics"}},
		},
		"middlewares": map[string]interface{}{
			"api-limit": map[string]interface{}{"plugin": map[string]interface{}{
				"tollgate": map[string]interface{}{
					"average": 100, "period": "1m", "burst": 20, "class": "api",
					"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
					"decisionHeader":  "X-Tollgate-Decision",
					"redis":           map[string]interface{}{"endpoints": []interface{}{r.Addr}, "timeout": "5ms", "probeInterval": "2s", "heartbeat": "1s"},
				}}},
			"tollgate-metrics": map[string]interface{}{"plugin": map[string]interface{}{
				"tollgate": map[string]interface{}{"serveMetrics": true}}},
		},
	}}
	fleet, err := e2e.StartFleet(dir, 3, conf)
	if err != nil {
		return err
	}
	defer fleet.Stop()
	if err := fleet.WaitRouters("enabled", "api@file"); err != nil {
		return err
	}
	fmt.Printf("Redis %s, backend %s, Traefik replicas:", r.Addr, fleet.Backend.Addr)
	for _, t := range fleet.Replicas {
		fmt.Printf(" %s=%s", t.Name, t.Web)
	}
	fmt.Printf("\nDynamic configuration: %s\n", fleet.Dynamic)
	fmt.Println("Limit: 100 requests/minute, burst 20, per X-API-Key, across the fleet; while Redis is down")
	fmt.Println("each replica keeps its own local bucket: 100/3 per minute, burst 6 (the replicas count")
	fmt.Println("each other by heartbeat in Redis: no replicas setting).")

	n := len(fleet.Replicas)
	perReplica := make([]tally, n)
	var total, runaway tally
	var aliceOK, bobOK int64
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var rr int64
	send := func(key string) {
		i := int(atomic.AddInt64(&rr, 1) % int64(n))
		req, _ := http.NewRequest("GET", fleet.Replicas[i].URL("/"), nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		tl := []*tally{&perReplica[i], &total}
		if key == "runaway" {
			tl = append(tl, &runaway)
		}
		for _, t := range tl {
			switch {
			case err != nil || (resp.StatusCode != 200 && resp.StatusCode != 429):
				atomic.AddInt64(&t.failed, 1)
			case resp.StatusCode == 200:
				atomic.AddInt64(&t.ok, 1)
			default:
				atomic.AddInt64(&t.denied, 1)
			}
			if err == nil && resp.Header.Get("X-Tollgate-Decision") == "local" {
				atomic.AddInt64(&t.local, 1)
			}
		}
		if err != nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode == 200 && key == "alice" {
			atomic.AddInt64(&aliceOK, 1)
		}
		if resp.StatusCode == 200 && key == "bob" {
			atomic.AddInt64(&bobOK, 1)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range []struct {
		key   string
		every time.Duration
	}{{"alice", time.Second}, {"bob", 700 * time.Millisecond}, {"runaway", 33 * time.Millisecond}} {
		wg.Add(1)
		go func(key string, every time.Duration) {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				send(key)
			}
		}(k.key, k.every)
	}
	stopTraffic := func() {
		if stop != nil {
			close(stop)
			wg.Wait()
			stop = nil
		}
	}
	defer stopTraffic()

	phases := []struct{ name, decidedBy string }{
		{"1. Redis up", "Redis: one global bucket per key"},
		{"2. Redis killed", "the local fallback of each replica"},
		{"3. Redis restarted (empty)", "Redis again, after the breaker's probe (2 s)"},
	}
	var failed int64
	for p, ph := range phases {
		switch p {
		case 1:
			r.Kill()
		case 2:
			if err := r.Restart(); err != nil {
				return err
			}
		}
		failed += atomic.LoadInt64(&total.failed)
		for i := range perReplica {
			perReplica[i].reset()
		}
		total.reset()
		runaway.reset()
		atomic.StoreInt64(&aliceOK, 0)
		atomic.StoreInt64(&bobOK, 0)
		fmt.Printf("\n== %s: decided by %s\n", ph.name, ph.decidedBy)
		head := "   t |"
		for _, t := range fleet.Replicas {
			head += fmt.Sprintf(" %-11s |", t.Name)
		}
		fmt.Println(head + " total       | runaway ok / budget* | alice | bob | failed")
		sub := "     |"
		for i := 0; i <= n; i++ {
			sub += "  ok 429 loc |"
		}
		fmt.Println(sub)
		start := time.Now()
		for time.Since(start) < phase {
			select {
			case <-ctx.Done():
				fmt.Println("\ninterrupted")
				return nil
			case <-time.After(time.Second):
			}
			el := time.Since(start).Seconds()
			var b strings.Builder
			fmt.Fprintf(&b, "%3.0fs |", el)
			for i := range perReplica {
				fmt.Fprintf(&b, " %s |", perReplica[i].String())
			}
			burst := 20.0 // one global bucket
			if p == 1 {
				burst = 18 // three local buckets of 6
			}
			fmt.Fprintf(&b, " %s | %10d / %-7.0f | %5d | %3d | %d", total.String(), atomic.LoadInt64(&runaway.ok),
				burst+100*el/60, atomic.LoadInt64(&aliceOK), atomic.LoadInt64(&bobOK), atomic.LoadInt64(&total.failed))
			fmt.Println(b.String())
		}
	}
	stopTraffic()
	failed += atomic.LoadInt64(&total.failed)
	fmt.Println("\n* budget: a full bucket (burst 20; 3 local buckets of 6 while Redis is down) plus what")
	fmt.Println("  100/minute refills during the phase. Each phase starts from full buckets (phase 2's")
	fmt.Println("  local ones are new, phase 3's Redis is empty). \"loc\" counts requests decided by the")
	fmt.Println("  local fallback; \"failed\" counts 5xx or no answer, which Tollgate must never cause.")
	fmt.Printf("Failed requests in the whole run: %d\n", failed)
	printMetrics(client, fleet)

	if keep {
		fmt.Println("\nThe fleet stays up. Try:")
		for _, t := range fleet.Replicas {
			fmt.Printf("  curl -i -H 'X-API-Key: me' %s\n", t.URL("/"))
		}
		fmt.Printf("Tollgate's metrics: curl %s\n", fleet.Replicas[0].URL(metricsPath))
		fmt.Printf("Edit %s to change the limit (Traefik reloads it).\nCtrl-C to stop.\n", fleet.Dynamic)
		<-ctx.Done()
	}
	if failed > 0 {
		return fmt.Errorf("%d requests failed", failed)
	}
	return nil
}

// metricsPath is where each replica's metrics router answers.
const metricsPath = "/tollgate-metrics"

// shownMetrics are the families printed at the end of the demo.
var shownMetrics = []string{"tollgate_requests_total", "tollgate_breaker_transitions_total"}

// printMetrics prints, per replica, the samples of shownMetrics its
// metrics router serves: who decided what (decision) and with what result,
// as Prometheus would scrape it.
func printMetrics(client *http.Client, fleet *e2e.Fleet) {
	fmt.Printf("\nTollgate's counters, as each replica's %s serves them to Prometheus:\n", metricsPath)
	for _, t := range fleet.Replicas {
		fmt.Printf("  %s:\n", t.Name)
		resp, err := client.Get(t.URL(metricsPath))
		if err != nil {
			fmt.Printf("    (%v)\n", err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			fmt.Printf("    (%v)\n", err)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			fmt.Printf("    (%s: no Tollgate metrics)\n", resp.Status)
			continue
		}
		var n int
		for _, line := range strings.Split(string(body), "\n") {
			for _, m := range shownMetrics {
				if strings.HasPrefix(line, m+"{") || strings.HasPrefix(line, m+" ") {
					fmt.Printf("    %s\n", line)
					n++
				}
			}
		}
		if n == 0 {
			fmt.Println("    (none)")
		}
	}
}
