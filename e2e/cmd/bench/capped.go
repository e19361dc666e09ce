package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/e2e"
)

// capped is the route of Tollgate with a concurrency cap (cappedConf),
// configured as /tollgate otherwise, on a Redis of its own. It is not one
// of routes: it runs in the admitted pass only (withCapped).
const capped = "capped"

// cappedMax is /capped's cap: 10^6 requests in flight per client, the
// largest max, so that nothing is refused and what the bench sees is the
// cost of taking a slot and giving it back.
const cappedMax = 1000000

// cappedSettle is how long Redis's counters wait after a run of /capped,
// so that the give-backs of the last requests, sent off their responses'
// path, count in the run.
const cappedSettle = 300 * time.Millisecond

// cappedConf is /capped's concurrency option.
func cappedConf() map[string]interface{} {
	return map[string]interface{}{"max": cappedMax, "key": "client"}
}

// withCapped is rts with /capped next to /tollgate (beside).
func withCapped(rts []string, rep int) []string { return beside(rts, rep, capped) }

// slotCounts is what a run of /capped did to its slots, by the commands
// of Tollgate's scripts in INFO commandstats: a take's call runs SREM
// once (its tombstone), a give-back ZREM once, and SADD once more when it
// came before its take (a tombstone); held is the slots left after the
// run (with cappedSettle).
type slotCounts struct {
	takes, givenBack, tombstones, held int64
}

// slotCalls reads rd's calls of SREM, ZREM and SADD into a slotCounts.
func slotCalls(rd *e2e.Redis) (slotCounts, error) {
	m, err := rd.Info("commandstats")
	if err != nil {
		return slotCounts{}, err
	}
	calls := func(cmd string) int64 {
		for _, f := range strings.Split(m["cmdstat_"+cmd], ",") {
			if k, n, ok := strings.Cut(f, "="); ok && k == "calls" {
				v, _ := strconv.ParseInt(n, 10, 64)
				return v
			}
		}
		return 0
	}
	return slotCounts{takes: calls("srem"), givenBack: calls("zrem"), tombstones: calls("sadd")}, nil
}

// sub is c less c0, held c's.
func (c slotCounts) sub(c0 slotCounts) slotCounts {
	return slotCounts{takes: c.takes - c0.takes, givenBack: c.givenBack - c0.givenBack,
		tombstones: c.tombstones - c0.tombstones, held: c.held}
}

// heldSlots is the slots in rd's sorted sets of slots (keys ending }c).
func heldSlots(rd *e2e.Redis) (int64, error) {
	keys, err := redis.Strings(rd.Do("KEYS", "*}c"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		c, err := redis.Int64(rd.Do("ZCARD", k))
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// cappedRun records w, a run of /capped: its take calls and give-back
// calls (the other script calls) per request, and its slots.
func cappedRun(res *results, w wrkResult) {
	res.cappedSlots = append(res.cappedSlots, w.slots)
	if w.requests > 0 {
		res.cappedTakes = append(res.cappedTakes, float64(w.slots.takes)/float64(w.requests))
		res.cappedGives = append(res.cappedGives, float64(w.redisScripts-w.slots.takes)/float64(w.requests))
	}
}

// cappedRep records rep's /capped over /tollgate and prints it, with the
// script calls, commands and heap per request of each and /capped's slots.
func cappedRep(res *results, rep int) {
	r := res.rps[capped][rep-1] / res.rps["tollgate"][rep-1]
	res.cappedVsTollgate = append(res.cappedVsTollgate, r)
	var s slotCounts
	if len(res.cappedSlots) >= rep {
		s = res.cappedSlots[rep-1]
	}
	fmt.Printf("throughput, admit: Tollgate with a cap / without %.2f; script calls per request with a cap %.3f (takes %.3f, give-backs %.3f), without %.3f; Redis commands per request with a cap %.2f, without %.2f; heap per request with a cap %.2f KB, without %.2f KB; slots taken %d, given back %d (%d before their take), left held %d\n",
		r, at(res.scripts[capped], rep), at(res.cappedTakes, rep), at(res.cappedGives, rep), at(res.scripts["tollgate"], rep),
		at(res.cmds[capped], rep), at(res.cmds["tollgate"], rep), at(res.allocKB[admitted][capped], rep), at(res.allocKB[admitted]["tollgate"], rep),
		s.takes, s.givenBack, s.tombstones, s.held)
}

// cappedMarkdown is the concurrency caps' table: Tollgate with a cap and
// without, in the same runs of the admitted pass.
func cappedMarkdown(res *results, keys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| Concurrency caps, %d keys, nothing rejected | %s | %s |\n|---|---|---|\n", keys, labels[capped], labels["tollgate"])
	row := func(name string, m map[string]stat, prec int) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, fmtStat(m[capped], prec), fmtStat(m["tollgate"], prec))
	}
	row("throughput (req/s)", res.rps, 0)
	row("Redis script calls per request", res.scripts, 3)
	fmt.Fprintf(&b, "| … taking a slot (with the rate) | %s | — |\n", fmtStat(res.cappedTakes, 3))
	fmt.Fprintf(&b, "| … giving slots back | %s | — |\n", fmtStat(res.cappedGives, 3))
	row("Redis commands per request, those inside the script included", res.cmds, 2)
	row("Redis bytes in+out per request", res.bytes, 0)
	row("Redis connections during saturation", res.conns64, 0)
	row("Traefik heap allocated per request (KB)", res.allocKB[admitted], 2)
	row("… added to no middleware (KB)", res.allocKBAdded[admitted], 2)
	row("Traefik heap objects allocated per request", res.mallocs[admitted], 1)
	row("… added to no middleware", res.mallocsAdded[admitted], 1)
	runs := make([]string, len(res.cappedVsTollgate))
	for i, r := range res.cappedVsTollgate {
		runs[i] = fmt.Sprintf("%.2f", r)
	}
	var taken, back, early, held int64
	for _, s := range res.cappedSlots {
		taken, back, early, held = taken+s.takes, back+s.givenBack, early+s.tombstones, held+s.held
	}
	fmt.Fprintf(&b, "\nThroughput, with a cap / without, each run's: %s; median [min–max] %s. Slots over the runs: %d taken, %d given back (%d of them before their take), %d left held %s after a run.\n",
		strings.Join(runs, ", "), fmtStat(res.cappedVsTollgate, 2), taken, back, early, held, cappedSettle)
	fmt.Fprintf(&b, "\n%s: Tollgate configured as Tollgate is, plus `concurrency: {max: %d, key: client}` (never full), on a Redis of its own; in every run's nothing-rejected pass it and Tollgate take turns, swapping order every other run. Script calls: INFO commandstats, EVALSHA and EVAL, over the run and %s after it (the last give-backs), divided by the requests wrk completed; taking a slot: the take script's SREM calls (one each), giving back: the rest, one call per request sent when next returns (a call that failed is queued and sent again off the response's path); slots given back: the give-back script's ZREM calls.\n",
		labels[capped], cappedMax, cappedSettle)
	return b.String()
}
