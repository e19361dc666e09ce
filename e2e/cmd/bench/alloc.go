package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// memStats is what Traefik's runtime has allocated so far (expvar's
// memstats, served at /debug/vars with api.debug).
type memStats struct {
	TotalAlloc uint64 // bytes
	Mallocs    uint64 // heap objects
}

func (b *bench) memStats() (memStats, error) {
	var v struct {
		Memstats memStats `json:"memstats"`
	}
	resp, err := http.Get("http://" + b.traefik.API + "/debug/vars")
	if err != nil {
		return v.Memstats, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v.Memstats, fmt.Errorf("/debug/vars: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Memstats, err
}

// cpuProfile fetches a CPU profile of Traefik (api.debug) lasting d (one
// second at least), after a second of the run.
func (b *bench) cpuProfile(path string, d time.Duration) error {
	time.Sleep(time.Second)
	secs := int(d.Seconds())
	if secs < 1 {
		secs = 1
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.traefik.API, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// gcFuncs are the functions whose presence in a CPU sample's stack makes it
// the garbage collector's: the background mark workers (dedicated,
// fractional, idle), mark assists charged to allocating goroutines,
// marking of objects allocated during a cycle, write-barrier buffer
// flushes, sweeping (background, proportional on allocation, and of spans
// reclaimed on allocation), the scavenger, and the phase changes (their
// stop-the-world pauses). Allocation itself (runtime.mallocgc outside
// those) is not GC: allocFuncs counts it apart.
var gcFuncs = map[string]bool{
	"runtime.gcBgMarkWorker":       true,
	"runtime.gcAssistAlloc":        true,
	"runtime.gcAssistAlloc1":       true,
	"runtime.gcDrain":              true,
	"runtime.gcDrainN":             true,
	"runtime.markroot":             true,
	"runtime.gcmarknewobject":      true,
	"runtime.wbBufFlush":           true,
	"runtime.wbBufFlush1":          true,
	"runtime.bgsweep":              true,
	"runtime.sweepone":             true,
	"runtime.(*sweepLocked).sweep": true,
	"runtime.(*mheap).reclaim":     true,
	"runtime.bgscavenge":           true,
	"runtime.gcStart":              true,
	"runtime.gcMarkDone":           true,
	"runtime.gcMarkTermination":    true,
}

var allocFuncs = map[string]bool{"runtime.mallocgc": true}

// cpuShares reads a CPU profile (go tool pprof -traces) and returns the
// fractions of its sampled time whose stack holds a gcFuncs function, and
// an allocFuncs one but no gcFuncs one.
func cpuShares(path string) (gc, alloc float64, err error) {
	out, err := exec.Command("go", "tool", "pprof", "-traces", path).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("go tool pprof -traces %s: %v", path, err)
	}
	return traceShares(string(out))
}

// traceShares is cpuShares on pprof's -traces text: blocks split by a
// "-----------+---" line, each an optional list of labels ("key:  value"),
// then the stack, leaf first, its first line led by the sample's time.
func traceShares(traces string) (gc, alloc float64, err error) {
	var total, inGC, inAlloc time.Duration
	blocks := strings.Split(traces, "-----------+")
	for _, blk := range blocks[1:] {
		lines := strings.Split(blk, "\n")[1:] // the rest of the separator line
		var v time.Duration
		var isGC, isAlloc bool
		for _, l := range lines {
			fn := strings.TrimSpace(l)
			if v == 0 {
				f := strings.Fields(fn)
				if len(f) < 2 {
					continue
				}
				d, err := time.ParseDuration(f[0])
				if err != nil {
					continue // a label
				}
				v, fn = d, strings.TrimSpace(strings.TrimPrefix(fn, f[0]))
			}
			fn = strings.TrimSuffix(fn, " (inline)")
			isGC = isGC || gcFuncs[fn]
			isAlloc = isAlloc || allocFuncs[fn]
		}
		total += v
		switch {
		case isGC:
			inGC += v
		case isAlloc:
			inAlloc += v
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("no samples")
	}
	return float64(inGC) / float64(total), float64(inAlloc) / float64(total), nil
}
