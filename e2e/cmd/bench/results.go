package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// stat is one figure's runs.
type stat []float64

func (s stat) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := append(stat(nil), s...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s stat) lo() float64 { c := append(stat(nil), s...); sort.Float64s(c); return c[0] }
func (s stat) hi() float64 { c := append(stat(nil), s...); sort.Float64s(c); return c[len(c)-1] }

// fmtStat prints "median [lo–hi]" with the given precision.
func fmtStat(s stat, prec int) string {
	if len(s) == 0 {
		return "—"
	}
	f := "%." + strconv.Itoa(prec) + "f"
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", s.median(), s.lo(), s.hi())
}

type results struct {
	rps, rpsReject         map[string]stat
	ratio, ratioReject     map[string]stat
	p50, p99, p999         map[string]stat // added, ms
	raw50, raw99, raw999   map[string]stat // absolute, ms
	seq50, seq99           map[string]stat // sequential, added, ms
	seqRaw50, seqRaw99     map[string]stat // sequential, absolute, ms
	cmds, bytes, scripts   map[string]stat // per request, admit pass
	cmdsRej, bytesRej      map[string]stat
	memPerKey, memUsage    map[string]stat
	memKeys                map[string]stat
	conns64, conns512      map[string]stat // Redis connections during saturation
	rate                   float64
	rateOf                 string // the route whose saturation, halved, is rate ("" when -rate set it)
	non2xxAdmit, errsFixed int64
	errsSeq                int64

	// Per pass (admitted, refused): Traefik's allocations per request
	// (KB, objects), the same minus no middleware's in the same run, and the
	// share of CPU samples in GC and in allocation (percent).
	allocKB, allocKBAdded [2]map[string]stat
	mallocs, mallocsAdded [2]map[string]stat
	gcShare, allocShare   [2]map[string]stat
	vsMinimal, vsRedis    [2]stat        // Tollgate's throughput over theirs, each run's
	vsEmpty               [2]stat        // and over the empty middleware's
	p99VsRedis            stat           // Tollgate's added p99 over Traefik redis's, at the fixed rate
	p99VsRedisSkipped     int            // runs where Traefik redis's added p99 was not positive
	rateOver              map[string]int // runs where rate was above the route's saturation (tollgate, before)

	// Tollgate over Tollgate at -before's revision, each run's: throughput
	// and heap allocated per request (KB, objects) per pass, added p99 at
	// the fixed rate (runs where the earlier one's was not positive left out).
	vsBefore, allocVsBefore, mallocsVsBefore [2]stat
	p99VsBefore                              stat
	p99VsBeforeSkipped                       int

	// Leases (hot.go): the hot-key load's throughput, script calls and
	// heap per request by route; each run's ratios on the -keys load and
	// the hot one (keysLoad, hotLoad); Tollgate over Traefik redis on the
	// hot one.
	hotRPS, hotScripts, hotKB       map[string]stat
	non2xxHot                       int64
	leasedVsTollgate, leasedVsRedis [2]stat
	hotVsRedis                      stat

	// Calendar quotas (quota.go): Tollgate with a quota over without, each
	// run's, in the admitted pass; whether each run of it made one script
	// call per request (oneScriptEach).
	quotaVsTollgate stat
	quotaOneScript  []bool

	// Concurrency caps (capped.go): Tollgate with a cap over without, each
	// run's, in the admitted pass; per request, its take calls and its
	// give-back calls; each run's slots.
	cappedVsTollgate, cappedTakes, cappedGives stat
	cappedSlots                                []slotCounts

	// The cost from the response (responsecost.go), and the independent
	// harness's shape (shape.go).
	cost  costFigures
	shape shapeFigures
}

func newResults() *results {
	m := func() map[string]stat { return map[string]stat{} }
	return &results{rps: m(), rpsReject: m(), ratio: m(), ratioReject: m(), p50: m(), p99: m(), p999: m(),
		raw50: m(), raw99: m(), raw999: m(), seq50: m(), seq99: m(), seqRaw50: m(), seqRaw99: m(),
		cmds: m(), bytes: m(), scripts: m(), cmdsRej: m(), bytesRej: m(),
		memPerKey: m(), memUsage: m(), memKeys: m(), conns64: m(), conns512: m(),
		allocKB: [2]map[string]stat{m(), m()}, allocKBAdded: [2]map[string]stat{m(), m()},
		mallocs: [2]map[string]stat{m(), m()}, mallocsAdded: [2]map[string]stat{m(), m()},
		gcShare: [2]map[string]stat{m(), m()}, allocShare: [2]map[string]stat{m(), m()}, rateOver: map[string]int{},
		hotRPS: m(), hotScripts: m(), hotKB: m(), cost: newCostFigures(), shape: newShapeFigures()}
}

