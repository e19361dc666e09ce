package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The independent harness's shape (issue 35): the load another harness
// measures Tollgate with, run here too so that this bench reports what it
// reports. One Traefik replica (this bench's only one), every router in
// it; `wrk -t1 -c16` for -shapewrk (4 s) a run; -shaperounds (3) rounds,
// round r running every row once, in the order of shapeRuns rotated by
// (r-1)/rounds of its length, so that a drift of a noisy machine hits
// every row alike; throughput over /none's in the same round. The rows:
// no middleware, the empty Yaegi plugin (the interpreter's entry cost),
// Traefik's rateLimit with Redis (compiled), the minimal one-EVALSHA
// limiter (the floor), Tollgate (also over the floor), Tollgate in a
// class that syncs with no override and with 10,000 of other keys (also
// over Tollgate: what overrides cost a key without one; overrides.go),
// Tollgate with leases on 10 keys (also over the empty plugin), and
// refusals: Tollgate (its deny cache) against Traefik's rateLimit with
// Redis, limits of rejectMost, on 1,000 keys and on 10. The admitting rows run with limits
// that admit all (the bench applies them first); the refusal rows have
// routes of their own, rejectMost's limits whatever the pass, on a Redis
// of their own (refuseTollgate, refuseRedis), and every key is put over
// its limit right before each of their runs (overLimit).

// The refusal routes: Tollgate and Traefik's rateLimit with Redis,
// configured as /tollgate and /redis with rejectMost's limits always.
const (
	refuseTollgate = "refusetollgate"
	refuseRedis    = "refuseredis"
)

// The harness's load: wrk's threads and connections, its two key loads.
const (
	shapeThreads = 1
	shapeConns   = 16
	shapeKeys    = 1000
	shapeHotKeys = 10
)

// shapeRun is one run of a round, one row of the table: a route on a load
// of keys API keys.
type shapeRun struct {
	route string
	keys  int
}

// shapeRuns are a round's runs, in the table's order.
var shapeRuns = []shapeRun{
	{"none", shapeKeys},
	{"empty", shapeKeys},
	{"redis", shapeKeys},
	{"minimal", shapeKeys},
	{"tollgate", shapeKeys},
	{ovr0, shapeKeys},
	{ovr10k, shapeKeys},
	{leased, shapeHotKeys},
	{refuseTollgate, shapeKeys},
	{refuseRedis, shapeKeys},
	{refuseTollgate, shapeHotKeys},
	{refuseRedis, shapeHotKeys},
}

// shapeBase is every row's reference, no middleware. It and the empty
// plugin read no key: their 1,000-key runs serve the 10-key rows too.
var shapeBase = shapeRun{"none", shapeKeys}

// shapeRefs are the rows with a second ratio, and its reference row.
var shapeRefs = map[shapeRun]shapeRun{
	{"tollgate", shapeKeys}:        {"minimal", shapeKeys},
	{ovr0, shapeKeys}:              {"tollgate", shapeKeys},
	{ovr10k, shapeKeys}:            {"tollgate", shapeKeys},
	{leased, shapeHotKeys}:         {"empty", shapeKeys},
	{refuseTollgate, shapeKeys}:    {refuseRedis, shapeKeys},
	{refuseTollgate, shapeHotKeys}: {refuseRedis, shapeHotKeys},
}

var shapeLabels = map[string]string{
	"none":         "no middleware",
	"empty":        "the empty Yaegi plugin (the interpreter's entry cost)",
	"redis":        "Traefik rateLimit + Redis (compiled)",
	"minimal":      "the minimal one-EVALSHA Yaegi limiter (the floor)",
	"tollgate":     "Tollgate",
	ovr0:           "Tollgate, its class synced, 0 overrides",
	ovr10k:         overridesLabel(defaultOverrides),
	leased:         fmt.Sprintf("Tollgate with leases (max %d)", leaseMax),
	refuseTollgate: "refusals: Tollgate (deny cache)",
	refuseRedis:    "refusals: Traefik rateLimit + Redis",
}

