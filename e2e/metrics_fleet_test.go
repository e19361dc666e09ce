package e2e

// The metrics suite's fleet test: what the clients of three replicas saw,
// through traffic and a Redis kill, against what Prometheus reads.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

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
