package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// TestCostConf: the response-cost middlewares, decoded as Traefik does,
// are /tollgate's plus their responseCost (the Redis aside: theirs is
// their own); the routes without responseCost use /tollgate's own
// middleware; every router's service is the bench's backend.
func TestCostConf(t *testing.T) {
	a := sameRedis("127.0.0.1:1")
	a.cost, a.backend = "127.0.0.1:2", "127.0.0.1:3"
	conf := dynamicConf(a, admitAll)
	opts := traefikOptions(t, conf)
	for _, c := range []struct {
		mw   string
		want map[string]interface{}
	}{
		{headerCost + "-limit", map[string]interface{}{"header": usageTokensHeader, "max": strconv.Itoa(costMax)}},
		{bodyCost + "-limit", map[string]interface{}{"jsonFields": []interface{}{"usage.total_tokens"}, "max": strconv.Itoa(costMax)}},
	} {
		options := opts[c.mw]
		if got := options["responseCost"]; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: responseCost %#v, want %#v", c.mw, got, c.want)
		}
		if got := options["redis"]; !reflect.DeepEqual(got, map[string]interface{}{"endpoints": []interface{}{a.cost}}) {
			t.Errorf("%s: redis %v, want its own (%s)", c.mw, got, a.cost)
		}
		rest := map[string]interface{}{}
		for k, v := range options {
			if k != "responseCost" && k != "redis" {
				rest[k] = v
			}
		}
		want := map[string]interface{}{}
		for k, v := range opts["tollgate-limit"] {
			if k != "redis" {
				want[k] = v
			}
		}
		if !reflect.DeepEqual(rest, want) {
			t.Errorf("%s without responseCost and redis: %v, want tollgate-limit's %v", c.mw, rest, want)
		}
	}
	d := decodeDynamic(t, conf)
	for _, c := range costRoutes {
		rt := d.HTTP.Routers[c.route]
		if rt == nil {
			t.Fatalf("no router %s", c.route)
		}
		if !reflect.DeepEqual(rt.Middlewares, []string{c.middleware()}) || rt.Service != "backend" || rt.Rule != "PathPrefix(`/"+c.route+"`)" {
			t.Errorf("router %s: %s, middlewares %v, service %s", c.route, rt.Rule, rt.Middlewares, rt.Service)
		}
	}
	if c, _ := costRouteOf("plainjson"); c.middleware() != "tollgate-limit" {
		t.Errorf("plainjson's middleware %s, want /tollgate's", c.middleware())
	}
	lb := d.HTTP.Services["backend"].LoadBalancer
	if lb == nil || len(lb.Servers) != 1 || lb.Servers[0].URL != "http://"+a.backend {
		t.Errorf("service backend: %+v, want http://%s", lb, a.backend)
	}
	if rt := d.HTTP.Routers[metricsRoute]; rt == nil || rt.Service != "noop@internal" {
		t.Errorf("router %s: %+v", metricsRoute, rt)
	}
}

// TestCostRoutesCompiled: each response-cost middleware, decoded as
// Traefik does and built compiled in front of the bench's backend, hands
// the client the backend's body whole, and the routes with responseCost
// charge each response its total_tokens (beyond the check's 1), as
// Tollgate's counters say; the routes without charge nothing; no cost
// goes uncharged.
func TestCostRoutesCompiled(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	opts := traefikOptions(t, dynamicConf(sameRedis(r.Addr), admitAll))
	ctx := context.Background()
	m, err := e2e.Compiled{}.New(ctx, http.NotFoundHandler(), opts[metricsRoute], metricsRoute)
	if err != nil {
		t.Fatal(err)
	}
	counters := func() (tokens, errs float64) {
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		tokens, _ = e2e.MetricValue(rec.Body.String(), "tollgate_response_cost_tokens_total", nil)
		errs, _ = e2e.MetricValue(rec.Body.String(), "tollgate_response_cost_errors_total", nil)
		return tokens, errs
	}
	const n = 40
	for _, c := range costRoutes {
		options := opts[c.middleware()]
		options["redis"].(map[string]interface{})["timeout"] = "1s" // no fallback on a busy machine
		h, err := e2e.Compiled{}.New(ctx, http.HandlerFunc(serveBackend), options, c.middleware())
		if err != nil {
			t.Fatalf("%s: %v", c.route, err)
		}
		direct := httptest.NewRecorder()
		serveBackend(direct, httptest.NewRequest("GET", "/"+c.route, nil))
		tok0, err0 := counters()
		for i := 0; i < n; i++ {
			req := httptest.NewRequest("GET", "/"+c.route, nil)
			req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%10))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), direct.Body.Bytes()) {
				t.Fatalf("%s: request %d: %d, %d bytes, want 200 and the backend's %d", c.route, i, rec.Code, rec.Body.Len(), direct.Body.Len())
			}
		}
		want := float64(0)
		if c.reads != readsNothing {
			want = float64(n * (totalTokens(c.body) - 1))
		}
		var tok, errs float64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			tok1, err1 := counters()
			if tok, errs = tok1-tok0, err1-err0; tok == want || time.Now().After(deadline) {
				break
			}
		}
		if tok != want || errs != 0 {
			t.Errorf("%s: %d responses: %.0f tokens charged, %.0f costs not charged; want %.0f and 0", c.route, n, tok, errs, want)
		}
	}
}

