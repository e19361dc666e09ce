// Command bench measures one Tollgate check end to end (ServeHTTP with a
// no-op next handler) against a local redis-server, with the plugin compiled
// and interpreted by Yaegi (loaded the way Traefik loads it), side by side.
//
//	go run ./cmd/checkbench [-n 20000] [-concurrency 1,8]
//
// It reports per-check p50/p99 latency, bytes allocated per check and
// checks/s, and where the time goes: the loopback round trip (a compiled
// PING), Redis's own time in the script (INFO commandstats), the local
// fallback path (no network) under the same loader, and two interpreted
// reference points (reference.go): redigo's Pool + Script.Do, and a bare
// EVALSHA exchange with no plugin logic.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

var nop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

type figures struct {
	p50, p99, mean time.Duration
	bytes          float64
	perSec         float64
}

// sequential runs n checks one after another and measures each.
func sequential(h http.Handler, n int) figures {
	req, _ := http.NewRequest("GET", "http://bench/", nil)
	req.Header.Set("X-API-Key", "bench-key")
	req.RemoteAddr = "127.0.0.1:1"
	rw := &discard{h: http.Header{}}
	for i := 0; i < 2000; i++ { // warm up: pool, script cache, interpreter
		h.ServeHTTP(rw, req)
	}
	return measure(n, func() {
		rw.h = http.Header{}
		h.ServeHTTP(rw, req)
	})
}

// measure times n calls of f one after another.
func measure(n int, f func()) figures {
	lat := make([]time.Duration, n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		f()
		lat[i] = time.Since(t0)
	}
	total := time.Since(start)
	runtime.ReadMemStats(&after)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return figures{
		p50:    lat[n/2],
		p99:    lat[n*99/100],
		mean:   total / time.Duration(n),
		bytes:  float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
		perSec: float64(n) / total.Seconds(),
	}
}

