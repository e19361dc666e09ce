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

// pipelineTable measures, per loader and goroutine count, checks/s, the
// plugin process's CPU per check, Redis's CPU per check, checks per Redis
// read event (pipelining) and the connections the pod opened to Redis.
// Each row is a fresh middleware class on a fresh pool (its own username
// makes its own backend), so the connection count is what that
// concurrency grew.
func pipelineTable(r *e2e.Redis, factories map[string]e2e.Factory, order []string, conc string, n int) {
	fmt.Println()
	fmt.Println("| loader | goroutines | checks/s | plugin CPU µs/check | Redis CPU µs/check | checks per Redis read | connections to Redis |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, name := range order {
		for _, cs := range strings.Split(conc, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(cs))
			if err != nil || c < 1 {
				log.Fatalf("bad -pipeline-concurrency %q", cs)
			}
			// Each row its own backend: a username of its own (ACL off:
			// AUTH is not sent without a password, so any name connects).
			h, err := factories[name].New(context.Background(), nop, map[string]interface{}{
				"average": 1000000000, "period": "1s", "burst": 1000000000, "class": "pipeline-" + cs,
				"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
				"redis": map[string]interface{}{"endpoints": r.Addr, "timeout": "50ms", "breakerThreshold": 1000000000,
					"username": fmt.Sprintf("%s-%d", name, c), "heartbeat": "0"},
			}, "pipeline@file")
			if err != nil {
				log.Fatal(err)
			}
			parallel(h, 100, 1) // warm: pool dialled, script loaded
			before := tollgateConns(r)
			fmt.Println(pipelineRow(r, h, name, c, n, before))
		}
	}
}

func pipelineRow(r *e2e.Redis, h http.Handler, name string, c, n, before int) string {
	calls0, _ := r.Calls("evalsha")
	reads0 := readsProcessed(r)
	rc0, pc0 := redisCPU(r), cpuTime()
	perSec := parallel(h, n, c)
	pc1, rc1 := cpuTime(), redisCPU(r)
	calls1, _ := r.Calls("evalsha")
	reads1 := readsProcessed(r)
	checks := float64(calls1 - calls0)
	return fmt.Sprintf("| %s | %d | %.0f | %.0f | %.1f | %.1f | %d |", name, c, perSec,
		float64(pc1-pc0)/1e3/float64(n), float64(rc1-rc0)/1e3/checks, checks/float64(reads1-reads0), tollgateConns(r)-before+1)
}

// tollgateConns counts Redis's clients named tollgate.
func tollgateConns(r *e2e.Redis) int {
	n, _, _ := r.ClientsNamed("tollgate")
	return n
}

func readsProcessed(r *e2e.Redis) int64 {
	m, err := r.Info("stats")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(m["total_reads_processed"], 10, 64)
	return v
}
