package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// The cost from the response (issue 36): what Tollgate's responseCost
// costs per response when it reads the cost from the body. Two bodies
// from the bench's backend (bodies.go), a 4 KB JSON chat completion and
// a 200-event stream, each through three routes of Tollgate configured as
// /tollgate (limits that admit all in the pass that runs them):
//
//	/plainjson, /plainsse    /tollgate's own middleware, no responseCost:
//	                         the same response, no wrapper
//	/headerjson, /headersse  responseCost: {header: X-Usage-Tokens, max:
//	                         10^6}: the ResponseWriter's wrapper, the
//	                         header read and the charge, no scan (the
//	                         backend sends the header on both bodies)
//	/usagejson, /usagesse    responseCost: {jsonFields:
//	                         [usage.total_tokens], max: 10^6}: the wrapper,
//	                         the body's scan and the charge
//
// so that header over plain is the wrapper and the charge, jsonFields
// over header the scan, jsonFields over plain all of it. The two with
// responseCost share a Redis of their own (redisOf); the limits admit
// all, so nothing is refused, debt included (some 10^3 tokens a request
// against 10^8 a second).

// The response-cost routes' middlewares (header-limit, usage-limit), the
// router of Tollgate's counters, and the largest cost a response may
// name.
const (
	headerCost   = "header"
	bodyCost     = "usage"
	metricsRoute = "tgmetrics"
	costMax      = 1000000
)

// chargeSettle is how long the bench waits after a run of a route with
// responseCost, so that the charges of its last responses, queued and
// sent off their path, are sent before the next run starts (and count in
// this run's Redis figures, not the next's).
const chargeSettle = 300 * time.Millisecond

// How a response-cost route's Tollgate reads the cost.
const (
	readsNothing = ""       // no responseCost: /tollgate's middleware
	readsHeader  = "header" // responseCost.header
	readsBody    = "body"   // responseCost.jsonFields
)

// costRoute is one route of this pass: the body its backend answers
// (bodyJSON, bodySSE) and how its Tollgate reads the cost.
type costRoute struct {
	route string
	body  string
	reads string
}

// costRoutes are this pass's routes, in the table's order.
var costRoutes = []costRoute{
	{"plainjson", bodyJSON, readsNothing},
	{"headerjson", bodyJSON, readsHeader},
	{"usagejson", bodyJSON, readsBody},
	{"plainsse", bodySSE, readsNothing},
	{"headersse", bodySSE, readsHeader},
	{"usagesse", bodySSE, readsBody},
}

// middleware is c's middleware in dynamicConf.
func (c costRoute) middleware() string {
	switch c.reads {
	case readsHeader:
		return headerCost + "-limit"
	case readsBody:
		return bodyCost + "-limit"
	}
	return "tollgate-limit"
}

// costRouteOf is route's costRoute, if it is one.
func costRouteOf(route string) (costRoute, bool) {
	for _, c := range costRoutes {
		if c.route == route {
			return c, true
		}
	}
	return costRoute{}, false
}

// costRouteFor is the route of body read as reads.
func costRouteFor(body, reads string) string {
	for _, c := range costRoutes {
		if c.body == body && c.reads == reads {
			return c.route
		}
	}
	return ""
}

var bodyLabels = map[string]string{
	bodyJSON: fmt.Sprintf("JSON %d KB", jsonBodyLen/1024),
	bodySSE:  fmt.Sprintf("event stream, %d events", sseEvents),
}

var readsLabels = map[string]string{
	readsNothing: "no responseCost",
	readsHeader:  "header",
	readsBody:    "jsonFields",
}

// headerCostConf is header-limit's responseCost option.
func headerCostConf() map[string]interface{} {
	return map[string]interface{}{"header": usageTokensHeader, "max": costMax}
}

// bodyCostConf is usage-limit's responseCost option.
func bodyCostConf() map[string]interface{} {
	return map[string]interface{}{"jsonFields": []interface{}{"usage.total_tokens"}, "max": costMax}
}

