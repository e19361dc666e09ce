package tollgate

// Metrics: the process's Tollgate counters in the Prometheus text format,
// served by a middleware configured with serveMetrics (Traefik gives
// plugins no metrics API). What is counted, and where:
//   - per class and policy (policyMetrics, in the registry, so a reload
//     that keeps a class keeps its totals): requests by decision and
//     result, counted once per request a limit applies to; admissions near
//     the limit.
//   - per Redis deployment (backendMetrics, on the backend): the duration
//     of checks (one in histSample, picked by the clock's low bits, so the
//     hot path pays a clock read on those only), errors by reason, breaker
//     transitions; the breaker's state and the pool's connections are read
//     when served.
//   - per class: the fallback's divisor; the deny caches' entries.
//
// Counting is one atomic add per request on the hot path (ServeHTTP), with
// nothing to look up: each policy holds its own counters. Label values come
// from the configuration only (classes, policy names, Redis names), never
// from a request.
//
// Series lifetime: a class's and a policy's series are served while New
// compiled them or they counted a request within metricsIdle; then they
// are left out (a class removed by a reload goes within metricsIdle) and
// come back, with their totals, if they count again. The registry keeps
// at most maxPolicyMetrics policies; past that, series left out are
// forgotten (an instance still serving one counts where no scrape looks
// until the class's next New). The exposition: exposition.go.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// Results of a request (the result label), indexing policyMetrics.n with
// the decision (decided*): n[how*nResults+result].
const (
	resultAllowed = iota
	resultLimited
	resultUnavailable
	resultShadowLimited
	nResults
)

var (
	resultNames   = [...]string{"allowed", "limited", "unavailable", "shadow_limited"}
	decisionNames = [...]string{"redis", "local", "unavailable", "cache"}
)

const (
	metricsIdle      = 10 * time.Minute
	maxPolicyMetrics = 4096
	// histSample: one check in histSample is timed (a power of two).
	histSample = 64
	nBounds    = 10 // len(histBounds)
)

// histBounds are the upper bounds of the check-duration buckets, in ns:
// fine around the default 5 ms timeout.
var histBounds = [nBounds]int64{100e3, 250e3, 500e3, 1e6, 2e6, 3e6, 5e6, 10e6, 25e6, 100e6}

// histLabels are histBounds in seconds, as Prometheus writes le.
var histLabels = [nBounds]string{"0.0001", "0.00025", "0.0005", "0.001", "0.002", "0.003", "0.005", "0.01", "0.025", "0.1"}

// Reasons a check failed (the reason label of tollgate_redis_errors_total),
// by redis.Kind.
const (
	reasonTimeout    = redis.KindTimeout
	reasonDial       = redis.KindDial
	reasonConnection = redis.KindConnection
	reasonReply      = redis.KindReply
	nReasons         = redis.Kinds
)

var reasonNames = [nReasons]string{"timeout", "dial", "connection", "reply", "redirect", "readonly", "no_route", "queue_full"}

// reasonOf classifies a failed check's error.
func reasonOf(err error) int { return redis.Kind(err) }

// policyMetrics are one policy's counters. Safe for concurrent use:
// counters are updated atomically; seen and changed under the registry's
// lock.
type policyMetrics struct {
	class, policy string
	n             [4 * nResults]int64 // requests, by decision*nResults + result
	near          int64               // admitted with less than a fifth of the burst left
	shadowLog     int64               // the last shadow refusal logged, monotonic ns

	seen    int64 // the last New that compiled it, monotonic ns
	total   int64 // the sum of n when last looked at
	changed int64 // when total last changed, monotonic ns
}

// backendMetrics are one Redis deployment's counters (on its backend).
type backendMetrics struct {
	hist    [nBounds + 1]int64 // sampled check durations, by bucket (the last: +Inf)
	histSum int64              // ns
	errors  [nReasons]int64
}

// observe counts a sampled check that took ns nanoseconds.
func (m *backendMetrics) observe(ns int64) {
	i := 0
	for i < nBounds && ns > histBounds[i] {
		i++
	}
	atomic.AddInt64(&m.hist[i], 1)
	atomic.AddInt64(&m.histSum, ns)
}

// classMetrics is what is served per class: the fallback's divisor.
type classMetrics struct {
	hb       *heartbeat
	replicas int64
	seen     int64
}

// metricsRegistry holds the process's metrics (in the registry: shared.metrics).
type metricsRegistry struct {
	mu       sync.Mutex
	policies map[string]*policyMetrics // by class NUL policy
	classes  map[string]*classMetrics
	denies   map[*denyCache]bool // caches holding entries (denyCache.remember)
}

func newMetricsRegistry() *metricsRegistry {
	return &metricsRegistry{policies: make(map[string]*policyMetrics), classes: make(map[string]*classMetrics), denies: make(map[*denyCache]bool)}
}

