package metrics

// The exposition: the Prometheus text format 0.0.4, every metric's HELP
// and TYPE, then its series in the order given (callers sort them).

import (
	"bufio"
	"strconv"
	"strings"
	"sync/atomic"
)

// ContentType is the exposition's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// WritePolicies writes the requests by policy, the admissions near the
// limit and the fallback's divisor by class.
func WritePolicies(w *bufio.Writer, pols []*Policy, classes []ClassRow) {
	head(w, "tollgate_requests_total", "counter", "Requests a limit applied to, by the policy that decided them, how (redis, cache: a refusal repeated without Redis, local: the fallback, unavailable: Redis unavailable) and the result.")
	for _, p := range pols {
		for how := 0; how < NDecisions; how++ {
			for res := 0; res < NResults; res++ {
				v := atomic.LoadInt64(&p.N[how*NResults+res])
				if v == 0 && !(how == ByRedis && res == Allowed) {
					continue // series appear once counted; allowed by redis always
				}
				series(w, "tollgate_requests_total", v, "class", p.Class, "policy", p.Name, "decision", decisionNames[how], "result", resultNames[res])
			}
		}
	}
	head(w, "tollgate_near_limit_total", "counter", "Requests admitted with less than 20% of the policy's burst left.")
	for _, p := range pols {
		series(w, "tollgate_near_limit_total", atomic.LoadInt64(&p.Near), "class", p.Class, "policy", p.Name)
	}
	head(w, "tollgate_response_cost_tokens_total", "counter", "Tokens charged from responses' cost headers beyond the requests' cost (responseCost).")
	for _, p := range pols {
		if atomic.LoadInt64(&p.Costed) != 0 {
			series(w, "tollgate_response_cost_tokens_total", atomic.LoadInt64(&p.CostCharged), "class", p.Class, "policy", p.Name)
		}
	}
	head(w, "tollgate_response_cost_errors_total", "counter", "Response costs not charged: invalid (a header or body value not an integer from 0 to max, or several), missing (a body that named no cost), encoded (a compressed body, not read), failed (Redis did not take the charge), dropped (the charge queue was full).")
	for _, p := range pols {
		if atomic.LoadInt64(&p.Costed) != 0 {
			series(w, "tollgate_response_cost_errors_total", atomic.LoadInt64(&p.CostInvalid), "class", p.Class, "policy", p.Name, "reason", "invalid")
			series(w, "tollgate_response_cost_errors_total", atomic.LoadInt64(&p.CostMissing), "class", p.Class, "policy", p.Name, "reason", "missing")
			series(w, "tollgate_response_cost_errors_total", atomic.LoadInt64(&p.CostEncoded), "class", p.Class, "policy", p.Name, "reason", "encoded")
			series(w, "tollgate_response_cost_errors_total", atomic.LoadInt64(&p.CostFailed), "class", p.Class, "policy", p.Name, "reason", "failed")
			series(w, "tollgate_response_cost_errors_total", atomic.LoadInt64(&p.CostDropped), "class", p.Class, "policy", p.Name, "reason", "dropped")
		}
	}
	head(w, "tollgate_concurrency_in_flight", "gauge", "Requests holding a slot of a concurrency cap on this pod now.")
	for _, p := range pols {
		if atomic.LoadInt64(&p.Capped) != 0 {
			series(w, "tollgate_concurrency_in_flight", atomic.LoadInt64(&p.InFlight), "class", p.Class, "policy", p.Name)
		}
	}
	head(w, "tollgate_concurrency_give_back_errors_total", "counter", "Concurrency slots not given back (Redis did not take the give-back, or the queue was full): held until maxDuration.")
	for _, p := range pols {
		if atomic.LoadInt64(&p.Capped) != 0 {
			series(w, "tollgate_concurrency_give_back_errors_total", atomic.LoadInt64(&p.HeldLost), "class", p.Class, "policy", p.Name)
		}
	}
	head(w, "tollgate_fallback_replicas", "gauge", "The number of pods the local fallback divides a class's limits by (heartbeat count, or replicas).")
	for _, c := range classes {
		series(w, "tollgate_fallback_replicas", c.N, "class", c.Name)
	}
}

// WriteDenyEntries writes the refusals the deny caches hold.
func WriteDenyEntries(w *bufio.Writer, n int64) {
	head(w, "tollgate_deny_cache_entries", "gauge", "Refusals from Redis still in force, repeated by the pods without a Redis call.")
	series(w, "tollgate_deny_cache_entries", n)
}

// RedisRow is one Redis name's figures, summed over the deployments that
// share it (one per database or user).
type RedisRow struct {
	Name                 string
	Counts               Redis // the counters, summed (Add)
	Open                 int64 // 1: a breaker is open
	Opened, Closed       int64 // breaker transitions
	Idle, Busy, Dialling int64 // connections
}

// Add adds m's counters to the row.
func (row *RedisRow) Add(m *Redis) {
	for i := range row.Counts.Hist {
		row.Counts.Hist[i] += atomic.LoadInt64(&m.Hist[i])
	}
	row.Counts.HistSum += atomic.LoadInt64(&m.HistSum)
	for i := range row.Counts.Errors {
		row.Counts.Errors[i] += atomic.LoadInt64(&m.Errors[i])
	}
}

