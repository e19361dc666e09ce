package e2e

// The operator's kit as the tests read it: the expressions of
// deploy/prometheus/tollgate-rules.yml and deploy/grafana's dashboard, and
// a harness Prometheus that loads the rules and answers with whole
// vectors, its rules' health and its alerts.

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// RuleExpr is one rule of a Prometheus rule file.
type RuleExpr struct {
	Group string
	Name  string // the recorded series or the alert
	Alert bool
	Expr  string
}

// ReadRuleFile returns the rules of a Prometheus rule file, in order.
func ReadRuleFile(path string) ([]RuleExpr, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []RuleExpr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Record
			if r.Alert != "" {
				name = r.Alert
			}
			out = append(out, RuleExpr{Group: g.Name, Name: name, Alert: r.Alert != "", Expr: strings.TrimSpace(r.Expr)})
		}
	}
	return out, nil
}

// PanelExpr is one query of a Grafana dashboard: a panel's target, or a
// query variable's query.
type PanelExpr struct {
	Where string // "panel <title> <refId>" or "variable <name>"
	Expr  string // as written, template variables included
}

// Dashboard is what the tests read of a Grafana JSON model.
type Dashboard struct {
	Variables map[string]string // name: type
	Exprs     []PanelExpr
}

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// ReadDashboard reads a Grafana dashboard's JSON model: its variables and
// every query, rows' nested panels included. A label_values(m, l) variable
// query is read as the PromQL that lists the same values, count by (l) (m).
func ReadDashboard(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var m struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d := &Dashboard{Variables: map[string]string{}}
	for _, v := range m.Templating.List {
		d.Variables[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			return nil, fmt.Errorf("%s: variable %s: %w", path, v.Name, err)
		}
		lv := labelValues.FindStringSubmatch(q.Query)
		if lv == nil {
			return nil, fmt.Errorf("%s: variable %s: query %q, want label_values(selector, label)", path, v.Name, q.Query)
		}
		d.Exprs = append(d.Exprs, PanelExpr{"variable " + v.Name, "count by (" + lv[2] + ") (" + lv[1] + ")"})
	}
	var walk func(raws []json.RawMessage) error
	walk = func(raws []json.RawMessage) error {
		for _, raw := range raws {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for _, tg := range p.Targets {
				d.Exprs = append(d.Exprs, PanelExpr{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), tg.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(m.Panels); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// grafanaVar is a template variable in a query: $name, ${name} or
// ${name:format}.
var grafanaVar = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)`)

// ExpandGrafana replaces the template variables of expr with values; a
// variable without a value is an error.
func ExpandGrafana(expr string, values map[string]string) (string, error) {
	var missing []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(s string) string {
		m := grafanaVar.FindStringSubmatch(s)
		name := m[1] + m[2]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return s
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%s: no value for %v", expr, missing)
	}
	return out, nil
}

// Measures splits an alert's expression into what it compares: its
// operands of and/or/unless at the top level, each without a trailing
// comparison with a threshold (`x > 0.1` is x). Those return data
// whenever their series exist, whether the alert's condition holds or not.
func Measures(expr string) []string {
	var out []string
	for _, operand := range splitTop(expr, []string{"and", "or", "unless"}) {
		left := splitTop(operand, []string{">=", "<=", "==", "!=", ">", "<"})[0]
		out = append(out, strings.TrimSpace(left))
	}
	return out
}

// splitTop splits expr at the operators ops found outside brackets and
// quotes (words only between non-word characters). The vector matching
// after an operator (on/ignoring, group_left/group_right, bool) goes with
// the operand after it.
func splitTop(expr string, ops []string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	isWord := func(c byte) bool {
		return c == '_' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		case c == '"' || c == '\'' || c == '`':
			quote = c
			continue
		case c == '(' || c == '{' || c == '[':
			depth++
			continue
		case c == ')' || c == '}' || c == ']':
			depth--
			continue
		}
		if depth != 0 {
			continue
		}
		for _, op := range ops {
			if !strings.HasPrefix(expr[i:], op) {
				continue
			}
			end := i + len(op)
			if isWord(op[0]) && (i > 0 && isWord(expr[i-1]) || end < len(expr) && isWord(expr[end])) {
				continue
			}
			parts = append(parts, expr[start:i])
			start = end
			i = end - 1
			break
		}
	}
	return append(parts, expr[start:])
}

// tollgateSelector is a vector selector of a Tollgate series or of a
// series recorded from them: the name, and its matchers if any.
var tollgateSelector = regexp.MustCompile(`[a-zA-Z_:]*tollgate_[a-zA-Z0-9_:]*(?:\{[^}]*\})?`)

// Selectors returns the selectors of Tollgate series in expr, each once:
// each must match series, or a part of expr is silently empty (a typo in
// a name or a label value hidden by an `or`, say).
func Selectors(expr string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range tollgateSelector.FindAllString(expr, -1) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Sample is one sample of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// QueryVector runs an instant query and returns every sample (none: an
// empty vector); a scalar is one sample without labels.
func (p *Prometheus) QueryVector(q string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	parse := func(v []interface{}) (float64, error) {
		if len(v) != 2 {
			return 0, fmt.Errorf("%s: value %v", q, v)
		}
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch data.ResultType {
	case "scalar":
		var v []interface{}
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		f, err := parse(v)
		return []Sample{{Value: f}}, err
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  []interface{}     `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]Sample, 0, len(vec))
		for _, s := range vec {
			f, err := parse(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Labels: s.Metric, Value: f})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: result type %q, want vector or scalar", q, data.ResultType)
}

// Finite returns the samples whose value is a number (not NaN, not ±Inf):
// a ratio over no traffic or a quantile over no observation is NaN, and a
// panel shows nothing of it.
func Finite(ss []Sample) []Sample {
	var out []Sample
	for _, s := range ss {
		if !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0) {
			out = append(out, s)
		}
	}
	return out
}

// RuleState is one loaded rule as /api/v1/rules reports it.
type RuleState struct {
	Group     string
	Name      string `json:"name"`
	Type      string `json:"type"`   // "recording" or "alerting"
	Health    string `json:"health"` // "ok", "err", "unknown" (not evaluated yet)
	LastError string `json:"lastError"`
	State     string `json:"state"` // an alert's: "inactive", "pending", "firing"
}

// Rules returns the loaded rules.
func (p *Prometheus) Rules() ([]RuleState, error) {
	var data struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []RuleState `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", &data); err != nil {
		return nil, err
	}
	var out []RuleState
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			out = append(out, r)
		}
	}
	return out, nil
}

// LoadRules adds rule files to the running Prometheus's configuration and
// has it reload (SIGHUP), then waits until it lists want rules, each
// evaluated once.
func (p *Prometheus) LoadRules(want int, files ...string) error {
	var flags map[string]string
	if err := p.api("/api/v1/status/flags", &flags); err != nil {
		return err
	}
	confFile := flags["config.file"]
	b, err := os.ReadFile(confFile)
	if err != nil {
		return err
	}
	var conf map[string]interface{}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		return err
	}
	var abs []string
	for _, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			return err
		}
		abs = append(abs, a)
	}
	conf["rule_files"] = abs
	if b, err = yaml.Marshal(conf); err != nil {
		return err
	}
	if err := os.WriteFile(confFile, b, 0o644); err != nil {
		return err
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		rs, err := p.Rules()
		evaluated := 0
		for _, r := range rs {
			if r.Health != "unknown" {
				evaluated++
			}
		}
		if err == nil && len(rs) == want && evaluated == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rules %v: %d listed, %d evaluated within 15s, want %d (%v)\n%s", files, len(rs), evaluated, want, err, p.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ActiveAlerts returns the state ("pending" or "firing") of every active
// alert, by name, the states of its label sets joined.
func (p *Prometheus) ActiveAlerts() (map[string]string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	states := map[string][]string{}
	for _, a := range data.Alerts {
		states[a.Labels["alertname"]] = append(states[a.Labels["alertname"]], a.State)
	}
	out := map[string]string{}
	for name, s := range states {
		sort.Strings(s)
		out[name] = strings.Join(s, ",")
	}
	return out, nil
}
