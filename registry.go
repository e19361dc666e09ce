package tollgate

// Process-wide resources. Traefik calls New once per router and again on
// every configuration reload, and never closes what it built. So nothing is
// owned by a handler: Redis connection pools, their circuit breakers and the
// fallback buckets live here, shared by every handler with the same
// settings. This is the one piece of package-level state, and it is bounded:
//   - backends: one per distinct Redis connection (address, credentials,
//     database, TLS); timeouts, pool size and breaker settings are the
//     caller's, so a reload that changes them reuses the pool. A backend no
//     handler has used for backendIdle has its connections closed at the
//     next New and is forgotten (a handler still holding it re-dials).
//   - local buckets: a bounded store per class (localStores).
//   - metrics: counters per class and policy, bounded and left out of the
//     output when idle (internal/metrics).
//   - region exchanges: at most maxExchangers, by configuration (past it,
//     the one bound least recently stops; internal/regions).
// No goroutine runs for ever: reclaiming happens inside New, and every
// goroutine the plugin starts ends by itself: dials (redisClient.dialAsync;
// one at a time per node, each within its dial budget), heartbeat batches
// (backend.beatLoop; one per Redis, until nothing is due), topology
// refreshes (backend.refreshNow; one per deployment, one round of
// queries), the breaker's prober (backend.probeLoop; one per Redis while
// the breaker is open, ending when it closes or after watchIdle without
// checks), the sentinel watcher (backend.watchSentinels; ends after
// watchIdle without checks), the region exchange (exchanger.loop; one
// per region configuration, ending once a reload has dropped it) and the
// leases' give-backs (leaseTable.giveBackLoop; one per Redis while leases
// are out, ending when none is).

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

const backendIdle = 10 * time.Minute

// registry holds the shared resources.
type registry struct {
	now func() int64 // monotonic (internal/clock)

	mu       sync.Mutex // guards backends
	backends map[string]*backend
	locals   *localStores
	metrics  *metrics.Registry            // what a serveMetrics middleware serves (internal/metrics)
	retired  map[string]*metrics.RedisRow // counters of forgotten backends, by Redis name (exposition.go)

	claimsMu sync.Mutex
	claims   map[string]classClaim // classes derived from middleware names, by class

	regionsMu sync.Mutex
	regions   map[string]*regions.Exchanger // region exchanges, by configuration (exchangerFor)
	lastNew   int64                         // monotonic ns of the latest New, of any middleware

	admins       admins // operators' overrides and resets, by class (admin.go)
	adminChanges int64  // changes made through serveAdmin middlewares (atomic)
}

// classClaim is the middleware name a derived class was last built for.
type classClaim struct {
	name string
	at   int64 // monotonic ns
}

// classClaimWindow is how long a derived class stays claimed by the name
// that last built it: Traefik builds every middleware of a configuration
// at once, so two names that collide meet within it, while a name renamed
// by a reload no longer holds its class against the new one after it.
const classClaimWindow = 10 * time.Second

// shared is the process's registry.
var shared = newRegistry()

func newRegistry() *registry {
	return &registry{now: clock.Mono, backends: make(map[string]*backend), locals: newLocalStores(), metrics: metrics.NewRegistry(),
		claims: make(map[string]classClaim), retired: make(map[string]*metrics.RedisRow), regions: make(map[string]*regions.Exchanger)}
}

// claimClass records that the middleware name derived class (no class
// set): two different names whose sanitised forms are one class would
// share buckets without anyone choosing to, so the later one is refused,
// with an error naming both.
func (r *registry) claimClass(class, name string) error {
	now := r.now()
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	if c, ok := r.claims[class]; ok && c.name != name && now-c.at < int64(classClaimWindow) {
		return fmt.Errorf("class: the middlewares %q and %q both become class %q (a class holds at most 64 printable characters, without spaces, quotes, backslashes or braces): set class on one of them", c.name, name, class)
	}
	if len(r.claims) >= maxClaims {
		for k, c := range r.claims {
			if now-c.at >= int64(classClaimWindow) {
				delete(r.claims, k)
			}
		}
	}
	r.claims[class] = classClaim{name: name, at: now}
	return nil
}

