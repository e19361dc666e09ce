package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is redis-server's user+system CPU time (INFO cpu).
func redisCPU(r *e2e.Redis) time.Duration {
	m, err := r.Info("cpu")
	if err != nil {
		return 0
	}
	u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	return time.Duration((u + s) * float64(time.Second))
}

// coalesceTable measures checks/s, the plugin process's CPU per check and
// Redis's CPU per check and per read event, for each number of lanes
// (redis.pipeline; 0: no coalescing) and goroutine count.
func coalesceTable(r *e2e.Redis, factories map[string]e2e.Factory, order []string, lanes, conc string, n int) {
	fmt.Println()
	fmt.Println("| loader | redis.pipeline | goroutines | checks/s | plugin CPU µs/check | Redis CPU µs/check | checks per Redis read |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, name := range order {
		for _, ls := range strings.Split(lanes, ",") {
			l, err := strconv.Atoi(strings.TrimSpace(ls))
			if err != nil || l < 0 {
				log.Fatalf("bad -coalesce %q", ls)
			}
			h, err := factories[name].New(context.Background(), nop, map[string]interface{}{
				"average": 1000000000, "period": "1s", "burst": 1000000000, "class": "coalesce-" + ls,
				"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
				"redis": map[string]interface{}{"endpoints": r.Addr, "timeout": "50ms", "breakerThreshold": 1000000000,
					"pipeline": l, "poolSize": 256},
			}, "coalesce@file")
			if err != nil {
				log.Fatal(err)
			}
			parallel(h, 1000, 8) // warm: pools dialled, script loaded
			for _, cs := range strings.Split(conc, ",") {
				c, err := strconv.Atoi(strings.TrimSpace(cs))
				if err != nil || c < 1 {
					log.Fatalf("bad -coalesce-concurrency %q", cs)
				}
				fmt.Println(coalesceRow(r, h, name, l, c, n))
			}
		}
	}
}

func coalesceRow(r *e2e.Redis, h http.Handler, name string, lanes, c, n int) string {
	calls0, _ := r.Calls("evalsha")
	reads0 := readsProcessed(r)
	rc0, pc0 := redisCPU(r), cpuTime()
	perSec := parallel(h, n, c)
	pc1, rc1 := cpuTime(), redisCPU(r)
	calls1, _ := r.Calls("evalsha")
	reads1 := readsProcessed(r)
	checks := float64(calls1 - calls0)
	return fmt.Sprintf("| %s | %d | %d | %.0f | %.0f | %.1f | %.1f |", name, lanes, c, perSec,
		float64(pc1-pc0)/1e3/float64(n), float64(rc1-rc0)/1e3/checks, checks/float64(reads1-reads0))
}

func readsProcessed(r *e2e.Redis) int64 {
	m, err := r.Info("stats")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(m["total_reads_processed"], 10, 64)
	return v
}
