package e2e

// The operator's kit (deploy/) against a real Prometheus scraping three
// real Traefik replicas: every expression of the rules and of the
// dashboard returns data, so that none is silently empty for a typo in a
// metric or label name; each alert's condition is brought about where the
// fleet can be made to, and Prometheus, loading the rule file itself,
// shows that alert pending or firing.

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	opsRules     = "../deploy/prometheus/tollgate-rules.yml"
	opsDashboard = "../deploy/grafana/tollgate-dashboard.json"
)

// opsRate is what the dashboard's $__rate_interval stands for in the
// tests: 60 scrapes.
const opsRate = "1m"

func TestOpsKitParse(t *testing.T) {
	// The readers themselves, and the files' shape: every alert compares
	// a measure with a threshold, every dashboard query expands.
	for _, c := range []struct {
		desc, expr string
		want       []string
	}{
		{"threshold", `job:x:ratio > 0.1`, []string{"job:x:ratio"}},
		{"equality", `max by (a) (x) == 0`, []string{"max by (a) (x)"}},
		{"nested set operator", `max by (r) (up and on (i) (lead == 1)) == 0`, []string{"max by (r) (up and on (i) (lead == 1))"}},
		{"matchers", `sum(rate(x{a!="b",c=~"d>e"}[5m])) >= 2`, []string{`sum(rate(x{a!="b",c=~"d>e"}[5m]))`}},
		{"two operands", `a > 1 and on (job) b < 2`, []string{"a", "on (job) b"}},
		{"words", `order_total > 1`, []string{"order_total"}},
	} {
		if got := Measures(c.expr); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Measures(%q) = %q, want %q", c.desc, c.expr, got, c.want)
		}
	}
	sel := Selectors(`sum(rate(tollgate_x_total{a="b"}[5m]) or 0 * rate(tollgate_x_total[5m])) / job:tollgate_y:rate5m > on (job) tollgate_x_total{a="b"}`)
	if want := []string{`tollgate_x_total{a="b"}`, `tollgate_x_total`, `job:tollgate_y:rate5m`}; !reflect.DeepEqual(sel, want) {
		t.Errorf("Selectors: %q, want %q", sel, want)
	}
	rules, err := ReadRuleFile(opsRules)
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, r := range rules {
		if !r.Alert {
			continue
		}
		alerts++
		if m := Measures(r.Expr); len(m) != 1 || m[0] == r.Expr {
			t.Errorf("%s: measures %q: want one, compared with a threshold", r.Name, m)
		}
	}
	if alerts == 0 {
		t.Fatalf("%s: no alert", opsRules)
	}
	d, err := ReadDashboard(opsDashboard)
	if err != nil {
		t.Fatal(err)
	}
	if d.Variables["datasource"] != "datasource" || d.Variables["class"] != "query" {
		t.Errorf("variables %v, want a datasource variable and a class query", d.Variables)
	}
	for _, e := range opsDashboardExprs(t, d, "tollgate") {
		if strings.Contains(e.Expr, "$") {
			t.Errorf("%s: %s", e.Where, e.Expr)
		}
	}
	if _, err := ExpandGrafana(`rate(x[$__range])`, opsGrafanaValues("tollgate")); err == nil {
		t.Error("a variable without a value expanded")
	}
}

// opsGrafanaValues are the concrete values of the dashboard's variables:
// a job the harness scrapes, every class (what "All" sends), the rate
// interval.
func opsGrafanaValues(job string) map[string]string {
	return map[string]string{"job": job, "class": ".*", "__rate_interval": opsRate, "datasource": "prometheus"}
}

func opsDashboardExprs(t *testing.T, d *Dashboard, job string) []PanelExpr {
	t.Helper()
	var out []PanelExpr
	for _, e := range d.Exprs {
		x, err := ExpandGrafana(e.Expr, opsGrafanaValues(job))
		if err != nil {
			t.Errorf("%s: %v", e.Where, err)
			continue
		}
		out = append(out, PanelExpr{e.Where, x})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no query", opsDashboard)
	}
	return out
}

