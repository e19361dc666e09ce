package e2e

// The metrics suite (issue 12): three real Traefik replicas, each serving
// its process's Tollgate counters on a router of its own (a middleware with
// serveMetrics), one redis-server, and a real Prometheus scraping the
// replicas every second. What the clients saw is compared with what
// Prometheus reads, through PromQL.

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// metricsPath is where each replica's metrics router answers (web entry
// point, service noop@internal, the tollgate-metrics middleware).
const metricsPath = "/tollgate-metrics"

// metricsWait bounds how long a PromQL value may take to show what the
// clients saw: two scrapes and a margin.
const metricsWait = 2*PrometheusScrapeInterval + 3*time.Second

// startPrometheus starts Prometheus scraping targets, stopped (and its log
// shown on failure) at the end of the test.
func startPrometheus(t *testing.T, targets ...ScrapeTarget) *Prometheus {
	t.Helper()
	p, err := StartPrometheus(t.TempDir(), targets...)
	if err != nil {
		if NeedPrometheus(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.Log())
		}
		p.Stop()
	})
	return p
}

// waitQuery polls q until it equals want, for at most within; it returns
// nil, or an error with the last value read.
func waitQuery(p *Prometheus, q string, want float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got, err := p.Query(q)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("after %v: %v (want %v)", within, err, want)
			}
			return fmt.Errorf("after %v: %s = %v, want %v", within, q, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getBody(url string) (status int, header http.Header, body []byte, err error) {
	resp, err := fleetClient.Get(url)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

func TestMetricsHarnessOnTraefik(t *testing.T) {
	// The harness itself, against Traefik's own Prometheus metrics (the
	// harness's static configuration enables metrics.prometheus, served on
	// the traefik entry point): no Tollgate involved, so this holds
	// whatever the plugin's state.
	fe := startFleet(t, 1, func(string) map[string]interface{} {
		return dynamicConf(route{"plain", "PathPrefix(`/`)", nil})
	}, "plain@file")
	tr := fe.fleet.Replicas[0]
	p := startPrometheus(t, ScrapeTarget{Job: "traefik", Addr: tr.API, Path: "/metrics"})
	if err := p.WaitTargets(time.Time{}, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitQuery(p, `up{job="traefik"}`, 1, metricsWait); err != nil {
		t.Fatal(err)
	}
	const n = 25
	for i := 0; i < n; i++ {
		if r := fe.mustSend(0, "GET", "/", ""); r.status != 200 {
			t.Fatalf("GET /: %d", r.status)
		}
	}
	sent := time.Now()
	if err := p.WaitTargets(sent, metricsWait); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`sum(traefik_entrypoint_requests_total{entrypoint="web",code="200"})`,
		`sum(traefik_service_requests_total{service="backend@file"})`,
	} {
		if err := waitQuery(p, q, n, metricsWait); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Query(`{job="traefik"}`); err == nil || !strings.Contains(err.Error(), "series") {
		t.Fatalf("a query of several series: %v, want an error", err)
	}
	if _, err := p.Query(`no_such_metric`); err == nil || !strings.Contains(err.Error(), ErrNoSamples.Error()) {
		t.Fatalf("a query of nothing: %v, want ErrNoSamples", err)
	}
	status, _, body, err := getBody("http://" + tr.API + "/metrics")
	if err != nil || status != 200 {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	if report, err := PromtoolCheckMetrics(body); err != nil {
		t.Fatalf("promtool on Traefik's /metrics: %v\n%s", err, report)
	}
	if report, err := PromtoolCheckMetrics([]byte("# TYPE x counter\nx{a=\"1\"} one\n")); err == nil {
		t.Fatalf("promtool accepted a broken exposition: %s", report)
	}
	t.Logf("Prometheus read %d requests from Traefik's own metrics within %v of the traffic", n, time.Since(sent).Round(time.Millisecond))
}

// metricsFleetConf: four limited routes and the metrics router. Checks get
// a 1 s Redis budget, so that while Redis is up it decides every request
// (a 5 ms budget on a shared 2-core machine falls back now and then, and
// the counts below are exact).
func metricsFleetConf(addr string) map[string]interface{} {
	common := []interface{}{"redis.timeout", "1s", "redis.probeInterval", "1s", "decisionHeader", "X-Tollgate-Decision"}
	opts := func(kv ...interface{}) map[string]interface{} {
		return limitOpts(addr, append(append([]interface{}{}, common...), kv...)...)
	}
	search := map[string]interface{}{"name": "search", "pathPrefix": "/ruled/search",
		"average": 1, "period": "1m", "burst": 5, "shadow": true}
	conf := dynamicConf(
		route{"api", "PathPrefix(`/api`)", opts("class", "api", "average", 600, "period", "1m", "burst", 10)},
		route{"shadow", "PathPrefix(`/shadow`)", opts("class", "shadow", "average", 1, "period", "1m", "burst", 5, "shadow", true)},
		route{"twin", "PathPrefix(`/twin`)", opts("class", "twin", "average", 1, "period", "1m", "burst", 5)},
		route{"ruled", "PathPrefix(`/ruled`)", opts("class", "ruled", "rules", []interface{}{search})},
		// A metrics endpoint that also asks for a limit: refused.
		route{"badmetrics", "PathPrefix(`/badmetrics`)", map[string]interface{}{"serveMetrics": true, "average": 10, "burst": 5}},
	)
	return withMetricsRouter(conf)
}

// withMetricsRouter adds to conf the router that serves Tollgate's
// metrics at metricsPath, and returns conf.
func withMetricsRouter(conf map[string]interface{}) map[string]interface{} {
	h := conf["http"].(map[string]interface{})
	h["routers"].(map[string]interface{})["tollgate-metrics"] = map[string]interface{}{
		"rule": "Path(`" + metricsPath + "`)", "priority": 1000, "entryPoints": []interface{}{"web"},
		"service": "noop@internal", "middlewares": []interface{}{"tollgate-metrics"}}
	h["middlewares"].(map[string]interface{})["tollgate-metrics"] = map[string]interface{}{
		"plugin": map[string]interface{}{"tollgate": map[string]interface{}{"serveMetrics": true}}}
	return conf
}

// decisions counts replies by status and by decision header.
type decisions struct {
	status map[int]int
	header map[string]int
}

func countReplies(rs []reply) decisions {
	d := decisions{status: map[int]int{}, header: map[string]int{}}
	for _, r := range rs {
		if r.err != nil {
			d.status[-1]++
			continue
		}
		d.status[r.status]++
		d.header[r.header.Get("X-Tollgate-Decision")]++
	}
	return d
}

func TestMetricsFleet(t *testing.T) {
	fe := startFleet(t, 3, metricsFleetConf,
		"api@file", "shadow@file", "twin@file", "ruled@file", "tollgate-metrics@file")
	var targets []ScrapeTarget
	for _, tr := range fe.fleet.Replicas {
		targets = append(targets, ScrapeTarget{Job: "tollgate", Addr: tr.Web, Path: metricsPath},
			ScrapeTarget{Job: "traefik", Addr: tr.API, Path: "/metrics"})
	}
	p := startPrometheus(t, targets...)
	// Not fatal: the traffic and its headers are checked whatever the
	// metrics routers answer (then each PromQL check is tried once, not
	// polled, to keep the run short).
	within := metricsWait
	if err := p.WaitTargets(time.Time{}, 10*time.Second); err != nil {
		t.Errorf("the metrics routers are not scraped: %v", err)
		within = 0
	}
	wait := func(q string, want int) error { return waitQuery(p, q, float64(want), within) }
	// Every reply the test gets from a limited route, and those of class
	// api, for the totals.
	var all, api []reply
	keep := func(rs []reply) []reply { all = append(all, rs...); return rs }
	keepAPI := func(rs []reply) []reply { api = append(api, rs...); return keep(rs) }

	t.Run("bad-config", func(t *testing.T) {
		// serveMetrics with a limit is refused like any invalid
		// configuration: the plugin's error (naming serveMetrics) in
		// Traefik's log, the router not served.
		tr := fe.fleet.Replicas[0]
		deadline := time.Now().Add(10 * time.Second)
		var line string
		for line == "" {
			for _, l := range strings.Split(tr.Log(), "\n") {
				if strings.Contains(l, "badmetrics") && strings.Contains(strings.ToLower(l), "servemetrics") {
					line = l
				}
			}
			if line == "" && time.Now().After(deadline) {
				t.Errorf("Traefik's log has no error naming serveMetrics for badmetrics-limit:\n%s", tr.Log())
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st := tr.RouterStatus("badmetrics@file"); st == "enabled" {
			t.Errorf("router badmetrics@file is %q", st)
		}
		if r := fe.mustSend(0, "GET", "/badmetrics", "k"); r.status == 200 {
			t.Errorf("GET /badmetrics: %d %v %.200s", r.status, r.header, r.body)
		}
	})

	t.Run("accounting", func(t *testing.T) {
		// Allowed and limited requests, counted once each, by the replica
		// that decided: the sum over replicas equals what the clients saw,
		// decision by decision.
		key := fleetKey(t, "acct")
		rs := keepAPI(fe.burstOf(40, "GET", "/api/acct", key))
		for i := 0; i < 12; i++ {
			rs = append(rs, keepAPI([]reply{fe.send(i, "GET", "/api/acct", key)})...)
		}
		c := countReplies(rs)
		if c.status[200]+c.status[429] != len(rs) || c.status[200] == 0 || c.status[429] == 0 {
			t.Fatalf("statuses %v, want 200s and 429s only", c.status)
		}
		if c.header["redis"]+c.header["cache"] != len(rs) {
			t.Fatalf("decisions %v, want redis or cache only (Redis is up, its budget 1 s)", c.header)
		}
		t.Logf("%d requests: statuses %v, decisions %v", len(rs), c.status, c.header)
		for _, q := range []struct {
			q    string
			want int
		}{
			{`sum(tollgate_requests_total{class="api",result="allowed"}) or vector(0)`, c.status[200]},
			{`sum(tollgate_requests_total{class="api",result="limited",decision=~"redis|cache"}) or vector(0)`, c.status[429]},
			{`sum(tollgate_requests_total{class="api",result="limited"}) or vector(0)`, c.status[429]},
			{`sum(tollgate_requests_total{class="api",decision="redis"}) or vector(0)`, c.header["redis"]},
			{`sum(tollgate_requests_total{class="api",decision="cache"}) or vector(0)`, c.header["cache"]},
			{`sum(tollgate_requests_total{class="api",policy!="api"}) or vector(0)`, 0},
		} {
			if err := wait(q.q, q.want); err != nil {
				t.Error(err)
			}
		}
		// One check in 64 is timed (the unit tests check that some are):
		// here the series must be served, counting no more than the checks.
		if v, err := p.Query(`sum(tollgate_redis_check_duration_seconds_count)`); err != nil || v > float64(c.header["redis"]) {
			t.Errorf("Redis check durations: %v %v, want a series counting at most the %d checks", v, err, c.header["redis"])
		}
	})

	t.Run("shadow", func(t *testing.T) {
		// Burst 5, 20 requests at once: an enforcing twin refuses 15; the
		// shadow middleware (top level, and a shadow rule) answers all 20
		// and counts those 15 as shadow_limited, marking their decision
		// header with ";shadow".
		twin := countReplies(keep(fe.burstOf(20, "GET", "/twin", fleetKey(t, "twin"))))
		if twin.status[200] != 5 || twin.status[429] != 15 {
			t.Fatalf("enforcing twin: statuses %v, want 5 x 200 and 15 x 429", twin.status)
		}
		for _, c := range []struct {
			desc, path, class, policy string
		}{
			{"top-level shadow", "/shadow", "shadow", "shadow"},
			{"shadow rule", "/ruled/search", "ruled", "search"},
		} {
			rs := keep(fe.burstOf(20, "GET", c.path, fleetKey(t, c.class)))
			got := countReplies(rs)
			if got.status[200] != len(rs) {
				t.Errorf("%s: statuses %v, want all 200", c.desc, got.status)
			}
			var shadowed int
			for h, n := range got.header {
				base, tag, _ := strings.Cut(h, ";")
				if (base != "redis" && base != "cache") || (tag != "" && tag != "shadow") {
					t.Errorf("%s: decision header %q", c.desc, h)
				}
				if tag == "shadow" {
					shadowed += n
				}
			}
			if shadowed != twin.status[429] {
				t.Errorf("%s: %d decision headers say shadow (%v), want %d (the twin's refusals)", c.desc, shadowed, got.header, twin.status[429])
			}
			for _, q := range []struct {
				q    string
				want int
			}{
				{fmt.Sprintf(`sum(tollgate_requests_total{class=%q,policy=%q,result="shadow_limited"}) or vector(0)`, c.class, c.policy), twin.status[429]},
				{fmt.Sprintf(`sum(tollgate_requests_total{class=%q,result="allowed"}) or vector(0)`, c.class), twin.status[200]},
				{fmt.Sprintf(`sum(tollgate_requests_total{class=%q,result=~"limited|unavailable"}) or vector(0)`, c.class), 0},
			} {
				if err := wait(q.q, q.want); err != nil {
					t.Errorf("%s: %v", c.desc, err)
				}
			}
		}
		if err := wait(`sum(tollgate_requests_total{class="twin",result="limited"}) or vector(0)`, twin.status[429]); err != nil {
			t.Error(err)
		}
	})

	t.Run("redis-killed", func(t *testing.T) {
		// Redis killed under traffic on every replica: within one scrape
		// (and a margin) of the breakers opening, Prometheus reads every
		// replica's breaker open and local decisions rising.
		var flows []flow
		for i := 0; i < 3; i++ {
			flows = append(flows, flow{fleetKey(t, fmt.Sprintf("kill%d", i)), "GET", "/api/kill", 40 * time.Millisecond})
		}
		d := fe.drive(flows...)
		stopped := false
		stop := func() {
			if !stopped {
				d.Stop()
				stopped = true
			}
		}
		defer stop()
		// This test's Redis only (the label names its endpoint).
		_, port, _ := strings.Cut(fe.redis.Addr, ":")
		ours := fmt.Sprintf(`redis=~".*:%s([^0-9].*)?"`, port)
		breakerOpen := `sum(tollgate_breaker_open{` + ours + `})`
		time.Sleep(1500 * time.Millisecond)
		if err := wait(breakerOpen+` or vector(0)`, 0); err != nil {
			t.Errorf("Redis up: %v", err)
		}
		localBefore, _ := p.Query(`sum(tollgate_requests_total{class="api",decision="local"}) or vector(0)`)
		killed := time.Now()
		fe.redis.Kill()
		var breakerSeen, localSeen time.Time
		observe := 8 * time.Second
		if within == 0 {
			observe = time.Second
		}
		for deadline := killed.Add(observe); time.Now().Before(deadline) && (breakerSeen.IsZero() || localSeen.IsZero()); {
			if v, err := p.Query(breakerOpen); breakerSeen.IsZero() && err == nil && v == 3 {
				breakerSeen = time.Now()
			}
			if v, err := p.Query(`sum(tollgate_requests_total{class="api",decision="local"})`); localSeen.IsZero() && err == nil && v > localBefore {
				localSeen = time.Now()
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		stop()
		// When each replica's breaker opened, as its clients saw it: its
		// first local decision after the kill (the failed checks just
		// before the breaker opens are local too, so this is no later).
		firstLocal := map[int]time.Time{}
		var rs []reply
		for _, f := range flows {
			for _, s := range d.window(f.key, time.Time{}, time.Now().Add(time.Hour)) {
				rs = append(rs, s.reply)
				if s.err != nil || (s.status != 200 && s.status != 429) {
					t.Fatalf("a fail-open route answered %v", s)
				}
				end := s.at.Add(s.latency)
				if s.header.Get("X-Tollgate-Decision") == "local" && s.at.After(killed) {
					if f, ok := firstLocal[s.replica]; !ok || end.Before(f) {
						firstLocal[s.replica] = end
					}
				}
			}
		}
		keepAPI(rs)
		if len(firstLocal) != 3 {
			t.Fatalf("local decisions after the kill on %d replicas, want 3 (%v)", len(firstLocal), countReplies(rs).header)
		}
		var opened time.Time
		for _, at := range firstLocal {
			if at.After(opened) {
				opened = at
			}
		}
		margin := PrometheusScrapeInterval + 1500*time.Millisecond
		t.Logf("Redis killed; every replica local %v later; Prometheus saw the breakers open after %v, local decisions after %v",
			opened.Sub(killed).Round(time.Millisecond), sinceOr(breakerSeen, killed), sinceOr(localSeen, killed))
		switch {
		case breakerSeen.IsZero():
			t.Errorf("%s never reached 3 within %v of the kill", breakerOpen, observe)
		case breakerSeen.Sub(opened) > margin:
			t.Errorf("breakers open on every replica by %s, Prometheus saw it %v later, want within %v",
				opened.Format("15:04:05.000"), breakerSeen.Sub(opened).Round(time.Millisecond), margin)
		}
		switch {
		case localSeen.IsZero():
			t.Errorf(`tollgate_requests_total{class="api",decision="local"} did not rise within %v of the kill`, observe)
		case localSeen.Sub(opened) > margin:
			t.Errorf("local decisions from %s, Prometheus saw them %v later, want within %v",
				opened.Format("15:04:05.000"), localSeen.Sub(opened).Round(time.Millisecond), margin)
		}
		for _, q := range []string{
			`sum(tollgate_breaker_transitions_total{to="open",` + ours + `})`,
			`sum(tollgate_redis_errors_total{` + ours + `})`,
		} {
			if v, err := p.Query(q); err != nil || v < 3 {
				t.Errorf("%s = %v %v, want at least 3 (one breaker per replica)", q, v, err)
			}
		}
	})

	t.Run("totals", func(t *testing.T) {
		// Over the whole run, class api (accounting and the Redis kill):
		// every reply counted once, with the decision its header named;
		// and every request to a limited route counted once, the metrics
		// routers' scrapes not at all.
		c := countReplies(api)
		t.Logf("class api: %d requests, statuses %v, decisions %v; %d requests in all", len(api), c.status, c.header, len(all))
		for _, q := range []struct {
			q    string
			want int
		}{
			{`sum(tollgate_requests_total{class="api",result="allowed"}) or vector(0)`, c.status[200]},
			{`sum(tollgate_requests_total{class="api",result="limited"}) or vector(0)`, c.status[429]},
			{`sum(tollgate_requests_total{class="api",decision="local"}) or vector(0)`, c.header["local"]},
			{`sum(tollgate_requests_total{class="api",decision=~"redis|cache"}) or vector(0)`, c.header["redis"] + c.header["cache"]},
			{`sum(tollgate_requests_total) or vector(0)`, len(all)},
		} {
			if err := wait(q.q, q.want); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("exposition", func(t *testing.T) {
		// One replica's body: the exposition's content type, promtool's
		// lint, each family's type and label names, the label values the
		// contract allows.
		status, header, body, err := getBody(fe.fleet.Replicas[0].URL(metricsPath))
		if err != nil || status != 200 {
			t.Fatalf("GET %s: %d %v", metricsPath, status, err)
		}
		if ct := header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		if report, err := PromtoolCheckMetrics(body); err != nil {
			t.Errorf("%v\n%s\nbody:\n%s", err, report, body)
		}
		checkExposition(t, string(body))
	})
}

func sinceOr(at, from time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// checkExposition checks the families of the contract in a text
// exposition: their TYPE, the label names of every sample, and the values
// of decision and result. Families that must have samples after the
// fleet test's traffic and Redis kill are required.
func checkExposition(t *testing.T, body string) {
	t.Helper()
	families := []struct {
		name, typ string
		labels    []string
		required  bool
	}{
		{"tollgate_requests_total", "counter", []string{"class", "policy", "decision", "result"}, true},
		{"tollgate_near_limit_total", "counter", []string{"class", "policy"}, false},
		{"tollgate_redis_check_duration_seconds", "histogram", []string{"redis"}, true},
		{"tollgate_redis_errors_total", "counter", []string{"redis", "reason"}, true},
		{"tollgate_breaker_open", "gauge", []string{"redis"}, true},
		{"tollgate_breaker_transitions_total", "counter", []string{"redis", "to"}, true},
		{"tollgate_fallback_replicas", "gauge", []string{"class"}, true},
		{"tollgate_redis_connections", "gauge", []string{"redis", "state"}, false},
		{"tollgate_deny_cache_entries", "gauge", nil, true},
	}
	allowed := map[string]map[string]bool{
		"decision": {"redis": true, "cache": true, "local": true, "unavailable": true},
		"result":   {"allowed": true, "limited": true, "unavailable": true, "shadow_limited": true},
	}
	lines := strings.Split(body, "\n")
	for _, f := range families {
		var typ string
		samples := 0
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, "# TYPE "+f.name+" "); ok {
				typ = strings.TrimSpace(rest)
				continue
			}
			if strings.HasPrefix(l, "#") {
				continue
			}
			name, labels, _ := strings.Cut(strings.Fields(l + " x")[0], "{")
			want := append([]string{}, f.labels...)
			switch name {
			case f.name:
			case f.name + "_bucket":
				if f.typ != "histogram" {
					continue
				}
				want = append(want, "le")
			case f.name + "_sum", f.name + "_count":
				if f.typ != "histogram" {
					continue
				}
			default:
				continue
			}
			samples++
			var got []string
			for _, m := range labelName.FindAllStringSubmatch(labels, -1) {
				got = append(got, m[1])
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("%s: labels %v, want %v", l, got, want)
			}
			for label, values := range allowed {
				if m := regexp.MustCompile(label + `="([^"]*)"`).FindStringSubmatch(labels); m != nil && !values[m[1]] {
					t.Errorf("%s: %s %q", l, label, m[1])
				}
			}
		}
		switch {
		case typ == "" && samples == 0 && !f.required:
			t.Logf("%s: not exposed (no samples yet)", f.name)
		case typ != f.typ:
			t.Errorf("%s: TYPE %q, want %q", f.name, typ, f.typ)
		case samples == 0 && f.required:
			t.Errorf("%s: no samples", f.name)
		}
	}
}
