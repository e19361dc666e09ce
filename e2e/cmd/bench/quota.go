package main

import (
	"fmt"
	"strings"
)

// quota is the route of Tollgate with a calendar quota (quotaConf),
// configured as /tollgate otherwise, on a Redis of its own. It is not one
// of routes: it runs in the admitted pass only (withQuota).
const quota = "quota"

// quotaLimit is /quota's quota: 10^12 a month, the largest limit, so that
// nothing is refused and what the bench sees is the cost of counting.
const quotaLimit = 1000000000000

// targetQuota is the target, on the median, of /quota's throughput over
// /tollgate's in the admitted pass.
const targetQuota = 0.9

// quotaConf is /quota's quotas option.
func quotaConf() []interface{} {
	return []interface{}{map[string]interface{}{"name": "month", "limit": int64(quotaLimit), "window": "month"}}
}

// withQuota is rts with /quota next to /tollgate (beside).
func withQuota(rts []string, rep int) []string { return beside(rts, rep, quota) }

// admitOrder is the admitted pass's routes in rep: rts with /leased,
// /quota and /capped, /capped next to /tollgate.
func admitOrder(rts []string, rep int) []string {
	return withCapped(withQuota(withLeased(rts, rep), rep), rep)
}

// quotaRep records rep's /quota over /tollgate and prints it, with
// whether /quota's run made one script call per request.
func quotaRep(res *results, rep int) {
	r := res.rps[quota][rep-1] / res.rps["tollgate"][rep-1]
	res.quotaVsTollgate = append(res.quotaVsTollgate, r)
	one := len(res.quotaOneScript) >= rep && res.quotaOneScript[rep-1]
	fmt.Printf("throughput, admit: Tollgate with a quota / without %.2f (target >= %.1f); script calls per request with a quota %.3f (one each: %v), without %.3f\n",
		r, targetQuota, at(res.scripts[quota], rep), one, at(res.scripts["tollgate"], rep))
}

// oneScriptEach reports whether w made one script call per request: at
// least one per request wrk completed, at most one more per connection
// (the request each may have left in flight at wrk's end).
func oneScriptEach(w wrkResult, conns int) bool {
	return w.redisScripts >= w.requests && w.redisScripts <= w.requests+int64(conns)
}

// quotaMarkdown is the quotas' table: Tollgate with a quota and without,
// in the same runs of the admitted pass.
func quotaMarkdown(res *results, keys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| Calendar quotas, %d keys, nothing rejected | %s | %s |\n|---|---|---|\n", keys, labels[quota], labels["tollgate"])
	row := func(name string, m map[string]stat, prec int) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, fmtStat(m[quota], prec), fmtStat(m["tollgate"], prec))
	}
	row("throughput (req/s)", res.rps, 0)
	row("Redis script calls per request", res.scripts, 3)
	row("Redis commands per request, those inside the script included", res.cmds, 2)
	row("Redis bytes in+out per request", res.bytes, 0)
	row("Redis connections during saturation", res.conns64, 0)
	row("Traefik heap allocated per request (KB)", res.allocKB[admitted], 2)
	row("… added to no middleware (KB)", res.allocKBAdded[admitted], 2)
	row("Traefik heap objects allocated per request", res.mallocs[admitted], 1)
	row("… added to no middleware", res.mallocsAdded[admitted], 1)
	runs := make([]string, len(res.quotaVsTollgate))
	for i, r := range res.quotaVsTollgate {
		runs[i] = fmt.Sprintf("%.2f", r)
	}
	one := 0
	for _, ok := range res.quotaOneScript {
		if ok {
			one++
		}
	}
	fmt.Fprintf(&b, "\nThroughput, with a quota / without, each run's: %s; median [min–max] %s. Target, on the median: at least %.1f (%s). Script calls per request with a quota: %s, one call charging the rate and the quota (target: one per request, the requests wrk left in flight at its end aside, in every run: %d of %d, %s).\n",
		strings.Join(runs, ", "), fmtStat(res.quotaVsTollgate, 2), targetQuota, met(res.quotaVsTollgate.median() >= targetQuota),
		fmtStat(res.scripts[quota], 3), one, len(res.quotaOneScript), met(len(res.quotaOneScript) > 0 && one == len(res.quotaOneScript)))
	fmt.Fprintf(&b, "\n%s: Tollgate configured as Tollgate is, plus `quotas: [{name: month, limit: %d, window: month}]` (nothing refused), on a Redis of its own; in every run's nothing-rejected pass it and Tollgate take turns, swapping order every other run. Script calls: INFO commandstats, EVALSHA and EVAL, over the run, divided by the requests wrk completed (those it left in flight at its end, at most one per connection, count in Redis only).\n",
		labels[quota], int64(quotaLimit))
	return b.String()
}
