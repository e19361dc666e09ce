package tollgate

// The exposition: what a serveMetrics middleware answers, the process's
// metrics (metrics.go) in the Prometheus text format 0.0.4, every metric's
// HELP and TYPE, then its series in a stable order.

import (
	"bufio"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// metricsHandler answers every request with the process's metrics
// (serveMetrics): it applies no limit and calls no next handler. classes,
// when not nil, restricts them to those classes' series
// (Config.MetricsClasses); read only.
type metricsHandler struct {
	classes map[string]bool
}

func (h *metricsHandler) ServeHTTP(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w := bufio.NewWriter(rw)
	shared.writeMetrics(w, h.classes)
	_ = w.Flush()
}

// writeMetrics writes the exposition: every metric's HELP and TYPE, then
// its series in a stable order. only, when not nil, keeps the series of
// those classes alone: the others, and the series of no class (the deny
// caches', Redis's, the regions'), are left out.
func (r *registry) writeMetrics(w *bufio.Writer, only map[string]bool) {
	now := r.now()
	m := r.metrics
	m.mu.Lock()
	var pols []*policyMetrics
	for _, p := range m.policies {
		if (only == nil || only[p.class]) && p.live(now) {
			pols = append(pols, p)
		}
	}
	var classes []classRow
	for name, c := range m.classes {
		if (only == nil || only[name]) && (now-c.seen < int64(metricsIdle) || classCounts(pols, name)) {
			classes = append(classes, classRow{name, replicasSeen(c.hb, c.replicas, now)})
		}
	}
	m.mu.Unlock()
	sort.Slice(pols, func(i, j int) bool {
		if pols[i].class != pols[j].class {
			return pols[i].class < pols[j].class
		}
		return pols[i].policy < pols[j].policy
	})
	sort.Slice(classes, func(i, j int) bool { return classes[i].name < classes[j].name })

	head(w, "tollgate_requests_total", "counter", "Requests a limit applied to, by the policy that decided them, how (redis, cache: a refusal repeated without Redis, local: the fallback, unavailable: Redis unavailable) and the result.")
	for _, p := range pols {
		for how := 0; how < len(decisionNames); how++ {
			for res := 0; res < nResults; res++ {
				v := atomic.LoadInt64(&p.n[how*nResults+res])
				if v == 0 && !(how == decidedRedis && res == resultAllowed) {
					continue // series appear once counted; allowed by redis always
				}
				series(w, "tollgate_requests_total", v, "class", p.class, "policy", p.policy, "decision", decisionNames[how], "result", resultNames[res])
			}
		}
	}
	head(w, "tollgate_near_limit_total", "counter", "Requests admitted with less than 20% of the policy's burst left.")
	for _, p := range pols {
		series(w, "tollgate_near_limit_total", atomic.LoadInt64(&p.near), "class", p.class, "policy", p.policy)
	}
	head(w, "tollgate_fallback_replicas", "gauge", "The number of pods the local fallback divides a class's limits by (heartbeat count, or replicas).")
	for _, c := range classes {
		series(w, "tollgate_fallback_replicas", c.n, "class", c.name)
	}
	if only != nil {
		return
	}
	head(w, "tollgate_deny_cache_entries", "gauge", "Refusals from Redis still in force, repeated by the pods without a Redis call.")
	series(w, "tollgate_deny_cache_entries", m.denyEntries())
	r.writeBackendMetrics(w, now)
	r.writeRegionMetrics(w)
}

// writeRegionMetrics writes the region exchanges' metrics: one set per
// region name, from the exchange bound most recently under it.
func (r *registry) writeRegionMetrics(w *bufio.Writer) {
	r.regionsMu.Lock()
	byName := map[string]*exchanger{}
	for _, x := range r.regions {
		if x.stale() {
			continue
		}
		name := x.settings().name
		if o, ok := byName[name]; !ok || atomic.LoadInt64(&o.bound) < atomic.LoadInt64(&x.bound) {
			byName[name] = x
		}
	}
	r.regionsMu.Unlock()
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	head(w, "tollgate_region_leader", "gauge", "1 on the pod that runs its region's exchange this interval.")
	for _, n := range names {
		series(w, "tollgate_region_leader", int64(atomic.LoadInt32(&byName[n].leading)), "region", n)
	}
	head(w, "tollgate_region_exchanges_total", "counter", "Exchanges this pod ran as its region's leader, by result.")
	for _, n := range names {
		x := byName[n]
		series(w, "tollgate_region_exchanges_total", atomic.LoadInt64(&x.exchangesOK), "region", n, "result", "ok")
		series(w, "tollgate_region_exchanges_total", atomic.LoadInt64(&x.exchangesKO), "region", n, "result", "failed")
	}
	head(w, "tollgate_region_tracked_keys", "gauge", "Keys whose share follows demand, after this pod's last exchange.")
	for _, n := range names {
		series(w, "tollgate_region_tracked_keys", atomic.LoadInt64(&byName[n].trackedN), "region", n)
	}
	head(w, "tollgate_region_report_bytes", "gauge", "Bytes of the last report this pod wrote for its region's peers.")
	for _, n := range names {
		series(w, "tollgate_region_report_bytes", atomic.LoadInt64(&byName[n].reportBytes), "region", n)
	}
	head(w, "tollgate_region_peer_up", "gauge", "1 when this pod's last exchange read the peer's report.")
	for _, n := range names {
		x := byName[n]
		for i, p := range x.settings().peers {
			series(w, "tollgate_region_peer_up", int64(atomic.LoadInt32(&x.peerUp[i])), "region", n, "peer", p.name)
		}
	}
}

// classRow is a class's fallback divisor, as served.
type classRow struct {
	name string
	n    int64
}

// classCounts reports whether a live policy of pols belongs to class.
func classCounts(pols []*policyMetrics, class string) bool {
	for _, p := range pols {
		if p.class == class {
			return true
		}
	}
	return false
}

// backendRow is one Redis deployment's figures, summed over the backends
// that share its name (one per database or user).
type backendRow struct {
	name                 string
	hist                 [nBounds + 1]int64
	histSum              int64
	errors               [nReasons]int64
	open                 int64
	opened, closed       int64
	idle, busy, dialling int64
}

// gaugeIdle: a backend without a check for this long (one a reload
// replaced, say) no longer shows in the gauges (breaker, connections).
const gaugeIdle = time.Minute

// addCounters adds b's counters to row.
func addCounters(row *backendRow, b *backend) {
	for i := range row.hist {
		row.hist[i] += atomic.LoadInt64(&b.metrics.hist[i])
	}
	row.histSum += atomic.LoadInt64(&b.metrics.histSum)
	for i := range row.errors {
		row.errors[i] += atomic.LoadInt64(&b.metrics.errors[i])
	}
	row.opened += atomic.LoadInt64(&b.breaker.opened)
	row.closed += atomic.LoadInt64(&b.breaker.closed)
}

// retire keeps the counters of b, which the registry forgets, under its
// name, so that the name's totals never go down. Requires r.mu held.
func (r *registry) retire(b *backend) {
	name := b.latest().name
	row := r.retired[name]
	if row == nil {
		if len(r.retired) >= maxPolicyMetrics {
			return
		}
		row = &backendRow{name: name}
		r.retired[name] = row
	}
	addCounters(row, b)
}

// writeBackendMetrics writes the figures of each Redis name: the counters
// of every backend that had it (those forgotten included: retire), the
// gauges of those with a check within gaugeIdle.
func (r *registry) writeBackendMetrics(w *bufio.Writer, now int64) {
	rows := map[string]*backendRow{}
	var names []string
	rowFor := func(name string) *backendRow {
		row := rows[name]
		if row == nil {
			row = &backendRow{name: name}
			rows[name] = row
			names = append(names, name)
		}
		return row
	}
	r.mu.Lock()
	for name, old := range r.retired {
		row := rowFor(name)
		*row = *old
	}
	for _, b := range r.backends {
		row := rowFor(b.latest().name)
		addCounters(row, b)
		if now-atomic.LoadInt64(&b.lastUsed) > int64(gaugeIdle) {
			continue
		}
		if b.breaker.isOpen() {
			row.open = 1
		}
		for _, c := range b.rc.Pools() {
			idle, busy, dialling := c.ConnStates()
			row.idle += idle
			row.busy += busy
			row.dialling += dialling
		}
	}
	r.mu.Unlock()
	sort.Strings(names)

	head(w, "tollgate_redis_check_duration_seconds", "histogram", "How long checks took, Redis round trip included; one check in "+strconv.Itoa(histSample)+" is timed, picked at random.")
	for _, n := range names {
		row := rows[n]
		var cum int64
		for i := range histLabels {
			cum += row.hist[i]
			series(w, "tollgate_redis_check_duration_seconds_bucket", cum, "redis", n, "le", histLabels[i])
		}
		cum += row.hist[nBounds]
		series(w, "tollgate_redis_check_duration_seconds_bucket", cum, "redis", n, "le", "+Inf")
		w.WriteString("tollgate_redis_check_duration_seconds_sum{redis=" + quoteLabel(n) + "} " + strconv.FormatFloat(float64(row.histSum)/1e9, 'g', -1, 64) + "\n")
		series(w, "tollgate_redis_check_duration_seconds_count", cum, "redis", n)
	}
	head(w, "tollgate_redis_errors_total", "counter", "Failed checks and failed dials, by reason.")
	for _, n := range names {
		for i, v := range rows[n].errors {
			series(w, "tollgate_redis_errors_total", v, "redis", n, "reason", reasonNames[i])
		}
	}
	head(w, "tollgate_breaker_open", "gauge", "1 while the circuit breaker in front of Redis is open (checks go to the fallback).")
	for _, n := range names {
		series(w, "tollgate_breaker_open", rows[n].open, "redis", n)
	}
	head(w, "tollgate_breaker_transitions_total", "counter", "Times the circuit breaker opened and closed.")
	for _, n := range names {
		series(w, "tollgate_breaker_transitions_total", rows[n].opened, "redis", n, "to", "open")
		series(w, "tollgate_breaker_transitions_total", rows[n].closed, "redis", n, "to", "closed")
	}
	head(w, "tollgate_redis_connections", "gauge", "Pooled connections to Redis: idle, busy (checks in flight) or dialling.")
	for _, n := range names {
		series(w, "tollgate_redis_connections", rows[n].idle, "redis", n, "state", "idle")
		series(w, "tollgate_redis_connections", rows[n].busy, "redis", n, "state", "busy")
		series(w, "tollgate_redis_connections", rows[n].dialling, "redis", n, "state", "dialling")
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
