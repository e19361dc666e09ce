package e2e

// The metrics suite: three real Traefik replicas, each serving its
// process's Tollgate counters on a router of its own (a middleware with
// serveMetrics), one redis-server, and a real Prometheus scraping the
// replicas every second. What the clients saw is compared with what
// Prometheus reads, through PromQL.

import (
	"fmt"
	"io"
	"net/http"
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