// costOrder is the routes in the order rep runs them: costRoutes rotated
// by two places a rep, so that each starts the pass in turn.
func costOrder(rep int) []costRoute {
	var out []costRoute
	for _, i := range rotation(len(costRoutes), 2*(rep-1)) {
		out = append(out, costRoutes[i])
	}
	return out
}

// rotation is 0..n-1 rotated left by k places.
func rotation(n, k int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = ((i+k)%n + n) % n
	}
	return out
}

// The figures per response of a response-cost run (costRun.fig).
const (
	figCPU     = iota // Traefik's CPU (process_cpu_seconds_total), µs
	figMachine        // the machine's CPUs over the window's throughput, µs
	figKB             // Traefik's heap allocated, KB
	figObjects        // Traefik's heap objects allocated
	nFigs
)

// costRun is one run's figures, per response; ok says which were read.
type costRun struct {
	rps float64 // wrk's
	fig [nFigs]float64
	ok  [nFigs]bool
}

// costFigures is this pass's figures, by route, each run's: throughput
// (wrk's), its ratio to the same body without responseCost, tokens
// charged per response (beyond the request's 1), costs not charged (in
// the window), Redis script calls per response; the figures per response
// (fig), each less the same body's without responseCost in the same rep
// (added), and the jsonFields routes' less the header routes' (scan, by
// the jsonFields route); the costs not charged by reason, over the runs'
// windows.
type costFigures struct {
	rps, vsPlain, tokens, errs, scripts map[string]stat
	fig, added, scan                    [nFigs]map[string]stat
	errsBy                              map[string]float64
	non2xx                              int64
}

func newCostFigures() costFigures {
	m := func() map[string]stat { return map[string]stat{} }
	f := costFigures{rps: m(), vsPlain: m(), tokens: m(), errs: m(), scripts: m(), errsBy: map[string]float64{}}
	for i := 0; i < nFigs; i++ {
		f.fig[i], f.added[i], f.scan[i] = m(), m(), m()
	}
	return f
}

// costReasons are the reasons of tollgate_response_cost_errors_total.
var costReasons = []string{"invalid", "missing", "encoded", "failed", "dropped"}

// costCounters are the counters read at an end of a run's window: when,
// Tollgate's (the requests it decided, the tokens charged from responses,
// the costs not charged by reason), Traefik's CPU (seconds) and heap, the
// route's Redis's script calls.
type costCounters struct {
	at               time.Time
	requests, tokens float64
	errs             map[string]float64
	cpu              float64
	mem              memStats
	scripts          int64
}

// costWindow is when, into a run of dur, the response-cost pass reads
// its counters: a fifth in (the connections' first requests have been
// answered) and a tenth before the end (before wrk stops, cutting the
// responses in flight). wrk's connections each send a request as soon as
// the last is answered, so the requests Tollgate decided within the
// window are the responses completed within it, each whole, and the work
// within it is the steady state's.
func costWindow(dur time.Duration) (from, to time.Duration) { return dur / 5, dur * 9 / 10 }

// costCounters reads Tollgate's counters (its serveMetrics router: every
// Tollgate middleware of the process, of which only route's has traffic
// in its run), Traefik's process_cpu_seconds_total (its Prometheus
// metrics) and heap (/debug/vars), and the script calls of route's Redis.
func (b *bench) costCounters(route string) (costCounters, error) {
	c := costCounters{at: time.Now(), errs: map[string]float64{}}
	resp, err := http.Get(b.traefik.URL("/" + metricsRoute))
	if err != nil {
		return c, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		return c, err
	}
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("/%s: %s", metricsRoute, resp.Status)
	}
	exp := string(body)
	c.requests, _ = e2e.MetricValue(exp, "tollgate_requests_total", nil)
	c.tokens, _ = e2e.MetricValue(exp, "tollgate_response_cost_tokens_total", nil)
	for _, r := range costReasons {
		c.errs[r], _ = e2e.MetricValue(exp, "tollgate_response_cost_errors_total", map[string]string{"reason": r})
	}
	if c.cpu, err = b.traefik.Metric("process_cpu_seconds_total"); err != nil {
		return c, err
	}
	if c.cpu <= 0 {
		return c, fmt.Errorf("traefik's metrics have no process_cpu_seconds_total")
	}
	if c.mem, err = b.memStats(); err != nil {
		return c, err
	}
	c.scripts, err = b.redisOf(route).ScriptCalls()
	return c, err
}

