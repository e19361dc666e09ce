package e2e

import (
	"regexp"
	"sort"
	"strings"
	"testing"
)

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
