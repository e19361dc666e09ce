package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrNoPrometheus reports that prometheus or promtool is not installed.
var ErrNoPrometheus = errors.New("prometheus/promtool not found on PATH (scripts/deps.sh, or apt-get install -y prometheus)")

// ErrNoSamples reports an instant query whose result is an empty vector:
// no series matched (yet).
var ErrNoSamples = errors.New("query returned no samples")

// NeedPrometheus is NeedTraefik for tests that also need Prometheus: skip
// when a binary is missing, unless CI is set, where they fail.
func NeedPrometheus(err error) (skip bool) {
	return NeedTraefik(err) || (errors.Is(err, ErrNoPrometheus) && os.Getenv("CI") == "")
}

// PrometheusScrapeInterval is how often the harness's Prometheus scrapes
// every target; a scrape times out before the next one is due.
const PrometheusScrapeInterval = time.Second

// ScrapeTarget is one endpoint for Prometheus to scrape.
type ScrapeTarget struct {
	Job  string // job label; targets of one job share a scrape configuration
	Addr string // host:port
	Path string // metrics path, e.g. /metrics
}

// Prometheus is a real Prometheus server on a free loopback port, started
// for a test, scraping its targets every PrometheusScrapeInterval.
type Prometheus struct {
	Addr    string // host:port of its web API
	targets int
	*process
}

// StartPrometheus runs prometheus (from PATH) with its configuration, data
// and log in dir, scraping targets. The caller stops it with Stop.
func StartPrometheus(dir string, targets ...ScrapeTarget) (*Prometheus, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, ErrNoPrometheus
	}
	dir = filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	// One scrape configuration per job; the path is per target, as the
	// __metrics_path__ label of its own static group.
	var jobs []string
	groups := map[string][]interface{}{}
	for _, t := range targets {
		if _, ok := groups[t.Job]; !ok {
			jobs = append(jobs, t.Job)
		}
		groups[t.Job] = append(groups[t.Job], map[string]interface{}{
			"targets": []string{t.Addr},
			"labels":  map[string]string{"__metrics_path__": t.Path},
		})
	}
	var scrapes []interface{}
	for _, j := range jobs {
		scrapes = append(scrapes, map[string]interface{}{"job_name": j, "static_configs": groups[j]})
	}
	conf := map[string]interface{}{
		"global": map[string]interface{}{
			"scrape_interval":     PrometheusScrapeInterval.String(),
			"scrape_timeout":      (PrometheusScrapeInterval * 8 / 10).String(),
			"evaluation_interval": PrometheusScrapeInterval.String(),
		},
		"scrape_configs": scrapes,
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		return nil, err
	}
	confFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confFile, b, 0o644); err != nil {
		return nil, err
	}
	// A port taken between FreePort and the bind: another try, on
	// another port.
	for try := 0; try < bindTries; try++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p := &Prometheus{Addr: fmt.Sprintf("127.0.0.1:%d", port), targets: len(targets)}
		p.process, err = startProcess("prometheus on "+p.Addr, dir, filepath.Join(dir, "prometheus.log"), "http://"+p.Addr+"/-/ready",
			30*time.Second, bin, "--config.file="+confFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+p.Addr, "--log.level=warn")
		if err == nil && !p.own(confFile) {
			p.Stop() // another Prometheus answered: this one could not bind
			err = fmt.Errorf("%w: another server answers on %s", errPortTaken, p.Addr)
		}
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("prometheus: a port taken %d times", bindTries)
}

// own reports whether the Prometheus answering on p.Addr runs confFile.
func (p *Prometheus) own(confFile string) bool {
	var flags map[string]string
	return p.api("/api/v1/status/flags", &flags) == nil && flags["config.file"] == confFile
}

// TargetState is one target as /api/v1/targets reports it.
type TargetState struct {
	ScrapeURL  string    `json:"scrapeUrl"`
	Health     string    `json:"health"` // "up", "down", "unknown"
	LastError  string    `json:"lastError"`
	LastScrape time.Time `json:"lastScrape"` // when the last scrape started
}

// Targets returns the active targets' states.
func (p *Prometheus) Targets() ([]TargetState, error) {
	var data struct {
		ActiveTargets []TargetState `json:"activeTargets"`
	}
	if err := p.api("/api/v1/targets?state=active", &data); err != nil {
		return nil, err
	}
	return data.ActiveTargets, nil
}

// WaitTargets waits until every target is up and was scraped after since
// (zero: at any time): a query then sees what the targets exposed at since.
func (p *Prometheus) WaitTargets(since time.Time, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ts, err := p.Targets()
		ready := err == nil && len(ts) == p.targets
		for _, t := range ts {
			if t.Health != "up" || !t.LastScrape.After(since) {
				ready = false
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("prometheus targets: %w", err)
			}
			var b strings.Builder
			for _, t := range ts {
				fmt.Fprintf(&b, "\n  %s: %s, last scrape %s %s", t.ScrapeURL, t.Health, t.LastScrape.Format("15:04:05.000"), t.LastError)
			}
			return fmt.Errorf("%d of %d targets scraped after %s and up within %v:%s",
				len(ts), p.targets, since.Format("15:04:05.000"), within, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Query runs an instant PromQL query now and returns its value: a scalar,
// or a vector of exactly one sample (aggregate with sum, max...). An empty
// vector is ErrNoSamples (append `or vector(0)` to read it as 0).
func (p *Prometheus) Query(q string) (float64, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	var value []interface{} // [unix time, "value"]
	switch data.ResultType {
	case "scalar":
		if err := json.Unmarshal(data.Result, &value); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	case "vector":
		var vec []struct {
			Value []interface{} `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
		if len(vec) == 0 {
			return 0, fmt.Errorf("%s: %w", q, ErrNoSamples)
		}
		if len(vec) > 1 {
			return 0, fmt.Errorf("%s: %d series, want one (aggregate them): %s", q, len(vec), data.Result)
		}
		value = vec[0].Value
	default:
		return 0, fmt.Errorf("%s: result type %q, want scalar or vector", q, data.ResultType)
	}
	if len(value) != 2 {
		return 0, fmt.Errorf("%s: value %v", q, value)
	}
	s, ok := value[1].(string)
	if !ok {
		return 0, fmt.Errorf("%s: value %v", q, value)
	}
	return strconv.ParseFloat(s, 64)
}

// api GETs one Prometheus API path and decodes its data field into out.
func (p *Prometheus) api(path string, out interface{}) error {
	resp, err := http.Get("http://" + p.Addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("prometheus %s: %d %q", path, resp.StatusCode, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("prometheus %s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// PromtoolCheckMetrics runs `promtool check metrics` on a text exposition
// and returns its report; err is non-nil when promtool finds a problem
// (a parse error or a lint problem) or cannot run.
func PromtoolCheckMetrics(body []byte) (report string, err error) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		return "", ErrNoPrometheus
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool check metrics: %w", err)
	}
	return string(out), nil
}