// costWindowed is the counters read at the ends of a run's window, and
// whether both reads succeeded.
type costWindowed struct {
	c0, c1 costCounters
	err    error
}

// readWindow reads route's counters at from and to after start and sends
// them on out.
func (b *bench) readWindow(route string, start time.Time, from, to time.Duration, out chan<- costWindowed) {
	var w costWindowed
	time.Sleep(time.Until(start.Add(from)))
	w.c0, w.err = b.costCounters(route)
	time.Sleep(time.Until(start.Add(to)))
	if c1, err := b.costCounters(route); w.err == nil {
		w.c1, w.err = c1, err
	}
	out <- w
}

// responseCosts runs wrk on each response-cost route as the saturation
// passes do (b.conns connections, the -keys load, b.wrkDur), in rep's
// order, limits that admit all already applied, and records into res
// wrk's throughput and, over the run's window (costWindow), per response:
// Traefik's CPU and heap, tokens charged, Redis script calls, and the
// costs not charged; then rep's differences.
func (b *bench) responseCosts(res *results, rep int) error {
	runs := map[string]costRun{}
	from, to := costWindow(b.wrkDur)
	for _, c := range costOrder(rep) {
		win := make(chan costWindowed, 1)
		go b.readWindow(c.route, time.Now(), from, to, win)
		w, err := b.run(c.route, b.conns, b.script)
		if err != nil {
			return err
		}
		cw := <-win
		if cw.err != nil {
			fmt.Printf("response cost, %s: the window's counters not read: %v\n", c.route, cw.err)
		}
		r := costRunOf(w, cw, runtime.NumCPU())
		runs[c.route] = r
		res.cost.non2xx += w.non2xx
		tokens, errs, scripts := math.NaN(), math.NaN(), math.NaN()
		if n := cw.c1.requests - cw.c0.requests; cw.err == nil && n > 0 {
			tokens, scripts, errs = (cw.c1.tokens-cw.c0.tokens)/n, float64(cw.c1.scripts-cw.c0.scripts)/n, 0
			for _, reason := range costReasons {
				d := cw.c1.errs[reason] - cw.c0.errs[reason]
				errs += d
				res.cost.errsBy[reason] += d
			}
			res.cost.tokens[c.route] = append(res.cost.tokens[c.route], tokens)
			res.cost.scripts[c.route] = append(res.cost.scripts[c.route], scripts)
			res.cost.errs[c.route] = append(res.cost.errs[c.route], errs)
		}
		fmt.Printf("response cost, %-25s %-15s %8.0f req/s (%d non-2xx); per response: Traefik %.0f µs CPU, %.2f KB in %.0f allocations, %.1f tokens charged, Redis %.3f scripts; %.0f costs not charged\n",
			bodyLabels[c.body]+":", readsLabels[c.reads], w.rps, w.non2xx, r.fig[figCPU], r.fig[figKB], r.fig[figObjects], tokens, scripts, errs)
	}
	recordCosts(&res.cost, runs)
	for _, body := range []string{bodyJSON, bodySSE} {
		u := costRouteFor(body, readsBody)
		fmt.Printf("response cost, %s: jsonFields over no responseCost: throughput %.2f, %+.1f µs Traefik CPU, %+.2f KB heap per response; of it the scan (over header) %+.1f µs, %+.2f KB\n",
			bodyLabels[body], last(res.cost.vsPlain[u]), last(res.cost.added[figCPU][u]), last(res.cost.added[figKB][u]),
			last(res.cost.scan[figCPU][u]), last(res.cost.scan[figKB][u]))
	}
	return nil
}

// last is s's last figure, NaN when it has none.
func last(s stat) float64 { return at(s, len(s)) }