// shapeRefNames name a reference in a ratio's cell.
var shapeRefNames = map[string]string{
	"minimal":   "the floor",
	"tollgate":  "Tollgate",
	"empty":     "the empty plugin",
	refuseRedis: "Traefik rateLimit + Redis refusing",
}

// refuses reports whether s is a refusal row.
func (s shapeRun) refuses() bool { return s.route == refuseTollgate || s.route == refuseRedis }

func (s shapeRun) String() string {
	return shapeLabels[s.route] + ", " + strconv.Itoa(s.keys) + " keys"
}

// shapeOrder is the runs of round (1 to rounds) in the order it runs
// them: shapeRuns rotated by (round-1)/rounds of their length.
func shapeOrder(round, rounds int) []shapeRun {
	var out []shapeRun
	for _, i := range rotation(len(shapeRuns), (round-1)*len(shapeRuns)/rounds) {
		out = append(out, shapeRuns[i])
	}
	return out
}

// shapeFigures is the harness shape's figures by row, each round's:
// throughput, its ratio to no middleware's and to the row's reference
// (shapeRefs), the share refused (%) and Traefik's heap per request
// (KB); the non-2xx responses of the admitting rows; the rounds' count
// and length (rounds 0: not run); the overrides in /ovr10k's class.
type shapeFigures struct {
	rps, ratio, vsRef, refused, kb map[shapeRun]stat
	non2xx                         int64
	rounds                         int
	dur                            time.Duration
	overrides                      int
}

func newShapeFigures() shapeFigures {
	m := func() map[shapeRun]stat { return map[shapeRun]stat{} }
	return shapeFigures{rps: m(), ratio: m(), vsRef: m(), refused: m(), kb: m()}
}

// shapeRound runs round (of rounds) of the harness's shape, the limits
// that admit all already applied, each run for dur with the script of its
// keys (scripts), and records it into res.
func (b *bench) shapeRound(res *results, round, rounds int, dur time.Duration, scripts map[int]string) error {
	runs := map[shapeRun]wrkResult{}
	for _, s := range shapeOrder(round, rounds) {
		if s.refuses() {
			b.overLimit(s.route, s.keys)
		}
		w, err := b.runLoad(s.route, load{threads: shapeThreads, conns: shapeConns, dur: dur, script: scripts[s.keys]})
		if err != nil {
			return err
		}
		runs[s] = w
		fmt.Printf("harness shape, round %d: %-62s %8.0f req/s (%d non-2xx)\n", round, s, w.rps, w.non2xx)
	}
	recordShape(&res.shape, runs)
	var ratios []string
	for _, s := range shapeRuns {
		if ref, ok := shapeRefs[s]; ok && runs[ref].rps > 0 {
			ratios = append(ratios, fmt.Sprintf("%s / %s %.2f", s, ref, runs[s].rps/runs[ref].rps))
		}
	}
	fmt.Printf("harness shape, round %d: %s\n", round, strings.Join(ratios, "; "))
	return nil
}

// overLimit sends each of keys API keys (k0, k1, ...) two requests to
// route, one key after another, so that a refusal row's run starts with
// every key over its limit (a key whose minute had passed spent its one
// request) and Tollgate's deny cache holds its refusal (the second
// request learnt it from Redis): the run measures refusals, the few
// whose minute ends within it aside, not the admission of each key's
// first request in a minute.
func (b *bench) overLimit(route string, keys int) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: shapeConns}}
	defer client.CloseIdleConnections()
	url := b.traefik.URL("/" + route)
	for pass := 0; pass < 2; pass++ {
		forEach(keys, shapeConns, func(i int) error { return get(client, url, "k"+strconv.Itoa(i)) })
	}
}