func markdown(res *results, machine string, reps int, wrkDur, fixedDur time.Duration, seq, conns, keys, hotKeys, memKeys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nEach figure: median [min–max] of %d runs. Load: %d API keys (X-API-Key). Saturation: `wrk -t2 -c%d -d%s`. Fixed rate: %.0f requests/s for %s from 64 connections, latency timed from when each request was due (coordinated omission corrected). Sequential: one client on one keep-alive connection sends %d requests one after another (after %d to warm up), nothing else running, each timed from sending to the end of its reply.\n\n",
		machine, reps, keys, conns, wrkDur, res.rate, fixedDur, seq, seqWarmup)
	b.WriteString("|")
	for _, rt := range routes {
		b.WriteString(" | " + labels[rt])
	}
	b.WriteString(" |\n|---" + strings.Repeat("|---", len(routes)) + "|\n")
	row := func(name string, m map[string]stat, prec int, skipNone bool) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, rt := range routes {
			if skipNone && rt == "none" || len(m[rt]) == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %s |", fmtStat(m[rt], prec))
		}
		b.WriteString("\n")
	}
	row("throughput, nothing rejected (req/s)", res.rps, 0, false)
	row("… ratio to no middleware", res.ratio, 2, false)
	row("throughput, almost all rejected (req/s)", res.rpsReject, 0, false)
	row("… ratio to no middleware", res.ratioReject, 2, false)
	row(fmt.Sprintf("latency p50 at %.0f req/s (ms)", res.rate), res.raw50, 3, false)
	row("… added p50 (ms)", res.p50, 3, true)
	row("latency p99 (ms)", res.raw99, 3, false)
	row("… added p99 (ms)", res.p99, 3, true)
	row("latency p99.9 (ms)", res.raw999, 3, false)
	row("… added p99.9 (ms)", res.p999, 3, true)
	row("sequential latency p50 (ms)", res.seqRaw50, 3, false)
	row("… added p50 (ms)", res.seq50, 3, true)
	row("sequential latency p99 (ms)", res.seqRaw99, 3, false)
	row("… added p99 (ms)", res.seq99, 3, true)
	row("Redis round trips (script calls) per request", res.scripts, 2, true)
	row(fmt.Sprintf("Redis connections during saturation, wrk -c%d", conns), res.conns64, 0, true)
	row("Redis connections during saturation, wrk -c512", res.conns512, 0, true)
	row("Redis commands per request, those inside the script included (admitted)", res.cmds, 2, true)
	row("Redis bytes in+out per request (admitted)", res.bytes, 0, true)
	row("Redis commands per request, inside the script included (rejected)", res.cmdsRej, 2, true)
	row("Redis bytes in+out per request (rejected)", res.bytesRej, 0, true)
	if memKeys > 0 {
		row(fmt.Sprintf("Redis keys after %d distinct clients", memKeys), res.memKeys, 0, true)
		row("Redis memory per key, used_memory delta (B)", res.memPerKey, 0, true)
		row("Redis memory per key, MEMORY USAGE (B)", res.memUsage, 0, true)
	}
	for pass, name := range []string{"nothing rejected", "almost all rejected"} {
		row("Traefik heap allocated per request, "+name+" (KB)", res.allocKB[pass], 2, false)
		row("… added to no middleware (KB)", res.allocKBAdded[pass], 2, true)
		row("Traefik heap objects allocated per request, "+name, res.mallocs[pass], 1, false)
		row("… added to no middleware", res.mallocsAdded[pass], 1, true)
	}
	for pass, name := range []string{"nothing rejected", "almost all rejected"} {
		row("Traefik CPU in GC at saturation, "+name+" (% of samples)", res.gcShare[pass], 1, false)
		row("Traefik CPU allocating (mallocgc, GC excluded), "+name+" (%)", res.allocShare[pass], 1, false)
	}
	b.WriteString("\n" + references(res))
	b.WriteString("\n" + leasesMarkdown(res, keys, hotKeys))
	b.WriteString("\n" + quotaMarkdown(res, keys))
	b.WriteString("\n" + cappedMarkdown(res, keys))
	if len(res.cost.rps) > 0 {
		b.WriteString("\n" + costMarkdown(res.cost, keys, conns, wrkDur))
	}
	b.WriteString("\nAllocations: Traefik's runtime.MemStats (expvar, /debug/vars) TotalAlloc and Mallocs over each saturation run, divided by the requests wrk completed; \"added\" subtracts no middleware's in the same run (negative when refusals, which skip the proxy to the backend, allocate less than a proxied request). GC share: a CPU profile of Traefik (/debug/pprof/profile) over each saturation run but its first and last second (every route's run is profiled alike; -gc=false turns it off); a sample is GC's when its stack holds a background mark worker, a mark assist, a write-barrier flush, sweeping, the scavenger or a GC phase change (gcFuncs in e2e/cmd/bench/alloc.go); allocating is runtime.mallocgc outside those.\n")
	fmt.Fprintf(&b, "\nNon-2xx responses in the nothing-rejected runs: %d; failed requests in the fixed-rate runs: %d; in the sequential runs (errors and non-2xx): %d.\n", res.non2xxAdmit, res.errsFixed, res.errsSeq)
	if res.shape.rounds > 0 {
		b.WriteString("\n" + shapeMarkdown(res.shape))
	}
	return b.String()
}

