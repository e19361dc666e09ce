package main

import (
	"context"
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

// TestShapeOrder: every round runs every row once; round 1 in the table's
// order, round r shifted by (r-1)/rounds of it, so that with three rounds
// no row runs at the same place twice.
func TestShapeOrder(t *testing.T) {
	for _, rounds := range []int{1, 2, 3, 5} {
		at := map[shapeRun][]int{}
		for round := 1; round <= rounds; round++ {
			got := shapeOrder(round, rounds)
			if len(got) != len(shapeRuns) {
				t.Fatalf("%d rounds, round %d: %v", rounds, round, got)
			}
			for i, s := range got {
				at[s] = append(at[s], i)
			}
		}
		for _, s := range shapeRuns {
			if len(at[s]) != rounds {
				t.Errorf("%d rounds: %v runs %d times, want once a round", rounds, s, len(at[s]))
			}
			seen := map[int]bool{}
			for _, i := range at[s] {
				if seen[i] {
					t.Errorf("%d rounds: %v runs at place %d twice (%v)", rounds, s, i, at[s])
				}
				seen[i] = true
			}
		}
	}
	if got := shapeOrder(1, 3); !reflect.DeepEqual(got, shapeRuns) {
		t.Errorf("round 1: %v, want the table's order %v", got, shapeRuns)
	}
	if got, want := shapeOrder(2, 3)[0], shapeRuns[len(shapeRuns)/3]; got != want {
		t.Errorf("round 2 of 3 starts with %v, want %v", got, want)
	}
}

// TestShapeRows: the rows are the harness's: the five routes on 1,000
// keys, Tollgate in a class that syncs with 0 and 10,000 overrides on
// 1,000, Tollgate with leases on 10, the refusals of both Redis limiters
// on both; the ratios' references are the floor, Tollgate, the empty
// plugin, and Traefik's refusals on the same keys.
func TestShapeRows(t *testing.T) {
	want := []string{"none@1000", "empty@1000", "redis@1000", "minimal@1000", "tollgate@1000", "ovr0@1000", "ovr10k@1000", "leased@10",
		"refusetollgate@1000", "refuseredis@1000", "refusetollgate@10", "refuseredis@10"}
	var got []string
	for _, s := range shapeRuns {
		got = append(got, s.route+"@"+strconv.Itoa(s.keys))
		if shapeLabels[s.route] == "" {
			t.Errorf("%s: no label", s.route)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	for s, ref := range shapeRefs {
		if shapeRefNames[ref.route] == "" {
			t.Errorf("%v: its reference %v has no name", s, ref)
		}
		if s.refuses() && ref.keys != s.keys {
			t.Errorf("%v: refusals compared with %v, on other keys", s, ref)
		}
	}
	for _, rt := range overrideRoutes {
		if ref := shapeRefs[shapeRun{rt, shapeKeys}]; ref != (shapeRun{"tollgate", shapeKeys}) {
			t.Errorf("%s: reference %v, want Tollgate on %d keys", rt, ref, shapeKeys)
		}
	}
}

// TestShapeConf: the refusal routes, decoded as Traefik does, are
// /tollgate's and /redis's middlewares with rejectMost's limits on a
// Redis of their own, whatever limits the pass applies.
func TestShapeConf(t *testing.T) {
	a := sameRedis("127.0.0.1:1")
	a.refuse = "127.0.0.1:2"
	reject := decodeDynamic(t, dynamicConf(a, rejectMost))
	for _, l := range []limits{admitAll, rejectMost, memory} {
		d := decodeDynamic(t, dynamicConf(a, l))
		for _, rt := range []string{refuseTollgate, refuseRedis} {
			r := d.HTTP.Routers[rt]
			if r == nil || !reflect.DeepEqual(r.Middlewares, []string{rt + "-limit"}) || r.Service != "backend" {
				t.Errorf("%+v: router %s: %+v", l, rt, r)
			}
		}
		tg := map[string]interface{}(d.HTTP.Middlewares[refuseTollgate+"-limit"].Plugin["tollgate"])
		want := map[string]interface{}{}
		for k, v := range reject.HTTP.Middlewares["tollgate-limit"].Plugin["tollgate"] {
			want[k] = v
		}
		want["redis"] = map[string]interface{}{"endpoints": []interface{}{a.refuse}}
		if !reflect.DeepEqual(tg, want) {
			t.Errorf("%+v: %s-limit %v, want /tollgate's of rejectMost on its Redis %v", l, refuseTollgate, tg, want)
		}
		rl := *d.HTTP.Middlewares[refuseRedis+"-limit"].RateLimit
		wantRL := *reject.HTTP.Middlewares["redis-limit"].RateLimit
		if rl.Redis == nil || !reflect.DeepEqual(rl.Redis.Endpoints, []string{a.refuse}) {
			t.Errorf("%+v: %s-limit's Redis %+v, want %s", l, refuseRedis, rl.Redis, a.refuse)
		}
		rl.Redis, wantRL.Redis = nil, nil
		if !reflect.DeepEqual(rl, wantRL) {
			t.Errorf("%+v: %s-limit %+v, want /redis's of rejectMost %+v", l, refuseRedis, rl, wantRL)
		}
	}
}

// TestShapeRefusalsCompiled: the refusal route's Tollgate, decoded as
// Traefik does and built compiled, admits each key's first request and
// refuses the rest, repeating a refusal from its deny cache: about two
// script calls per key, however many requests.
func TestShapeRefusalsCompiled(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	options := traefikOptions(t, dynamicConf(sameRedis(r.Addr), admitAll))[refuseTollgate+"-limit"]
	options["redis"].(map[string]interface{})["timeout"] = "1s" // no fallback on a busy machine
	h, err := e2e.Compiled{}.New(context.Background(), http.HandlerFunc(serveBackend), options, refuseTollgate)
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey = shapeHotKeys, 30
	s0, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for i := 0; i < keys*perKey; i++ {
		req := httptest.NewRequest("GET", "/"+refuseTollgate, nil)
		req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
	}
	s1, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests on %d keys: %d admitted, %d script calls", keys*perKey, keys, admitted, s1-s0)
	if admitted != keys {
		t.Errorf("%d admitted, want %d (each key's first)", admitted, keys)
	}
	if n := s1 - s0; n > 2*keys+2 {
		t.Errorf("%d script calls for %d requests on %d keys, want at most %d (the deny cache answers the rest)", n, keys*perKey, keys, 2*keys+2)
	}
}

// shapeFixture is a round's runs: /none at 10,000 req/s, every other row
// at a tenth of that times its place in the table; the refusal rows
// refuse 99%.
func shapeFixture() map[shapeRun]wrkResult {
	runs := map[shapeRun]wrkResult{}
	for i, s := range shapeRuns {
		w := wrkResult{rps: 10000, requests: 40000, alloc: memStats{TotalAlloc: 40000 * 1024 * uint64(i+1)}, allocOK: true}
		if i > 0 {
			w.rps = 1000 * float64(i)
		}
		if s.refuses() {
			w.non2xx = 39600
		}
		runs[s] = w
	}
	return runs
}

// TestRecordShape: each row's throughput is divided by /none's and by
// its reference's of the same round; the refusal rows' non-2xx are their
// share refused, the admitting rows' are counted.
func TestRecordShape(t *testing.T) {
	f := newShapeFigures()
	runs := shapeFixture()
	recordShape(&f, runs)
	rps := func(route string, keys int) float64 { return runs[shapeRun{route, keys}].rps }
	for _, c := range []struct {
		desc string
		got  stat
		want float64
	}{
		{"none over none", f.ratio[shapeRun{"none", shapeKeys}], 1},
		{"tollgate over none", f.ratio[shapeRun{"tollgate", shapeKeys}], rps("tollgate", shapeKeys) / 10000},
		{"tollgate over the floor", f.vsRef[shapeRun{"tollgate", shapeKeys}], rps("tollgate", shapeKeys) / rps("minimal", shapeKeys)},
		{"0 overrides over tollgate", f.vsRef[shapeRun{ovr0, shapeKeys}], rps(ovr0, shapeKeys) / rps("tollgate", shapeKeys)},
		{"10,000 overrides over tollgate", f.vsRef[shapeRun{ovr10k, shapeKeys}], rps(ovr10k, shapeKeys) / rps("tollgate", shapeKeys)},
		{"leased over empty", f.vsRef[shapeRun{leased, shapeHotKeys}], rps(leased, shapeHotKeys) / rps("empty", shapeKeys)},
		{"refusals on 10 keys", f.vsRef[shapeRun{refuseTollgate, shapeHotKeys}], rps(refuseTollgate, shapeHotKeys) / rps(refuseRedis, shapeHotKeys)},
		{"refused share", f.refused[shapeRun{refuseRedis, shapeKeys}], 99},
		{"admitted share refused", f.refused[shapeRun{"redis", shapeKeys}], 0},
		{"heap", f.kb[shapeRun{"empty", shapeKeys}], 2},
	} {
		if len(c.got) != 1 || math.Abs(c.got[0]-c.want) > 1e-9 {
			t.Errorf("%s: %v, want [%v]", c.desc, c.got, c.want)
		}
	}
	if len(f.vsRef[shapeRun{"redis", shapeKeys}]) != 0 {
		t.Errorf("redis has a reference ratio: %v", f.vsRef[shapeRun{"redis", shapeKeys}])
	}
	if f.non2xx != 0 {
		t.Errorf("non-2xx of the admitting rows %d, want 0 (the refusals' are not counted)", f.non2xx)
	}
	w := runs[shapeRun{"tollgate", shapeKeys}]
	w.non2xx = 5
	runs[shapeRun{"tollgate", shapeKeys}] = w
	recordShape(&f, runs)
	if f.non2xx != 5 || len(f.rps[shapeBase]) != 2 {
		t.Errorf("second round: non-2xx %d, /none's runs %v; want 5 and two", f.non2xx, f.rps[shapeBase])
	}
}

// TestShapeMarkdown: the section has its heading, the load, a row per
// run of a round with its keys, ratios and share refused.
func TestShapeMarkdown(t *testing.T) {
	f := newShapeFigures()
	f.rounds, f.dur, f.overrides = 3, 4*time.Second, 10000
	for i := 0; i < 3; i++ {
		recordShape(&f, shapeFixture())
	}
	md := shapeMarkdown(f)
	for _, want := range []string{
		"### The independent harness's shape: -t1 -c16, one replica\n\n",
		"`wrk -t1 -c16 -d4s` against one Traefik",
		"3 rounds",
		"1,000 API keys in X-API-Key, or 10 keys",
		"| Row | keys | throughput (req/s) | ÷ no middleware | ÷ its reference | refused (%) | Traefik heap per request (KB) |\n|---|---|---|---|---|---|---|\n",
		"| no middleware | 1,000 | 10000 [10000–10000] | 1.00 [1.00–1.00] | — | 0.0 [0.0–0.0] | 1.00 [1.00–1.00] |\n",
		"| Tollgate | 1,000 | 4000 [4000–4000] | 0.40 [0.40–0.40] | 1.33 [1.33–1.33] (÷ the floor) | 0.0 [0.0–0.0] | 5.00 [5.00–5.00] |\n",
		"| Tollgate, its class synced, 0 overrides | 1,000 | 5000 [5000–5000] | 0.50 [0.50–0.50] | 1.25 [1.25–1.25] (÷ Tollgate) | 0.0 [0.0–0.0] | 6.00 [6.00–6.00] |\n",
		"| Tollgate, its class synced, 10,000 overrides (other keys) | 1,000 | 6000 [6000–6000] | 0.60 [0.60–0.60] | 1.50 [1.50–1.50] (÷ Tollgate) | 0.0 [0.0–0.0] | 7.00 [7.00–7.00] |\n",
		"| Tollgate with leases (max 50) | 10 | 7000 [7000–7000] | 0.70 [0.70–0.70] | 7.00 [7.00–7.00] (÷ the empty plugin) |",
		"| refusals: Tollgate (deny cache) | 1,000 | 8000 [8000–8000] | 0.80 [0.80–0.80] | 0.89 [0.89–0.89] (÷ Traefik rateLimit + Redis refusing) | 99.0 [99.0–99.0] |",
		"| refusals: Traefik rateLimit + Redis | 10 | 11000 [11000–11000] | 1.10 [1.10–1.10] | — | 99.0 [99.0–99.0] |",
		"non-2xx responses in them: 0",
		"(`serveAdmin: true, adminClasses: [ovr0, ovr10k]`)",
		"class ovr0 holds no override, class ovr10k 10,000 overrides of API keys that are not the load's",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n| "); n != len(shapeRuns)+1 {
		t.Errorf("%d table lines, want a header and %d rows", n, len(shapeRuns))
	}
}

// TestMarkdownSections: the bench's Markdown has the two sections when
// they ran, the harness's shape last, and neither when they did not.
func TestMarkdownSections(t *testing.T) {
	res := newResults()
	md := markdown(res, "machine", 1, 5*time.Second, 10*time.Second, 3000, 64, 1000, 10, 0)
	if strings.Contains(md, "independent harness") || strings.Contains(md, "Cost from the response") {
		t.Errorf("sections that did not run:\n%s", md)
	}
	recordCosts(&res.cost, costRunsFixture())
	recordShape(&res.shape, shapeFixture())
	res.shape.rounds, res.shape.dur = 1, 4*time.Second
	md = markdown(res, "machine", 1, 5*time.Second, 10*time.Second, 3000, 64, 1000, 10, 0)
	c, s := strings.Index(md, "| Cost from the response"), strings.Index(md, "### The independent harness's shape")
	if c < 0 || s < 0 || s < c || !strings.HasSuffix(md, shapeMarkdown(res.shape)) {
		t.Errorf("sections at %d (costs) and %d (shape), want both, the shape last:\n%s", c, s, md)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 10: "10", 999: "999", 1000: "1,000", 200000: "200,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