// recordShape records one round's runs into f: each row's throughput,
// share refused and heap, its throughput over no middleware's and over
// its reference's in the same round.
func recordShape(f *shapeFigures, runs map[shapeRun]wrkResult) {
	base := runs[shapeBase].rps
	for _, s := range shapeRuns {
		w, ok := runs[s]
		if !ok {
			continue
		}
		f.rps[s] = append(f.rps[s], w.rps)
		if base > 0 {
			f.ratio[s] = append(f.ratio[s], w.rps/base)
		}
		if ref, ok := shapeRefs[s]; ok && runs[ref].rps > 0 {
			f.vsRef[s] = append(f.vsRef[s], w.rps/runs[ref].rps)
		}
		if w.requests > 0 {
			f.refused[s] = append(f.refused[s], 100*float64(w.non2xx)/float64(w.requests))
			if w.allocOK {
				f.kb[s] = append(f.kb[s], float64(w.alloc.TotalAlloc)/float64(w.requests)/1024)
			}
		}
		if !s.refuses() {
			f.non2xx += w.non2xx
		}
	}
}

// shapeMarkdown is the harness shape's section: its heading, how it is
// run, and a row per run of a round.
func shapeMarkdown(f shapeFigures) string {
	var b strings.Builder
	b.WriteString("### The independent harness's shape: -t1 -c16, one replica\n\n")
	fmt.Fprintf(&b, "The load another harness measures Tollgate with: `wrk -t%d -c%d -d%s` against one Traefik (this bench's), every router in it; %d rounds, each running every row once, in an order rotated by a third of the rows each round (the rows' order shifted by (r−1)/%d of its length in round r), so that the drifts of a noisy machine hit all rows alike. Ratios are taken within each round; each figure is the median [min–max] over the rounds. Loads: %s API keys in X-API-Key, or %d keys (the hot-key rows).\n\n",
		shapeThreads, shapeConns, f.dur, f.rounds, f.rounds, thousands(shapeKeys), shapeHotKeys)
	b.WriteString("| Row | keys | throughput (req/s) | ÷ no middleware | ÷ its reference | refused (%) | Traefik heap per request (KB) |\n|---|---|---|---|---|---|---|\n")
	for _, s := range shapeRuns {
		ref := "—"
		if r, ok := shapeRefs[s]; ok {
			ref = fmtStat(f.vsRef[s], 2) + " (÷ " + shapeRefNames[r.route] + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", shapeLabels[s.route], thousands(s.keys),
			fmtStat(f.rps[s], 0), fmtStat(f.ratio[s], 2), ref, fmtStat(f.refused[s], 1), fmtStat(f.kb[s], 2))
	}
	fmt.Fprintf(&b, "\nThe admitting rows run with limits that admit all (100,000,000 a second, burst as much): nothing is refused (non-2xx responses in them: %d). /none and the empty plugin read no key: the %d-key rows are divided by their %s-key runs in the same round. Tollgate, its class synced: Tollgate configured as Tollgate is, on the same Redis, but in a class of its own (`class: %s`, `class: %s`) that an admin middleware of the same Traefik names (`serveAdmin: true, adminClasses: [%s, %s]`), so that the class syncs (every request reads the clock, and the pod reads the class's overrides from Redis every 300 ms while requests come); class %s holds no override, class %s %s overrides of API keys that are not the load's (other-0, other-1, …: average and burst %s a second, expiring a day after the bench started; a pod keeps up to maxOverrides, 10,000 by default, a class), written into the class's hash in Redis before the runs. Their ratio to Tollgate is what overrides cost a request whose key has none. Tollgate with leases: Tollgate configured as Tollgate is plus `lease: {max: %d}`, on a Redis of its own. The refusal rows: routes of their own, Tollgate and Traefik's rateLimit with Redis configured as /tollgate and /redis but with one request per key and minute (burst 1), on a Redis of their own; right before each of their runs every key is sent two requests, so that the run starts with every key over its limit and Tollgate's deny cache holding its refusal (a key whose minute ends within the run has one request admitted): Tollgate refuses from its deny cache without a Redis call, Traefik's rateLimit after a round trip to Redis each. Heap: Traefik's runtime.MemStats TotalAlloc over the run, divided by the requests wrk completed.\n",
		f.non2xx, shapeHotKeys, thousands(shapeKeys), ovr0, ovr10k, ovr0, ovr10k, ovr0, ovr10k, thousands(f.overrides), thousands(overrideRate), leaseMax)
	return b.String()
}

// thousands writes n with a comma between thousands (1,000).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
