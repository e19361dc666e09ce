// Command demo runs a small Tollgate fleet on loopback and drives it: a real
// redis-server, a backend, and three "replicas", each an HTTP server whose
// middleware is the plugin loaded by its own Yaegi interpreter exactly as
// Traefik loads it (so each has its own fallback buckets, like separate
// Traefik processes). Limit: 100 requests/minute, burst 20, per X-API-Key.
//
// Traffic goes round-robin over the replicas from three keys: alice (1/s),
// bob (about 86/minute, under the limit) and runaway (30/s). Once a second it prints what each replica
// allowed and refused, and the runaway key's total against its budget.
// Midway it kills Redis (the replicas fall back to local buckets of
// 100/3 per minute, burst 20/3), then restarts it (global limiting resumes).
//
//	go run ./cmd/demo            # about 45 s, then cleans up
//	go run ./cmd/demo -keep      # leaves the fleet up and prints curl commands
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

type counters struct{ ok, refused, failed int64 }

type replica struct {
	name   string
	addr   string
	server *http.Server
	runway counters // the runaway key's outcomes on this replica
}

func serve(h http.Handler) (*http.Server, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.Serve(l) }()
	return s, l.Addr().String()
}

func main() {
	keep := flag.Bool("keep", false, "leave the fleet up after the run and print curl commands")
	phase := flag.Duration("phase", 15*time.Second, "length of each phase: Redis up, Redis down, Redis back")
	flag.Parse()
	log.SetFlags(0)

	lab, err := e2e.NewLab("tollgate-demo")
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Close()
	r, gp := lab.Redis, lab.GoPath

	backend, backendAddr := serve(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = rw.Write([]byte("hello from the backend\n"))
	}))
	defer backend.Close()
	target, _ := url.Parse("http://" + backendAddr)

	options := map[string]interface{}{
		"average": "100", "period": "1m", "burst": "20", "replicas": "3", "class": "api",
		"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
		"redis":           map[string]interface{}{"endpoints": r.Addr, "timeout": "5ms", "probeInterval": "2s"},
	}
	var replicas []*replica
	for i := 0; i < 3; i++ {
		pod, err := e2e.NewYaegi(gp, os.Stderr)
		if err != nil {
			log.Fatal(err)
		}
		h, err := pod.New(context.Background(), httputil.NewSingleHostReverseProxy(target), options, "api-limit@file")
		if err != nil {
			log.Fatal(err)
		}
		s, addr := serve(h)
		replicas = append(replicas, &replica{name: fmt.Sprintf("replica-%d", i+1), addr: addr, server: s})
	}
	defer func() {
		for _, rep := range replicas {
			rep.server.Close()
		}
	}()

	fmt.Printf("Redis %s, backend %s, replicas:", r.Addr, backendAddr)
	for _, rep := range replicas {
		fmt.Printf(" %s=%s", rep.name, rep.addr)
	}
	fmt.Println("\nLimit: 100 requests/minute, burst 20, per X-API-Key; local fallback per replica: 100/3 per minute, burst 6.")

	client := &http.Client{Timeout: 2 * time.Second}
	var rr int64
	send := func(key string) (*replica, int) {
		rep := replicas[atomic.AddInt64(&rr, 1)%3]
		req, _ := http.NewRequest("GET", "http://"+rep.addr+"/", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return rep, 0
		}
		resp.Body.Close()
		return rep, resp.StatusCode
	}

	var keyOK sync.Map // key -> *int64 allowed in the current phase
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range []struct {
		key   string
		every time.Duration
	}{{"alice", time.Second}, {"bob", 700 * time.Millisecond}, {"runaway", 33 * time.Millisecond}} {
		n := new(int64)
		keyOK.Store(k.key, n)
		wg.Add(1)
		go func(key string, every time.Duration, n *int64) {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				rep, code := send(key)
				if code == 200 {
					atomic.AddInt64(n, 1)
				}
				if key != "runaway" {
					continue
				}
				switch {
				case code == 200:
					atomic.AddInt64(&rep.runway.ok, 1)
				case code == 429:
					atomic.AddInt64(&rep.runway.refused, 1)
				default:
					atomic.AddInt64(&rep.runway.failed, 1)
				}
			}
		}(k.key, k.every, n)
	}

	phases := []struct{ name, decidedBy string }{
		{"1. Redis up", "Redis (one global bucket)"},
		{"2. Redis killed", "local fallback on each replica"},
		{"3. Redis restarted (empty)", "Redis again, after the breaker's probe"},
	}
	for p, ph := range phases {
		switch p {
		case 1:
			r.Kill()
		case 2:
			if err := r.Restart(); err != nil {
				log.Fatal(err)
			}
		}
		for _, rep := range replicas {
			rep.runway = counters{}
		}
		keyOK.Range(func(_, v interface{}) bool { atomic.StoreInt64(v.(*int64), 0); return true })
		fmt.Printf("\n== %s: decided by %s\n", ph.name, ph.decidedBy)
		fmt.Println("   t | runaway allowed/refused/failed per replica        | runaway total | budget* | alice | bob")
		start := time.Now()
		for time.Since(start) < *phase {
			time.Sleep(time.Second)
			el := time.Since(start).Seconds()
			line := fmt.Sprintf("%3.0fs |", el)
			var total int64
			for _, rep := range replicas {
				ok := atomic.LoadInt64(&rep.runway.ok)
				total += ok
				line += fmt.Sprintf(" %s %3d/%3d/%d", rep.name[8:], ok, atomic.LoadInt64(&rep.runway.refused), atomic.LoadInt64(&rep.runway.failed))
			}
			a, _ := keyOK.Load("alice")
			b, _ := keyOK.Load("bob")
			burst := 20.0 // one global bucket
			if p == 1 {
				burst = 18 // three local buckets of 6
			}
			budget := fmt.Sprintf("%.0f", burst+100*el/60)
			fmt.Printf("%s | %13d | %7s | %5d | %3d\n", line, total, budget, atomic.LoadInt64(a.(*int64)), atomic.LoadInt64(b.(*int64)))
		}
	}
	close(stop)
	wg.Wait()
	fmt.Println("\n* budget: a full bucket (burst 20, or 3 local buckets of 6 while Redis is down) plus what")
	fmt.Println("  100/minute refills during the phase; each phase starts from full buckets (phase 2's local")
	fmt.Println("  ones are new, phase 3's Redis is empty). The third number of each replica counts failed")
	fmt.Println("  requests (5xx or no answer): Tollgate must never cause one, so it stays 0.")

	if *keep {
		fmt.Println("\nThe fleet stays up. Try:")
		for _, rep := range replicas {
			fmt.Printf("  curl -i -H 'X-API-Key: me' http://%s/\n", rep.addr)
		}
		fmt.Println("Ctrl-C to stop.")
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
	}
}
