package tollgate

// The exposition: what a serveMetrics middleware answers, the process's
// metrics gathered from the registry (policies and classes, deny caches,
// backends, region exchanges) and written by internal/metrics in the
// Prometheus text format, every metric's HELP and TYPE, then its series in
// a stable order.

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// metricsHandler answers every request with the process's metrics
// (serveMetrics): it applies no limit and calls no next handler. classes,
// when not nil, restricts them to those classes' series
// (Config.MetricsClasses); read only.
type metricsHandler struct {
	classes map[string]bool
}

func (h *metricsHandler) ServeHTTP(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", metrics.ContentType)
	w := bufio.NewWriter(rw)
	shared.writeMetrics(w, h.classes)
	_ = w.Flush()
}

// writeMetrics writes the exposition. only, when not nil, keeps the
// series of those classes alone: the others, and the series of no class
// (the deny caches', Redis's, the regions'), are left out.
func (r *registry) writeMetrics(w *bufio.Writer, only map[string]bool) {
	now := r.now()
	pols, classes := r.metrics.Live(only, now)
	metrics.WritePolicies(w, pols, classes)
	if only != nil {
		return
	}
	metrics.WriteDenyEntries(w, deniesWatched.entries())
	metrics.WriteRedis(w, r.redisRows(now))
	metrics.WriteRegions(w, r.regionRows())
}

// regionRows are the region exchanges' figures: one row per region name,
// from the exchange bound most recently under it.
func (r *registry) regionRows() []metrics.RegionRow {
	r.regionsMu.Lock()
	byName := map[string]*regions.Exchanger{}
	for _, x := range r.regions {
		if x.Stale() {
			continue
		}
		name := x.Settings().Name
		if o, ok := byName[name]; !ok || o.Bound() < x.Bound() {
			byName[name] = x
		}
	}
	r.regionsMu.Unlock()
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	rows := make([]metrics.RegionRow, 0, len(names))
	for _, n := range names {
		x := byName[n]
		st := x.Stats()
		row := metrics.RegionRow{Name: n, Leading: oneIf(st.Leading), OK: st.OK, Failed: st.Failed, Tracked: st.Tracked, ReportBytes: st.ReportBytes}
		for i, p := range x.Settings().Peers {
			row.Peers = append(row.Peers, p.Name)
			row.PeerUp = append(row.PeerUp, oneIf(st.PeerUp[i]))
		}
		rows = append(rows, row)
	}
	return rows
}

// oneIf is 1 for true.
func oneIf(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// gaugeIdle: a backend without a check for this long (one a reload
// replaced, say) no longer shows in the gauges (breaker, connections).
const gaugeIdle = time.Minute

// redisRows are the figures of each Redis name, sorted: the counters of
// every backend that had it (those forgotten included: retire), the gauges
// of those with a check within gaugeIdle.
func (r *registry) redisRows(now int64) []*metrics.RedisRow {
	rows := map[string]*metrics.RedisRow{}
	var names []string
	rowFor := func(name string) *metrics.RedisRow {
		row := rows[name]
		if row == nil {
			row = &metrics.RedisRow{Name: name}
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
		row := rowFor(b.latest().Name)
		addCounters(row, b)
		if now-b.used() > int64(gaugeIdle) {
			continue
		}
		if b.breaker.isOpen() {
			row.Open = 1
		}
		for _, c := range b.rc.Pools() {
			idle, busy, dialling := c.ConnStates()
			row.Idle += idle
			row.Busy += busy
			row.Dialling += dialling
		}
	}
	r.mu.Unlock()
	sort.Strings(names)
	out := make([]*metrics.RedisRow, len(names))
	for i, n := range names {
		out[i] = rows[n]
	}
	return out
}

// maxMetricsClasses bounds MetricsClasses.
const maxMetricsClasses = 64

// metricsEndpoint compiles a serveMetrics middleware: its classes
// (MetricsClasses; nil: every class). It refuses one that also configures
// a limit: it would apply none.
func metricsEndpoint(cfg *config.Config) (*metricsHandler, error) {
	if err := config.CheckMetricsOnly(cfg); err != nil {
		return nil, err
	}
	h := &metricsHandler{}
	if len(cfg.MetricsClasses) > maxMetricsClasses {
		return nil, fmt.Errorf("metricsClasses: %d classes, at most %d are allowed", len(cfg.MetricsClasses), maxMetricsClasses)
	}
	for i, c := range cfg.MetricsClasses {
		c = strings.TrimSpace(c)
		if err := config.CheckName(fmt.Sprintf("metricsClasses[%d]", i), c); err != nil {
			return nil, err
		}
		if h.classes == nil {
			h.classes = make(map[string]bool)
		}
		h.classes[c] = true
	}
	return h, nil
}