// parallel runs n checks over c goroutines, each with its own key.
func parallel(h http.Handler, n, c int) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://bench/", nil)
			req.Header.Set("X-API-Key", "bench-key-"+strconv.Itoa(g))
			rw := &discard{h: http.Header{}}
			for i := 0; i < n/c; i++ {
				rw.h = http.Header{}
				h.ServeHTTP(rw, req)
			}
		}(g)
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// pingRTT is the compiled loopback round trip of a PING on a raw socket.
func pingRTT(addr string, n int) time.Duration {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	lat := make([]time.Duration, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			log.Fatal(err)
		}
		if _, err := br.ReadSlice('\n'); err != nil {
			log.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[n/2]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }

func main() {
	n := flag.Int("n", 20000, "checks per measurement")
	conc := flag.String("concurrency", "1,8", "goroutine counts for the throughput runs")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the interpreted Redis-path run to this file")
	pipeConc := flag.String("pipeline-concurrency", "1,8,64,512", "goroutine counts for the pipelining table")
	only := flag.Bool("pipeline-only", false, "run only the pipelining table")
	flag.Parse()
	log.SetFlags(0)

	lab, err := e2e.NewLab("tollgate-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Close()
	dir, r, gp := lab.Dir, lab.Redis, lab.GoPath
	y, err := e2e.NewYaegi(gp, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	opts := func(endpoint string) map[string]interface{} {
		return map[string]interface{}{
			"average": 1000000000, "period": "1s", "burst": 1000000000, "class": "bench",
			"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
			"redis":           map[string]interface{}{"endpoints": endpoint, "timeout": "50ms", "breakerThreshold": 1000000000},
		}
	}
	if *only {
		pipelineTable(r, map[string]e2e.Factory{"compiled": e2e.Compiled{}, "yaegi": y}, []string{"yaegi", "compiled"}, *pipeConc, *n)
		return
	}
	fmt.Printf("# Tollgate check cost, %s, %d CPUs, redis-server on loopback, %d sequential checks\n\n", runtime.Version(), runtime.NumCPU(), *n)
	fmt.Println("| loader | path | p50 | p99 | mean | allocated/check | checks/s (1 goroutine) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	handlers := map[string]http.Handler{}
	for _, k := range []struct {
		name string
		f    e2e.Factory
	}{{"compiled", e2e.Compiled{}}, {"yaegi", y}} {
		h, err := k.f.New(context.Background(), nop, opts(r.Addr), "bench@file")
		if err != nil {
			log.Fatal(err)
		}
		handlers[k.name] = h
		if *profile != "" && k.name == "yaegi" {
			pf, err := os.Create(*profile)
			if err != nil {
				log.Fatal(err)
			}
			if err := pprof.StartCPUProfile(pf); err != nil {
				log.Fatal(err)
			}
		}
		f := sequential(h, *n)
		if *profile != "" && k.name == "yaegi" {
			pprof.StopCPUProfile()
		}
		fmt.Printf("| %s | redis | %s | %s | %s | %.1f KB | %.0f |\n", k.name, us(f.p50), us(f.p99), us(f.mean), f.bytes/1024, f.perSec)
		// A client over its limit: one refusal from Redis, then the deny
		// cache answers in-process (average 1 per hour, burst 1).
		over, err := k.f.New(context.Background(), nop, map[string]interface{}{
			"average": 1, "period": "1h", "burst": 1, "class": "bench-over",
			"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
			"redis":           map[string]interface{}{"endpoints": r.Addr, "timeout": "50ms"},
		}, "over@file")
		if err != nil {
			log.Fatal(err)
		}
		calls0, _ := r.Calls("evalsha")
		f = sequential(over, *n)
		calls1, _ := r.Calls("evalsha")
		fmt.Printf("| %s | refused, deny cache (%d Redis calls for %d refusals) | %s | %s | %s | %.1f KB | %.0f |\n", k.name,
			calls1-calls0, *n+2000, us(f.p50), us(f.p99), us(f.mean), f.bytes/1024, f.perSec)
		// The fallback path: a port nothing listens on, breaker open.
		port, _ := e2e.FreePort()
		fb, err := k.f.New(context.Background(), nop, map[string]interface{}{
			"average": 1000000000, "period": "1s", "burst": 1000000000, "class": "bench-fallback",
			"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
			"redis":           map[string]interface{}{"endpoints": fmt.Sprintf("127.0.0.1:%d", port), "probeInterval": "1h"},
		}, "fallback@file")
		if err != nil {
			log.Fatal(err)
		}
		f = sequential(fb, *n)
		fmt.Printf("| %s | local fallback (breaker open) | %s | %s | %s | %.1f KB | %.0f |\n", k.name, us(f.p50), us(f.p99), us(f.mean), f.bytes/1024, f.perSec)
	}
	redigo, bare, err := references(dir, r.Addr)
	if err != nil {
		log.Fatal(err)
	}
	for _, ref := range []struct {
		name string
		f    func() error
	}{{"reference: redigo Pool + Script.Do", redigo}, {"reference: bare EVALSHA exchange", bare}} {
		f, err := timeFunc(ref.f, *n)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("| yaegi | %s | %s | %s | %s | %.1f KB | %.0f |\n", ref.name, us(f.p50), us(f.p99), us(f.mean), f.bytes/1024, f.perSec)
	}
	if p50, err := cBenchmark(r, *n); err == nil {
		fmt.Printf("| C (redis-benchmark) | reference: EVALSHA of the same script | %s | | | | |\n", p50)
	} else {
		fmt.Printf("(redis-benchmark reference skipped: %v)\n", err)
	}
	fmt.Println()
	fmt.Printf("Loopback round trip of a compiled PING (p50): %s\n", us(pingRTT(r.Addr, 5000)))
	if m, err := r.Info("commandstats"); err == nil {
		fmt.Printf("Redis's own time per script call (INFO commandstats): %s\n", usecPerCall(m["cmdstat_evalsha"]))
	}
	fmt.Println()
	fmt.Println("| loader | goroutines | checks/s |")
	fmt.Println("|---|---|---|")
	for _, name := range []string{"compiled", "yaegi"} {
		for _, c := range strings.Split(*conc, ",") {
			cn, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || cn < 1 {
				log.Fatalf("bad -concurrency %q", c)
			}
			fmt.Printf("| %s | %d | %.0f |\n", name, cn, parallel(handlers[name], *n, cn))
		}
	}
	pipelineTable(r, map[string]e2e.Factory{"compiled": e2e.Compiled{}, "yaegi": y}, []string{"yaegi", "compiled"}, *pipeConc, *n)
}

func usecPerCall(stat string) string {
	for _, f := range strings.Split(stat, ",") {
		if k, v, ok := strings.Cut(f, "="); ok && k == "usec_per_call" {
			return v + " µs"
		}
	}
	return "n/a"
}