// TestCostOrder: every rep runs each route once, the order rotated by
// two a rep.
func TestCostOrder(t *testing.T) {
	for rep := 1; rep <= 4; rep++ {
		got := costOrder(rep)
		if len(got) != len(costRoutes) {
			t.Fatalf("rep %d: %v", rep, got)
		}
		seen := map[string]bool{}
		for _, c := range got {
			seen[c.route] = true
		}
		if len(seen) != len(costRoutes) {
			t.Errorf("rep %d: %v runs a route twice", rep, got)
		}
		if first := costRoutes[2*(rep-1)%len(costRoutes)]; got[0] != first {
			t.Errorf("rep %d starts with %s, want %s", rep, got[0].route, first.route)
		}
	}
	if got, want := rotation(4, 1), []int{1, 2, 3, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("rotation(4, 1) = %v, want %v", got, want)
	}
}

// TestCostRunOf: the figures per response of a run, over its window:
// Traefik's CPU and heap over the requests Tollgate decided in it, the
// machine's CPUs over the window's throughput; nothing when the window
// was not read or saw no request.
func TestCostRunOf(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	cw := costWindowed{
		c0: costCounters{at: t0, requests: 1000, cpu: 10, mem: memStats{TotalAlloc: 1 << 30, Mallocs: 5000}},
		c1: costCounters{at: t0.Add(2 * time.Second), requests: 5000, cpu: 10.6, mem: memStats{TotalAlloc: 1<<30 + 4000*2048, Mallocs: 5000 + 4000*30}},
	}
	r := costRunOf(wrkResult{rps: 1900}, cw, 2)
	want := [nFigs]float64{figCPU: 150, figMachine: 1000, figKB: 2, figObjects: 30}
	for i := 0; i < nFigs; i++ {
		if !r.ok[i] || math.Abs(r.fig[i]-want[i]) > 1e-9 {
			t.Errorf("figure %d: %v (ok %v), want %v", i, r.fig[i], r.ok[i], want[i])
		}
	}
	if r.rps != 1900 {
		t.Errorf("throughput %v, want wrk's 1900", r.rps)
	}
	for _, c := range []struct {
		desc string
		cw   costWindowed
	}{
		{"not read", costWindowed{c0: cw.c0, c1: cw.c1, err: io.EOF}},
		{"no request", costWindowed{c0: cw.c0, c1: cw.c0}},
	} {
		if r := costRunOf(wrkResult{rps: 1900}, c.cw, 2); r.ok != [nFigs]bool{} {
			t.Errorf("%s: ok %v, want no figure", c.desc, r.ok)
		}
	}
}

// TestCostWindow: the window leaves out the run's first fifth and last
// tenth.
func TestCostWindow(t *testing.T) {
	if from, to := costWindow(5 * time.Second); from != time.Second || to != 4500*time.Millisecond {
		t.Errorf("5s: %v to %v, want 1s to 4.5s", from, to)
	}
}

// costRunsFixture is a rep's runs: per body, none, header and jsonFields
// at 3000, 2500 and 2000 req/s, Traefik's CPU 300, 340 and 400 µs, heap
// 10, 12 and 15 KB (an event stream's all doubled).
func costRunsFixture() map[string]costRun {
	runs := map[string]costRun{}
	for _, body := range []string{bodyJSON, bodySSE} {
		k := 1.0
		if body == bodySSE {
			k = 2
		}
		for i, reads := range []string{readsNothing, readsHeader, readsBody} {
			r := costRun{rps: []float64{3000, 2500, 2000}[i] / k}
			r.fig[figCPU] = []float64{300, 340, 400}[i] * k
			r.fig[figMachine] = 2e6 / r.rps
			r.fig[figKB] = []float64{10, 12, 15}[i] * k
			r.fig[figObjects] = []float64{100, 120, 150}[i] * k
			for j := range r.ok {
				r.ok[j] = true
			}
			runs[costRouteFor(body, reads)] = r
		}
	}
	return runs
}

