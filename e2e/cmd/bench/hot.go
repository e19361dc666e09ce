package main

import (
	"fmt"
	"strings"
)

// The leases' figures, per load: the -keys load of the admitted pass
// (index keysLoad) and the hot-key load (hotLoad).
const (
	keysLoad = 0
	hotLoad  = 1
)

// The leases' targets, on medians: with leases over Traefik's redis
// limiter on the hot keys, script calls per request with leases there,
// with leases over without on the -keys load.
const (
	targetVsRedis   = 1.2
	targetScripts   = 0.2
	targetVsWithout = 1.0
)

// keysScript is a wrk script whose requests cycle over n API keys,
// k0..k<n-1> in X-API-Key.
func keysScript(n int) string {
	return fmt.Sprintf("local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(\"GET\", nil, {[\"X-API-Key\"] = \"k\" .. (n %% %d)})\nend\n", n)
}

// hotOrder is the hot-key pass's routes in rep, interleaved as the
// admitted pass's.
func hotOrder(rep int) []string {
	return only(withLeased(order(rep), rep), "redis", "tollgate", leased)
}

// hotKeys runs wrk with the hot-key script (b.hot) on Traefik's redis
// limiter, Tollgate and Tollgate with leases, in rep, with limits that
// admit all already applied, and records into res: throughput, script
// calls and Traefik's heap per request, and the ratios within the rep.
func (b *bench) hotKeys(res *results, rep int) error {
	for _, rt := range hotOrder(rep) {
		w, err := b.run(rt, b.conns, b.hot)
		if err != nil {
			return err
		}
		res.hotRPS[rt] = append(res.hotRPS[rt], w.rps)
		res.non2xxHot += w.non2xx
		alloc := ""
		if w.requests > 0 {
			scripts := float64(w.redisScripts) / float64(w.requests)
			res.hotScripts[rt] = append(res.hotScripts[rt], scripts)
			alloc = fmt.Sprintf(", Redis %.3f scripts per request", scripts)
			if w.allocOK {
				kb := float64(w.alloc.TotalAlloc) / float64(w.requests) / 1024
				res.hotKB[rt] = append(res.hotKB[rt], kb)
				alloc += fmt.Sprintf(", Traefik %.2f KB per request", kb)
			}
		}
		fmt.Printf("saturation, hot keys:   %-30s %8.0f req/s (%d non-2xx)%s\n", labels[rt], w.rps, w.non2xx, alloc)
	}
	rps := func(rt string) float64 { return res.hotRPS[rt][rep-1] }
	res.leasedVsRedis[hotLoad] = append(res.leasedVsRedis[hotLoad], rps(leased)/rps("redis"))
	res.leasedVsTollgate[hotLoad] = append(res.leasedVsTollgate[hotLoad], rps(leased)/rps("tollgate"))
	res.hotVsRedis = append(res.hotVsRedis, rps("tollgate")/rps("redis"))
	fmt.Printf("throughput, hot keys: with leases / Traefik redis %.2f (target >= %.1f), with leases / without %.2f, without / Traefik redis %.2f\n",
		rps(leased)/rps("redis"), targetVsRedis, rps(leased)/rps("tollgate"), rps("tollgate")/rps("redis"))
	fmt.Printf("script calls per admitted request, hot keys: with leases %.3f (target <= %.1f), without %.3f\n",
		at(res.hotScripts[leased], rep), targetScripts, at(res.hotScripts["tollgate"], rep))
	return nil
}

// leasesMarkdown is the leases' table: Tollgate with leases, without, and
// Traefik's redis limiter on the -keys load and the hot-key load.
func leasesMarkdown(res *results, keys, hot int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| Leases (lease: {max: %d}) | %d keys | %d hot keys |\n|---|---|---|\n", leaseMax, keys, hot)
	row := func(name string, a, h stat, prec int) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, fmtStat(a, prec), fmtStat(h, prec))
	}
	for _, rt := range []string{leased, "tollgate", "redis"} {
		row("throughput, "+labels[rt]+" (req/s)", res.rps[rt], res.hotRPS[rt], 0)
	}
	row("throughput, with leases / without", res.leasedVsTollgate[keysLoad], res.leasedVsTollgate[hotLoad], 2)
	row("throughput, with leases / "+labels["redis"], res.leasedVsRedis[keysLoad], res.leasedVsRedis[hotLoad], 2)
	row("throughput, without / "+labels["redis"], res.vsRedis[admitted], res.hotVsRedis, 2)
	for _, rt := range []string{leased, "tollgate", "redis"} {
		row("Redis script calls per request, "+labels[rt], res.scripts[rt], res.hotScripts[rt], 3)
	}
	for _, rt := range []string{leased, "tollgate", "redis"} {
		row("Traefik heap allocated per request, "+labels[rt]+" (KB)", res.allocKB[admitted][rt], res.hotKB[rt], 2)
	}
	fmt.Fprintf(&b, "\nTargets, on the medians: with leases / %s on the hot keys at least %.1f (%s); script calls per request with leases on the hot keys at most %.1f (%s); with leases / without on the %d keys at least %.1f (%s).\n",
		labels["redis"], targetVsRedis, met(res.leasedVsRedis[hotLoad].median() >= targetVsRedis),
		targetScripts, met(res.hotScripts[leased].median() <= targetScripts),
		keys, targetVsWithout, met(res.leasedVsTollgate[keysLoad].median() >= targetVsWithout))
	fmt.Fprintf(&b, "\n%s: Tollgate configured as Tollgate is, plus `lease: {max: %d}` (ttl 1s, the default), on a Redis of its own; its Redis counters are read %s after each run, so that what its leases give back counts. The hot-key load: wrk as above, keys k0..k%d, nothing refused (limits as in the nothing-rejected runs), the three routes in turn in every run, no CPU profile. Script calls: INFO commandstats, EVALSHA and EVAL, over the run, divided by the requests wrk completed. Non-2xx responses in the hot-key runs: %d.\n",
		labels[leased], leaseMax, leaseSettle, hot-1, res.non2xxHot)
	return b.String()
}

// met says whether a target was met; a figure not measured is not.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