// costRunOf is a run's figures per response: wrk's throughput (w), and
// over the window (cw, when read), per request Tollgate decided in it:
// Traefik's CPU and heap, and the machine's cpus over the window's
// throughput.
func costRunOf(w wrkResult, cw costWindowed, cpus int) costRun {
	r := costRun{rps: w.rps}
	n := cw.c1.requests - cw.c0.requests
	secs := cw.c1.at.Sub(cw.c0.at).Seconds()
	if cw.err != nil || n <= 0 || secs <= 0 {
		return r
	}
	r.fig[figCPU], r.ok[figCPU] = (cw.c1.cpu-cw.c0.cpu)*1e6/n, true
	r.fig[figMachine], r.ok[figMachine] = float64(cpus)*1e6*secs/n, true
	r.fig[figKB], r.ok[figKB] = float64(cw.c1.mem.TotalAlloc-cw.c0.mem.TotalAlloc)/n/1024, true
	r.fig[figObjects], r.ok[figObjects] = float64(cw.c1.mem.Mallocs-cw.c0.mem.Mallocs)/n, true
	return r
}

// recordCosts records one rep's runs (by route) into f: each route's
// throughput and figures, and the differences within the rep: a route
// with responseCost over its body's without (vsPlain, added), a
// jsonFields route over its body's header route (scan). A figure a run
// did not read is left out, with the differences it enters.
func recordCosts(f *costFigures, runs map[string]costRun) {
	for _, c := range costRoutes {
		r, ok := runs[c.route]
		if !ok {
			continue
		}
		f.rps[c.route] = append(f.rps[c.route], r.rps)
		for i := 0; i < nFigs; i++ {
			if r.ok[i] {
				f.fig[i][c.route] = append(f.fig[i][c.route], r.fig[i])
			}
		}
		if c.reads == readsNothing {
			continue
		}
		if p, ok := runs[costRouteFor(c.body, readsNothing)]; ok {
			if p.rps > 0 {
				f.vsPlain[c.route] = append(f.vsPlain[c.route], r.rps/p.rps)
			}
			for i := 0; i < nFigs; i++ {
				if r.ok[i] && p.ok[i] {
					f.added[i][c.route] = append(f.added[i][c.route], r.fig[i]-p.fig[i])
				}
			}
		}
		if c.reads != readsBody {
			continue
		}
		if h, ok := runs[costRouteFor(c.body, readsHeader)]; ok {
			for i := 0; i < nFigs; i++ {
				if r.ok[i] && h.ok[i] {
					f.scan[i][c.route] = append(f.scan[i][c.route], r.fig[i]-h.fig[i])
				}
			}
		}
	}
}