// TestRecordCosts: a rep's differences are taken within it: with
// responseCost over without (throughput, every figure), jsonFields over
// header (the scan); a figure a run did not read enters none.
func TestRecordCosts(t *testing.T) {
	f := newCostFigures()
	runs := costRunsFixture()
	recordCosts(&f, runs)
	for _, c := range []struct {
		desc string
		got  stat
		want float64
	}{
		{"usagejson over plain, throughput", f.vsPlain["usagejson"], 2000.0 / 3000},
		{"headerjson over plain, throughput", f.vsPlain["headerjson"], 2500.0 / 3000},
		{"usagejson added CPU", f.added[figCPU]["usagejson"], 100},
		{"headerjson added CPU", f.added[figCPU]["headerjson"], 40},
		{"usagejson scan CPU", f.scan[figCPU]["usagejson"], 60},
		{"usagesse scan KB", f.scan[figKB]["usagesse"], 6},
		{"usagesse added machine", f.added[figMachine]["usagesse"], 2e6/1000 - 2e6/1500},
		{"plainsse CPU", f.fig[figCPU]["plainsse"], 600},
	} {
		if len(c.got) != 1 || math.Abs(c.got[0]-c.want) > 1e-9 {
			t.Errorf("%s: %v, want [%v]", c.desc, c.got, c.want)
		}
	}
	for _, m := range []map[string]stat{f.vsPlain, f.added[figCPU], f.scan[figCPU]} {
		if _, ok := m["plainjson"]; ok {
			t.Errorf("a difference for the route without responseCost: %v", m)
		}
	}
	if _, ok := f.scan[figCPU]["headerjson"]; ok {
		t.Errorf("a scan for the header route: %v", f.scan[figCPU])
	}
	// A CPU the header route's run did not read: no scan, the rest kept.
	r := runs["headerjson"]
	r.ok[figCPU] = false
	runs["headerjson"] = r
	recordCosts(&f, runs)
	if len(f.scan[figCPU]["usagejson"]) != 1 || len(f.added[figCPU]["headerjson"]) != 1 || len(f.scan[figKB]["usagejson"]) != 2 {
		t.Errorf("after a run without CPU: scan %v, added %v, scan KB %v", f.scan[figCPU]["usagejson"], f.added[figCPU]["headerjson"], f.scan[figKB]["usagejson"])
	}
}

// TestCostMarkdown: the table has a column per route, the differences
// only where they are taken, and the summary the medians.
func TestCostMarkdown(t *testing.T) {
	f := newCostFigures()
	recordCosts(&f, costRunsFixture())
	for _, c := range costRoutes {
		f.tokens[c.route] = stat{0}
		if c.reads != readsNothing {
			f.tokens[c.route] = stat{float64(totalTokens(c.body) - 1)}
		}
	}
	md := costMarkdown(f, 1000, 64, 5*time.Second)
	for _, want := range []string{
		"| Cost from the response, 1000 keys, nothing refused | JSON 4 KB: no responseCost | JSON 4 KB: header | JSON 4 KB: jsonFields | event stream, 200 events: no responseCost | event stream, 200 events: header | event stream, 200 events: jsonFields |\n|---|---|---|---|---|---|---|\n",
		"| throughput (req/s) | 3000 [3000–3000] | 2500 [2500–2500] | 2000 [2000–2000] | 1500 [1500–1500] | 1250 [1250–1250] | 1000 [1000–1000] |\n",
		"| Traefik CPU per response (µs) | 300.0 [300.0–300.0] | 340.0 [340.0–340.0] | 400.0 [400.0–400.0] | 600.0",
		"| … added to the same body without responseCost | — | 40.0 [40.0–40.0] | 100.0 [100.0–100.0] | — | 80.0 [80.0–80.0] | 200.0 [200.0–200.0] |\n",
		"| … of it the body's scan (jsonFields over header) | — | — | 60.0 [60.0–60.0] | — | — | 120.0 [120.0–120.0] |\n",
		"| tokens charged per response, beyond the request's 1 | 0.0 [0.0–0.0] | 999.0 [999.0–999.0] | 999.0 [999.0–999.0] | 0.0 [0.0–0.0] | 448.0 [448.0–448.0] | 448.0 [448.0–448.0] |\n",
		"| response costs not charged, in the window | — |",
		"over the windows by reason: none.",
		"from 1s to 4.5s",
		"JSON 4 KB: the wrapper and the charge (header over none) +40.0 µs and +2.00 KB, the scan (jsonFields over header) +60.0 µs and +3.00 KB, together (jsonFields over none) +100.0 µs and +5.00 KB, throughput × 0.67;",
		"event stream, 200 events: the wrapper and the charge (header over none) +80.0 µs and +4.00 KB, the scan (jsonFields over header) +120.0 µs and +6.00 KB, together (jsonFields over none) +200.0 µs and +10.00 KB, throughput × 0.67.",
		"`wrk -t2 -c64 -d5s`",
		"(expected 999 and 448, give or take a batch",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
}