// policy returns the counters of class's policy, creating them on first
// use, and marks them compiled at now.
func (r *metricsRegistry) policy(class, name string, now int64) *policyMetrics {
	key := class + "\x00" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.policies[key]
	if m == nil {
		if len(r.policies) >= maxPolicyMetrics {
			r.forget(now)
		}
		m = &policyMetrics{class: class, policy: name, changed: now}
		r.policies[key] = m
	}
	m.seen = now
	return m
}

// forget drops the policies left out of the output (see live). Requires
// r.mu held.
func (r *metricsRegistry) forget(now int64) {
	for k, m := range r.policies {
		if !m.live(now) {
			delete(r.policies, k)
		}
	}
}

// live reports whether m is served at now, updating when it last counted.
// Requires the registry's lock held.
func (m *policyMetrics) live(now int64) bool {
	var total int64
	for i := range m.n {
		total += atomic.LoadInt64(&m.n[i])
	}
	if total != m.total {
		m.total = total
		m.changed = now
	}
	return now-m.seen < int64(metricsIdle) || now-m.changed < int64(metricsIdle)
}

// class records class's heartbeat and replicas floor, compiled at now.
func (r *metricsRegistry) class(class string, hb *heartbeat, replicas, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.classes) >= maxPolicyMetrics {
		for k, c := range r.classes {
			if now-c.seen >= int64(metricsIdle) {
				delete(r.classes, k)
			}
		}
	}
	r.classes[class] = &classMetrics{hb: hb, replicas: replicas, seen: now}
}

// watchDeny counts c's entries in tollgate_deny_cache_entries; c calls it
// at now when it takes a refusal while empty or holding only expired ones.
// Caches whose refusals have all expired are dropped from the watch here,
// once it holds pruneWatchedAt (a reload leaves its instances' caches
// behind: they must not be kept), and at each scrape.
func (r *metricsRegistry) watchDeny(c *denyCache, now int64) {
	r.mu.Lock()
	if len(r.denies) >= pruneWatchedAt {
		for w := range r.denies {
			if atomic.LoadInt64(&w.latest) <= now {
				delete(r.denies, w)
			}
		}
	}
	r.denies[c] = true
	r.mu.Unlock()
}

// pruneWatchedAt is how many deny caches are watched before expired ones
// are looked for (an atomic load each).
const pruneWatchedAt = 8

// denyEntries drops expired refusals from the watched caches and returns
// the entries left; caches left empty stop being watched (they watch
// themselves again on their next refusal). The caches are pruned outside
// the registry's lock.
func (r *metricsRegistry) denyEntries() int64 {
	r.mu.Lock()
	caches := make([]*denyCache, 0, len(r.denies))
	for c := range r.denies {
		caches = append(caches, c)
	}
	r.mu.Unlock()
	var n int64
	for _, c := range caches {
		c.prune()
		if k := atomic.LoadInt64(&c.n); k > 0 {
			n += k
		} else {
			r.mu.Lock()
			if atomic.LoadInt64(&c.n) == 0 {
				delete(r.denies, c)
			}
			r.mu.Unlock()
		}
	}
	return n
}

// count counts a request decided how with decision d, under the policy
// that decided it (decider), and the admitted policies near their limit:
// of the burst they were decided on (the pod's share, for the fallback).
func count(set *policySet, d []int64, how int) {
	res := resultAllowed
	if how == decidedUnavailable {
		res = resultUnavailable
	} else if d[0] != 1 {
		res = resultLimited
	}
	i := 0 // one policy: it decided (a refusal's common case, the deny cache's)
	if len(set.ps) > 1 {
		i = decider(set, d, how)
	}
	atomic.AddInt64(&set.ps[i].m.n[how*nResults+res], 1)
	if res != resultAllowed {
		return
	}
	var locals []limit
	if how == decidedLocal {
		set.localsMu.Lock()
		locals = set.locals
		set.localsMu.Unlock()
	}
	for i, p := range set.ps {
		burst := p.lim.burst
		if i < len(locals) {
			burst = locals[i].burst
		}
		if 5*d[1+3*i] < int64(burst) {
			atomic.AddInt64(&p.m.near, 1)
		}
	}
}

// decider returns the index of the policy a request is counted under: for
// a 503, the first that fails closed (an enforcing one first); for a
// refusal, the one with the longest wait (an enforcing one first); for an
// admission, the one with the least of its burst left.
func decider(set *policySet, d []int64, how int) int {
	best := -1
	for i, p := range set.ps {
		var better bool
		switch {
		case how == decidedUnavailable:
			better = p.failClosed && (best < 0 || set.ps[best].shadow && !p.shadow)
		case d[0] != 1:
			better = d[2+3*i] > 0 && (best < 0 || set.ps[best].shadow && !p.shadow ||
				set.ps[best].shadow == p.shadow && d[2+3*i] > d[2+3*best])
		default:
			better = best < 0 || float64(d[1+3*i])/p.lim.burst < float64(d[1+3*best])/set.ps[best].lim.burst
		}
		if better {
			best = i
		}
	}
	if best < 0 {
		return 0
	}
	return best
}