// costMarkdown is the response costs' table: each body through Tollgate
// without responseCost, reading the header, reading the body.
func costMarkdown(f costFigures, keys, conns int, wrkDur time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| Cost from the response, %d keys, nothing refused |", keys)
	for _, c := range costRoutes {
		fmt.Fprintf(&b, " %s: %s |", bodyLabels[c.body], readsLabels[c.reads])
	}
	b.WriteString("\n|---" + strings.Repeat("|---", len(costRoutes)) + "|\n")
	all := func(costRoute) bool { return true }
	costed := func(c costRoute) bool { return c.reads != readsNothing }
	scanned := func(c costRoute) bool { return c.reads == readsBody }
	row := func(name string, m map[string]stat, prec int, show func(costRoute) bool) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range costRoutes {
			if !show(c) || len(m[c.route]) == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %s |", fmtStat(m[c.route], prec))
		}
		b.WriteString("\n")
	}
	row("throughput (req/s)", f.rps, 0, all)
	row("… over the same body without responseCost", f.vsPlain, 2, costed)
	names := [nFigs]string{
		"Traefik CPU per response (µs)",
		"machine CPU per response at saturation, CPUs ÷ throughput (µs)",
		"Traefik heap allocated per response (KB)",
		"Traefik heap objects allocated per response",
	}
	precs := [nFigs]int{1, 1, 2, 1}
	for i := 0; i < nFigs; i++ {
		row(names[i], f.fig[i], precs[i], all)
		row("… added to the same body without responseCost", f.added[i], precs[i], costed)
		row("… of it the body's scan (jsonFields over header)", f.scan[i], precs[i], scanned)
	}
	row("tokens charged per response, beyond the request's 1", f.tokens, 1, all)
	row("Redis script calls per response", f.scripts, 3, all)
	row("response costs not charged, in the window", f.errs, 0, all)
	b.WriteString("\nWhat reading the cost costs per response (medians of each run's difference, Traefik's CPU and heap):")
	for i, body := range []string{bodyJSON, bodySSE} {
		h, u := costRouteFor(body, readsHeader), costRouteFor(body, readsBody)
		sep := ";"
		if i == 1 {
			sep = "."
		}
		fmt.Fprintf(&b, " %s: the wrapper and the charge (header over none) %+.1f µs and %+.2f KB, the scan (jsonFields over header) %+.1f µs and %+.2f KB, together (jsonFields over none) %+.1f µs and %+.2f KB, throughput × %.2f%s",
			bodyLabels[body], f.added[figCPU][h].median(), f.added[figKB][h].median(),
			f.scan[figCPU][u].median(), f.scan[figKB][u].median(),
			f.added[figCPU][u].median(), f.added[figKB][u].median(), f.vsPlain[u].median(), sep)
	}
	var reasons []string
	for _, r := range costReasons {
		if n := f.errsBy[r]; n != 0 {
			reasons = append(reasons, fmt.Sprintf("%s %.0f", r, n))
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "none")
	}
	from, to := costWindow(wrkDur)
	fmt.Fprintf(&b, "\n\nThe bench's backend answers each body the same on its three routes: %s, a chat completion of %d bytes (application/json, Content-Length) ending in its usage (total_tokens %d); %s, a streamed chat completion (text/event-stream, chunked), %d `data: {...}` events (%d bytes in all) each written and flushed alone, the last carrying the usage (total_tokens %d), then `data: [DONE]`; both with `%s: <total_tokens>`. Routes: Tollgate configured as Tollgate is (nothing refused), without responseCost (Tollgate's own middleware), with `responseCost: {header: %s, max: %d}` (the ResponseWriter's wrapper, the header read and taken out, the charge; no scan), with `responseCost: {jsonFields: [usage.total_tokens], max: %d}` (the wrapper, the scan, the charge); the two with responseCost on a Redis of their own. Each run: `wrk -t2 -c%d -d%s` as the saturation runs, the six routes in turn in every run, in an order rotated by two each run. Throughput: wrk's. The figures per response are read over a window of each run, from %s to %s (wrk's connections all answered once, none cut by wrk's end), divided by the requests Tollgate decided in it (tollgate_requests_total): with every connection sending its next request as soon as the last is answered, these are the responses completed in it. Traefik CPU: process_cpu_seconds_total (Traefik's Prometheus metrics); machine CPU: %d CPUs over the window's throughput, what a response costs the whole machine (Traefik, wrk, Redis, the backend) when it is saturated; heap: runtime.MemStats TotalAlloc and Mallocs. Tokens charged: Tollgate's tollgate_response_cost_tokens_total (its serveMetrics router), the charges beyond the check's cost of 1 (expected %d and %d, give or take a batch of charges, up to 64, counted at either end of the window); not charged: tollgate_response_cost_errors_total, over the windows by reason: %s. Script calls: the check's and the charges' (batched, up to 64 a call). Non-2xx responses in these runs: %d.\n",
		bodyLabels[bodyJSON], jsonBodyLen, totalTokens(bodyJSON), bodyLabels[bodySSE], sseEvents, sseLen(), totalTokens(bodySSE), usageTokensHeader,
		usageTokensHeader, costMax, costMax, conns, wrkDur, from, to, runtime.NumCPU(), totalTokens(bodyJSON)-1, totalTokens(bodySSE)-1,
		strings.Join(reasons, ", "), f.non2xx)
	return b.String()
}