// maxClaims bounds the claims kept past their window.
const maxClaims = 1024

// backend returns the backend for set's connection, creating it on first
// use, and reclaims backends left idle by reloads. The latest poolSize wins.
func (r *registry) backend(set config.RedisSettings) (*backend, error) {
	key := set.ConnKey()
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.backends {
		if k != key && now-b.used() > int64(backendIdle) {
			b.rc.CloseIdle()
			r.retire(b)
			delete(r.backends, k)
		}
	}
	if b, ok := r.backends[key]; ok {
		atomic.StoreInt64(&b.lastUsed, now)
		b.rc.Touch()
		if set.PoolSize == 0 {
			return b, nil // a peer region's Redis, for the exchange only: the checks' settings stay
		}
		b.rc.SetPoolSize(set.PoolSize)
		b.setMu.Lock()
		b.set = set
		b.setMu.Unlock()
		return b, nil
	}
	b := &backend{
		base:     set,
		breaker:  &breaker{},
		now:      clock.Mono,
		lastUsed: now,
		set:      set,
	}
	if err := connect(b, set); err != nil {
		return nil, err
	}
	r.backends[key] = b
	return b, nil
}

// exchangerFor returns the exchange of rs (peers: its peers' Redis) on
// own, creating it on first use, and binds it now: its loop is started
// unless it runs.
func (r *registry) exchangerFor(rs *regions.Settings, peers []config.RedisSettings, own *backend) (*regions.Exchanger, error) {
	now := r.now()
	r.regionsMu.Lock()
	defer r.regionsMu.Unlock()
	x, ok := r.regions[rs.Key]
	if !ok {
		var clients []*redis.Client
		for _, p := range peers {
			b, err := r.backend(p)
			if err != nil {
				return nil, err
			}
			clients = append(clients, b.rc)
		}
		x = regions.NewExchanger(rs, own.rc, clients, newInstanceID(), func() int64 { return atomic.LoadInt64(&r.lastNew) })
		// A reload that changed this region's settings replaces its
		// exchange: the old one's loop ends (one exchange per region and
		// Redis in a process; of two middlewares that disagree, the
		// latest built wins). Past maxExchangers, the least recently
		// bound goes too.
		var oldest *regions.Exchanger
		for k, old := range r.regions {
			if old.Own() == own.rc && old.Settings().Name == rs.Name {
				old.Drop()
				delete(r.regions, k)
			} else if oldest == nil || old.Bound() < oldest.Bound() {
				oldest = old
			}
		}
		if len(r.regions) >= maxExchangers {
			oldest.Drop()
			delete(r.regions, oldest.Settings().Key)
		}
		r.regions[rs.Key] = x
	}
	x.Bind(rs, now)
	return x, nil
}

// maxExchangers bounds the region exchanges a process runs.
const maxExchangers = 16

// addCounters adds b's counters to row.
func addCounters(row *metrics.RedisRow, b *backend) {
	row.Add(&b.metrics)
	row.Opened += atomic.LoadInt64(&b.breaker.opened)
	row.Closed += atomic.LoadInt64(&b.breaker.closed)
}

// retire keeps the counters of b, which the registry forgets, under its
// name, so that the name's totals never go down. Requires r.mu held.
func (r *registry) retire(b *backend) {
	name := b.latest().Name
	row := r.retired[name]
	if row == nil {
		if len(r.retired) >= metrics.MaxPolicies {
			return
		}
		row = &metrics.RedisRow{Name: name}
		r.retired[name] = row
	}
	addCounters(row, b)
}

// The exposition: what a serveMetrics middleware answers, the process's
// metrics gathered from the registry (policies and classes, deny caches,
// backends, region exchanges) and written by internal/metrics in the
// Prometheus text format, every metric's HELP and TYPE, then its series in
// a stable order.

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
	fmt.Fprintf(w, "# HELP tollgate_admin_changes_total Changes made through serveAdmin middlewares (resets, overrides set and removed).\n# TYPE tollgate_admin_changes_total counter\ntollgate_admin_changes_total %d\n", atomic.LoadInt64(&r.adminChanges))
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
