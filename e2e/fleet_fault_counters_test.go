package e2e

// What each replica's Tollgate counted around a drill's burst, read from
// its metrics router (withMetricsRouter): failed checks and dials by
// reason, and breaker transitions. A drill whose burst fell back says why:
// e.g. three timeouts and the breaker opened, or dials that failed.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// drillCounters are one replica's counters, by series ("timeout",
// "breaker open"); nil when its metrics could not be read.
type drillCounters map[string]float64

// drillMetrics is the router withMetricsRouter adds, which every drill's
// fleet serves.
const drillMetrics = "tollgate-metrics@file"

// counters reads every replica's counters.
func (fe *fleetEnv) counters() []drillCounters {
	out := make([]drillCounters, len(fe.fleet.Replicas))
	for i, tr := range fe.fleet.Replicas {
		status, _, body, err := getBody("http://" + tr.Web + metricsPath)
		if err != nil || status != 200 {
			continue
		}
		c := drillCounters{}
		for _, l := range strings.Split(string(body), "\n") {
			var label string
			switch {
			case strings.HasPrefix(l, "tollgate_redis_errors_total{"):
				label = labelValue(l, "reason")
			case strings.HasPrefix(l, "tollgate_breaker_transitions_total{"):
				label = "breaker " + labelValue(l, "to")
			default:
				continue
			}
			sp := strings.LastIndex(l, " ")
			if v, err := strconv.ParseFloat(l[sp+1:], 64); err == nil && label != "" {
				c[label] += v
			}
		}
		out[i] = c
	}
	return out
}

// labelValue returns the value of label name in a series line, "" when
// it has none.
func labelValue(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// countersGrown lists, for each replica, the counters that grew from
// before to after: "replica 0: timeout +3, breaker open +1; replica 1:
// none".
func countersGrown(before, after []drillCounters) string {
	var parts []string
	for i := range after {
		if i >= len(before) || before[i] == nil || after[i] == nil {
			parts = append(parts, fmt.Sprintf("replica %d: metrics not read", i))
			continue
		}
		var grown []string
		for name, v := range after[i] {
			if d := v - before[i][name]; d != 0 {
				grown = append(grown, fmt.Sprintf("%s %+g", name, d))
			}
		}
		sort.Strings(grown)
		if len(grown) == 0 {
			grown = []string{"none"}
		}
		parts = append(parts, fmt.Sprintf("replica %d: %s", i, strings.Join(grown, ", ")))
	}
	return strings.Join(parts, "; ")
}