// opsConf: one limited route per condition the rules watch, and the
// metrics router. Class slow's Redis is behind a delaying proxy, named
// slow; class regional runs region ops-a, whose peer ops-b has a Redis
// and no pod: its report never comes.
func opsConf(addr, slowAddr, peerAddr string) map[string]interface{} {
	opts := func(redis string, kv ...interface{}) map[string]interface{} {
		return limitOpts(redis, append([]interface{}{"redis.timeout", "1s", "redis.probeInterval", "1s",
			"decisionHeader", "X-Tollgate-Decision", "replicas", 3}, kv...)...)
	}
	region := map[string]interface{}{"name": "ops-a", "weight": 1, "interval": "1s", "peers": []interface{}{
		map[string]interface{}{"name": "ops-b", "weight": 1, "timeout": "1s", "endpoints": []interface{}{peerAddr}}}}
	return withMetricsRouter(dynamicConf(
		route{"api", "PathPrefix(`/api`)", opts(addr, "class", "api", "average", 600, "period", "1m", "burst", 10)},
		route{"shadow", "PathPrefix(`/shadow`)", opts(addr, "class", "shadow", "average", 1, "period", "1m", "burst", 5, "shadow", true)},
		route{"leased", "PathPrefix(`/leased`)", opts(addr, "class", "leased", "average", 6000, "period", "1m", "burst", 1000,
			"lease", map[string]interface{}{"max": 5})},
		route{"strict", "PathPrefix(`/strict`)", opts(addr, "class", "strict", "average", 600, "period", "1m", "burst", 100, "failureMode", "closed")},
		route{"slow", "PathPrefix(`/slow`)", opts(slowAddr, "class", "slow", "average", 6000, "period", "1m", "burst", 1000, "redis.name", "slow")},
		route{"regional", "PathPrefix(`/regional`)", opts(addr, "class", "regional", "average", 600, "period", "1m", "burst", 100, "region", region)},
	))
}

// opsAlertPhase says where each alert's condition is brought about: while
// Redis is up, after it is killed, or nowhere (then its measures alone
// must return data, and the reason is given).
var opsAlertPhase = map[string]string{
	// A shadow policy of 1 a minute under 10 requests a second.
	"TollgateShadowWouldRefuse": "up",
	// Class api: 25 requests a second for 10 allowed: every admission near.
	"TollgateClientsNearLimit": "up",
	// Redis slow answers through a proxy delaying 3 ms each way.
	"TollgateRedisCheckSlow": "up",
	// Peer ops-b's Redis holds no report (no pod runs region ops-b).
	"TollgateRegionPeerUnheard": "up",
	"TollgateDecidingLocally":   "killed",
	"TollgateBreakerOpen":       "killed",
	"TollgateRedisErrors":       "killed",
	// Class strict fails closed.
	"TollgateFailingClosed": "killed",
	// The region's own Redis is the killed one: no pod takes the lead.
	"TollgateRegionNoLeader": "killed",
	// An exchange fails when the region's own Redis fails between the
	// leader's lease and its reads and writes; a dead Redis takes the
	// lease first (TollgateRegionNoLeader), and no fault the harness can
	// place lands in between. Its measure, failed exchanges over all, is
	// evaluated instead: it reads 0 while the exchanges succeed, and
	// proves both series and their labels exist.
	"TollgateRegionExchangeFailing": "",
}

// opsCheck is one expression that must return a number.
type opsCheck struct {
	what, expr string
	alert      string // when set: this alert must be active too
}

