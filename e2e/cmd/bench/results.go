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
	non2xxAdmit, errsFixed int64
	errsSeq                int64
}

func newResults() *results {
	m := func() map[string]stat { return map[string]stat{} }
	return &results{rps: m(), rpsReject: m(), ratio: m(), ratioReject: m(), p50: m(), p99: m(), p999: m(),
		raw50: m(), raw99: m(), raw999: m(), seq50: m(), seq99: m(), seqRaw50: m(), seqRaw99: m(),
		cmds: m(), bytes: m(), scripts: m(), cmdsRej: m(), bytesRej: m(),
		memPerKey: m(), memUsage: m(), memKeys: m(), conns64: m(), conns512: m()}
}

func markdown(res *results, machine string, reps int, wrkDur, fixedDur time.Duration, seq, conns, keys, memKeys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nEach figure: median [min–max] of %d runs. Load: %d API keys (X-API-Key). Saturation: `wrk -t2 -c%d -d%s`. Fixed rate: %.0f requests/s for %s from 64 connections, latency timed from when each request was due (coordinated omission corrected). Sequential: one client on one keep-alive connection sends %d requests one after another (after %d to warm up), nothing else running, each timed from sending to the end of its reply.\n\n",
		machine, reps, keys, conns, wrkDur, res.rate, fixedDur, seq, seqWarmup)
	b.WriteString("| | no middleware | Traefik rateLimit (memory) | Traefik rateLimit (redis) | Tollgate |\n|---|---|---|---|---|\n")
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
	fmt.Fprintf(&b, "\nNon-2xx responses in the nothing-rejected runs: %d; failed requests in the fixed-rate runs: %d; in the sequential runs (errors and non-2xx): %d.\n", res.non2xxAdmit, res.errsFixed, res.errsSeq)
	return b.String()
}