// references is Tollgate against the two one-round-trip limiters: the
// minimal plugin (what the interpreter costs it, its features aside) and
// Traefik's redis limiter; and against the empty middleware, the floor of
// any interpreted plugin. Each run's ratio is taken within the run.
func references(res *results) string {
	var b strings.Builder
	b.WriteString("| Tollgate against | nothing rejected | almost all rejected |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| throughput, Tollgate / %s | %s | %s |\n", labels["minimal"],
		fmtStat(res.vsMinimal[admitted], 2), fmtStat(res.vsMinimal[refused], 2))
	fmt.Fprintf(&b, "| throughput, Tollgate / %s | %s | %s |\n", labels["redis"],
		fmtStat(res.vsRedis[admitted], 2), fmtStat(res.vsRedis[refused], 2))
	fmt.Fprintf(&b, "| throughput, Tollgate / %s | %s | %s |\n", labels["empty"],
		fmtStat(res.vsEmpty[admitted], 2), fmtStat(res.vsEmpty[refused], 2))
	fmt.Fprintf(&b, "\n%s: the minimal plugin configured empty, interpreted alike, the floor of any interpreted plugin: with nothing rejected an interpreted pass-through (it calls next), with almost all rejected an interpreted middleware that refuses every request with no work (429, no key, no Redis, no headers). It uses no Redis: its Redis figures are \"—\".\n",
		labels["empty"])
	of := "set by -rate"
	if res.rateOf != "" {
		of = "half of " + labels[res.rateOf] + "'s saturation in the first run"
	}
	fmt.Fprintf(&b, "\nAt %.0f requests/s (%s): added p99, Tollgate %s ms, %s %s ms; Tollgate / %s %s",
		res.rate, of, fmtStat(res.p99["tollgate"], 3), labels["redis"], fmtStat(res.p99["redis"], 3), labels["redis"],
		fmtStat(res.p99VsRedis, 2))
	if res.p99VsRedisSkipped > 0 {
		fmt.Fprintf(&b, " (%d runs left out: %s's added p99 was not above 0)", res.p99VsRedisSkipped, labels["redis"])
	}
	b.WriteString(".")
	for _, rt := range []string{"tollgate", "before"} {
		if n := res.rateOver[rt]; n > 0 {
			fmt.Fprintf(&b, " In %d runs this rate was above %s's saturation: its latency there is mostly queueing.", n, labels[rt])
		}
	}
	b.WriteString("\n")
	if enabled("before") {
		b.WriteString("\n" + againstBefore(res))
	}
	return b.String()
}

// againstBefore is Tollgate against itself at -before's revision, loaded
// in the same Traefik and run in the same runs; each run's ratio is taken
// within the run.
func againstBefore(res *results) string {
	var b strings.Builder
	name := "Tollgate / " + labels["before"]
	b.WriteString("| " + name + " | nothing rejected | almost all rejected |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| throughput | %s | %s |\n", fmtStat(res.vsBefore[admitted], 2), fmtStat(res.vsBefore[refused], 2))
	fmt.Fprintf(&b, "| Traefik heap allocated per request (KB) | %s | %s |\n",
		fmtStat(res.allocVsBefore[admitted], 2), fmtStat(res.allocVsBefore[refused], 2))
	fmt.Fprintf(&b, "| Traefik heap objects allocated per request | %s | %s |\n",
		fmtStat(res.mallocsVsBefore[admitted], 2), fmtStat(res.mallocsVsBefore[refused], 2))
	fmt.Fprintf(&b, "| added p99 at %.0f req/s | %s | — |\n", res.rate, fmtStat(res.p99VsBefore, 2))
	if res.p99VsBeforeSkipped > 0 {
		fmt.Fprintf(&b, "\nAdded p99: %d runs left out, where %s's added p99 was not above 0.\n", res.p99VsBeforeSkipped, labels["before"])
	}
	fmt.Fprintf(&b, "\n%s: that revision's plugin source, loaded in the same Traefik as a third local plugin (module %s), configured as Tollgate, with a Redis of its own (so its keys, connections and Redis figures are its alone); in every run it and Tollgate take turns, swapping order every other run. Allocation: Traefik's whole heap allocated per request (no middleware's not subtracted).\n",
		labels["before"], beforeModule)
	return b.String()
}