func TestMetricsOpsKit(t *testing.T) {
	rules, err := ReadRuleFile(opsRules)
	if err != nil {
		t.Fatal(err)
	}
	dash, err := ReadDashboard(opsDashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if _, ok := opsAlertPhase[r.Name]; r.Alert && !ok {
			t.Fatalf("alert %s: not in opsAlertPhase (where does the test bring its condition about?)", r.Name)
		}
	}
	needTraefik(t)
	peer, err := StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Kill)
	slow, err := StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Kill)
	proxy, err := StartDelayProxy(slow.Addr, 3*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	fe := startFleet(t, 3, func(addr string) map[string]interface{} { return opsConf(addr, proxy.Addr(), peer.Addr) },
		"api@file", "shadow@file", "leased@file", "strict@file", "slow@file", "regional@file", "tollgate-metrics@file")
	var targets []ScrapeTarget
	for _, tr := range fe.fleet.Replicas {
		targets = append(targets, ScrapeTarget{Job: "tollgate", Addr: tr.Web, Path: metricsPath})
	}
	p := startPrometheus(t, targets...)
	if err := p.WaitTargets(time.Time{}, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.LoadRules(len(rules), opsRules); err != nil {
		t.Fatal(err)
	}
	var flows []flow
	for _, f := range []struct {
		path  string
		every time.Duration
	}{{"/api", 40}, {"/shadow", 100}, {"/leased", 20}, {"/strict", 200}, {"/slow", 50}, {"/regional", 100}} {
		flows = append(flows, flow{fleetKey(t, f.path[1:]), "GET", f.path, f.every * time.Millisecond})
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

	// Redis up: the dashboard's queries, the recording rules (their
	// expressions, and the series Prometheus recorded from the file), the
	// alerts of phase "up" whole, and every alert's measures but those
	// that only exist once Redis failed.
	var up []opsCheck
	for _, e := range opsDashboardExprs(t, dash, "tollgate") {
		up = append(up, opsCheck{what: e.Where, expr: e.Expr})
	}
	for _, r := range rules {
		switch {
		case !r.Alert:
			up = append(up, opsCheck{what: "record " + r.Name, expr: r.Expr}, opsCheck{what: "recorded " + r.Name, expr: r.Name})
		case opsAlertPhase[r.Name] == "up":
			up = append(up, opsCheck{what: "alert " + r.Name, expr: r.Expr, alert: r.Name})
		case opsAlertPhase[r.Name] == "":
			for i, m := range Measures(r.Expr) {
				up = append(up, opsCheck{what: fmt.Sprintf("alert %s, measure %d", r.Name, i), expr: m})
			}
		}
	}
	// Redis killed: the alerts of phase "killed", and every selector of
	// every expression matching series (by then, those of the outage too).
	var killed []opsCheck
	seen := map[string]bool{}
	selectors := func(what, expr string) {
		for _, s := range Selectors(expr) {
			if !seen[s] {
				seen[s] = true
				killed = append(killed, opsCheck{what: what + ", selector", expr: "count(" + s + ")"})
			}
		}
	}
	for _, r := range rules {
		if r.Alert && opsAlertPhase[r.Name] == "killed" {
			killed = append(killed, opsCheck{what: "alert " + r.Name, expr: r.Expr, alert: r.Name})
		}
		selectors(r.Name, r.Expr)
	}
	for _, e := range opsDashboardExprs(t, dash, "tollgate") {
		selectors(e.Where, e.Expr)
	}
	t.Run("redis-up", func(t *testing.T) {
		opsWait(t, p, up, 90*time.Second)
		// Not fired: the alerts of an outage stay inactive while Redis
		// is up (a leader is elected within the first intervals, so
		// TollgateRegionNoLeader may be pending at the start only).
		var outage []string
		for _, r := range rules {
			if r.Alert && opsAlertPhase[r.Name] == "killed" {
				outage = append(outage, r.Name)
			}
		}
		var active []string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(time.Second) {
			alerts, err := p.ActiveAlerts()
			if err != nil {
				t.Fatal(err)
			}
			active = active[:0]
			for _, a := range outage {
				if alerts[a] != "" {
					active = append(active, a+" "+alerts[a])
				}
			}
			if len(active) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(active) > 0 {
			t.Errorf("Redis up, alerts of an outage active: %v", active)
		}
	})
	t.Run("redis-killed", func(t *testing.T) {
		// The slowest: TollgateRedisErrors, the breakers' failed probes
		// (each pod's, one a redis.probeInterval of 1 s) over 5m passing
		// 0.05 a second, 15 to 40 s after the kill in the runs seen.
		fe.redis.Kill()
		opsWait(t, p, killed, 150*time.Second)
	})
	stop()
	alerts, _ := p.ActiveAlerts()
	t.Logf("active alerts at the end: %v", alerts)
}

// opsWait evaluates checks until each has returned a number (and its
// alert, if any, was seen active) at least once, for at most within, and
// that every loaded rule evaluates without error all along; then it
// reports those that never did, with what they last returned.
func opsWait(t *testing.T, p *Prometheus, checks []opsCheck, within time.Duration) {
	t.Helper()
	passed := make([]bool, len(checks))
	last := make([]string, len(checks))
	start := time.Now()
	for left := len(checks); left > 0; {
		alerts, err := p.ActiveAlerts()
		if err != nil {
			t.Fatal(err)
		}
		rs, err := p.Rules()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Health == "err" {
				t.Fatalf("rule %s (%s): %s", r.Name, r.Group, r.LastError)
			}
		}
		for i, c := range checks {
			if passed[i] {
				continue
			}
			ss, err := p.QueryVector(c.expr)
			switch {
			case err != nil:
				t.Fatalf("%s: %v", c.what, err)
			case len(Finite(ss)) == 0:
				last[i] = fmt.Sprintf("%d samples, none a number: %v", len(ss), ss)
			case c.alert != "" && alerts[c.alert] == "":
				last[i] = fmt.Sprintf("%v, alert %s not active", ss, c.alert)
			default:
				passed[i] = true
				left--
				t.Logf("%s: after %v: %s", c.what, time.Since(start).Round(time.Second), opsShow(ss, alerts[c.alert]))
			}
		}
		if left == 0 || time.Since(start) > within {
			break
		}
		time.Sleep(time.Second)
	}
	for i, c := range checks {
		if !passed[i] {
			t.Errorf("%s: no data within %v: %s\n  %s", c.what, within, last[i], c.expr)
		}
	}
}

// opsShow is a short view of a result: its first samples.
func opsShow(ss []Sample, alert string) string {
	var b strings.Builder
	for i, s := range ss {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(ss)-3)
			break
		}
		fmt.Fprintf(&b, "%v=%.4g ", s.Labels, s.Value)
	}
	if alert != "" {
		b.WriteString("(alert " + alert + ")")
	}
	return b.String()
}