// WriteRedis writes the rows' check durations, errors, breaker states and
// transitions, and connections.
func WriteRedis(w *bufio.Writer, rows []*RedisRow) {
	head(w, "tollgate_redis_check_duration_seconds", "histogram", "How long checks took, Redis round trip included; one check in "+strconv.Itoa(HistSample)+" is timed, picked at random.")
	for _, row := range rows {
		var cum int64
		for i := range histLabels {
			cum += row.Counts.Hist[i]
			series(w, "tollgate_redis_check_duration_seconds_bucket", cum, "redis", row.Name, "le", histLabels[i])
		}
		cum += row.Counts.Hist[nBounds]
		series(w, "tollgate_redis_check_duration_seconds_bucket", cum, "redis", row.Name, "le", "+Inf")
		w.WriteString("tollgate_redis_check_duration_seconds_sum{redis=" + quoteLabel(row.Name) + "} " + strconv.FormatFloat(float64(row.Counts.HistSum)/1e9, 'g', -1, 64) + "\n")
		series(w, "tollgate_redis_check_duration_seconds_count", cum, "redis", row.Name)
	}
	head(w, "tollgate_redis_errors_total", "counter", "Failed checks and failed dials, by reason.")
	for _, row := range rows {
		for i, v := range row.Counts.Errors {
			series(w, "tollgate_redis_errors_total", v, "redis", row.Name, "reason", reasonNames[i])
		}
	}
	head(w, "tollgate_breaker_open", "gauge", "1 while the circuit breaker in front of Redis is open (checks go to the fallback).")
	for _, row := range rows {
		series(w, "tollgate_breaker_open", row.Open, "redis", row.Name)
	}
	head(w, "tollgate_breaker_transitions_total", "counter", "Times the circuit breaker opened and closed.")
	for _, row := range rows {
		series(w, "tollgate_breaker_transitions_total", row.Opened, "redis", row.Name, "to", "open")
		series(w, "tollgate_breaker_transitions_total", row.Closed, "redis", row.Name, "to", "closed")
	}
	head(w, "tollgate_redis_connections", "gauge", "Pooled connections to Redis: idle, busy (checks in flight) or dialling.")
	for _, row := range rows {
		series(w, "tollgate_redis_connections", row.Idle, "redis", row.Name, "state", "idle")
		series(w, "tollgate_redis_connections", row.Busy, "redis", row.Name, "state", "busy")
		series(w, "tollgate_redis_connections", row.Dialling, "redis", row.Name, "state", "dialling")
	}
}

// RegionRow is one region's exchange, as this pod last ran it.
type RegionRow struct {
	Name        string
	Leading     int64 // 1: this pod runs the exchange
	OK, Failed  int64 // exchanges run
	Tracked     int64 // keys whose share follows demand
	ReportBytes int64 // the last report written
	Peers       []string
	PeerUp      []int64 // by peer: 1 when the last exchange read its report
}

// WriteRegions writes the region exchanges' figures.
func WriteRegions(w *bufio.Writer, rows []RegionRow) {
	head(w, "tollgate_region_leader", "gauge", "1 on the pod that runs its region's exchange this interval.")
	for _, r := range rows {
		series(w, "tollgate_region_leader", r.Leading, "region", r.Name)
	}
	head(w, "tollgate_region_exchanges_total", "counter", "Exchanges this pod ran as its region's leader, by result.")
	for _, r := range rows {
		series(w, "tollgate_region_exchanges_total", r.OK, "region", r.Name, "result", "ok")
		series(w, "tollgate_region_exchanges_total", r.Failed, "region", r.Name, "result", "failed")
	}
	head(w, "tollgate_region_tracked_keys", "gauge", "Keys whose share follows demand, after this pod's last exchange.")
	for _, r := range rows {
		series(w, "tollgate_region_tracked_keys", r.Tracked, "region", r.Name)
	}
	head(w, "tollgate_region_report_bytes", "gauge", "Bytes of the last report this pod wrote for its region's peers.")
	for _, r := range rows {
		series(w, "tollgate_region_report_bytes", r.ReportBytes, "region", r.Name)
	}
	head(w, "tollgate_region_peer_up", "gauge", "1 when this pod's last exchange read the peer's report.")
	for _, r := range rows {
		for i, p := range r.Peers {
			series(w, "tollgate_region_peer_up", r.PeerUp[i], "region", r.Name, "peer", p)
		}
	}
}

func head(w *bufio.Writer, name, typ, help string) {
	w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// series writes one sample; labels are name, value pairs.
func series(w *bufio.Writer, name string, v int64, labels ...string) {
	w.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			w.WriteByte('{')
		} else {
			w.WriteByte(',')
		}
		w.WriteString(labels[i] + "=" + quoteLabel(labels[i+1]))
	}
	if len(labels) > 0 {
		w.WriteByte('}')
	}
	w.WriteString(" " + strconv.FormatInt(v, 10) + "\n")
}

// quoteLabel quotes a label value as the exposition format escapes it.
func quoteLabel(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}
