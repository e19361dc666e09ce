// Package metrics holds Tollgate's counters and writes them in the
// Prometheus text format (exposition.go). Traefik gives plugins no
// metrics API: a middleware configured with serveMetrics serves them.
//
// What is counted, and where:
//   - per class and policy (Policy, in the Registry, so a reload that
//     keeps a class keeps its totals): requests by decision and result,
//     counted once per request a limit applies to; admissions near the
//     limit.
//   - per Redis deployment (Redis, on its backend): the duration of checks
//     (one in HistSample, picked by the clock's low bits, so the hot path
//     pays a clock read on those only) and errors by kind (redis.Kind).
//   - per class: the fallback's divisor (Registry.Class).
//
// Counting is one atomic add per request on the hot path, with nothing to
// look up: each policy holds its own counters. Label values come from the
// configuration only (classes, policy names, Redis names), never from a
// request.
//
// Series lifetime: a class's and a policy's series are served while New
// compiled them or they counted a request within Idle; then they are left
// out (a class removed by a reload goes within Idle) and come back, with
// their totals, if they count again. The Registry keeps at most
// MaxPolicies policies; past that, series left out are forgotten.
package metrics

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// Results of a request (the result label), indexing Policy.N with the
// decision: N[decision*NResults+result].
const (
	Allowed = iota
	Limited
	Unavailable
	ShadowLimited
	NResults
)

// Decisions: how a request was decided (the decision label).
const (
	ByRedis       = iota
	ByLocal       // the local fallback
	ByLease       // admitted from the pod's lease (no Redis call)
	ByUnavailable // Redis unavailable, the policy fails closed: 503
	ByCache       // a refusal from Redis still in force
	NDecisions
)

var (
	resultNames   = [NResults]string{"allowed", "limited", "unavailable", "shadow_limited"}
	decisionNames = [NDecisions]string{"redis", "local", "lease", "unavailable", "cache"}
	// reasonNames are the reason label's values, by redis.Kind.
	reasonNames = [redis.Kinds]string{"timeout", "dial", "connection", "reply", "redirect", "readonly", "no_route", "queue_full"}
)

const (
	// Idle is how long a series not compiled and not counting is served.
	Idle = 10 * time.Minute
	// MaxPolicies bounds the policies (and classes) kept.
	MaxPolicies = 4096
	// HistSample: one check in HistSample is timed (a power of two).
	HistSample = 64
	nBounds    = 10 // len(histBounds)
)

// histBounds are the upper bounds of the check-duration buckets, in ns:
// fine around the default 5 ms timeout.
var histBounds = [nBounds]int64{100e3, 250e3, 500e3, 1e6, 2e6, 3e6, 5e6, 10e6, 25e6, 100e6}

// histLabels are histBounds in seconds, as Prometheus writes le.
var histLabels = [nBounds]string{"0.0001", "0.00025", "0.0005", "0.001", "0.002", "0.003", "0.005", "0.01", "0.025", "0.1"}

// Policy is one policy's counters. Safe for concurrent use: counters are
// updated atomically; seen, total and changed under the registry's lock.
type Policy struct {
	Class, Name string
	N           [NDecisions * NResults]int64 // requests, by decision*NResults + result
	Near        int64                        // admitted with less than a fifth of the burst left
	ShadowLog   int64                        // the last shadow refusal logged, monotonic ns
	// Response costs (the root package's costs.go), when Costed: tokens charged; headers
	// refused, charges failed and dropped (a full queue).
	Costed                                            int64 // 1: reads a response cost (atomic)
	CostCharged, CostInvalid, CostFailed, CostDropped int64
	// Responses whose body named no cost (CostMissing) or was compressed
	// (CostEncoded): charged the request's cost only.
	CostMissing, CostEncoded int64
	// Concurrency caps, when Capped: requests holding a slot on this pod
	// now; give-backs that failed or were dropped (their slots held
	// until maxDuration).
	Capped, InFlight, HeldLost int64

	seen    int64 // the last New that compiled it, monotonic ns
	total   int64 // the sum of N when last looked at
	changed int64 // when total last changed, monotonic ns
}

// Redis is one Redis deployment's counters (on its backend).
type Redis struct {
	Hist    [nBounds + 1]int64 // sampled check durations, by bucket (the last: +Inf)
	HistSum int64              // ns
	Errors  [redis.Kinds]int64 // failed checks and dials, by redis.Kind
}

// Observe counts a sampled check that took ns nanoseconds.
func (m *Redis) Observe(ns int64) {
	i := 0
	for i < nBounds && ns > histBounds[i] {
		i++
	}
	atomic.AddInt64(&m.Hist[i], 1)
	atomic.AddInt64(&m.HistSum, ns)
}

// class is what is served per class: the fallback's divisor.
type class struct {
	divisor func(now int64) int64
	seen    int64
}

// Registry holds the process's policies and classes. Safe for concurrent
// use.
type Registry struct {
	mu       sync.Mutex
	policies map[string]*Policy // by class NUL policy
	classes  map[string]*class
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{policies: make(map[string]*Policy), classes: make(map[string]*class)}
}

// Policy returns the counters of class's policy name, creating them on
// first use, and marks them compiled at now (monotonic ns).
func (r *Registry) Policy(class, name string, now int64) *Policy {
	key := class + "\x00" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.policies[key]
	if m == nil {
		if len(r.policies) >= MaxPolicies {
			r.forget(now)
		}
		m = &Policy{Class: class, Name: name, changed: now}
		r.policies[key] = m
	}
	m.seen = now
	return m
}

// forget drops the policies left out of the output (see live). Requires
// r.mu held.
func (r *Registry) forget(now int64) {
	for k, m := range r.policies {
		if !m.live(now) {
			delete(r.policies, k)
		}
	}
}

// live reports whether m is served at now, updating when it last counted.
// Requires the registry's lock held.
func (m *Policy) live(now int64) bool {
	var total int64
	for i := range m.N {
		total += atomic.LoadInt64(&m.N[i])
	}
	if total != m.total {
		m.total = total
		m.changed = now
	}
	return now-m.seen < int64(Idle) || now-m.changed < int64(Idle)
}

// Class records name's fallback divisor (read when served), compiled at
// now.
func (r *Registry) Class(name string, divisor func(now int64) int64, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.classes) >= MaxPolicies {
		for k, c := range r.classes {
			if now-c.seen >= int64(Idle) {
				delete(r.classes, k)
			}
		}
	}
	r.classes[name] = &class{divisor: divisor, seen: now}
}

// ClassRow is a class's fallback divisor, as served.
type ClassRow struct {
	Name string
	N    int64
}

// Live returns the policies and classes served at now, sorted; only, when
// not nil, keeps those classes alone.
func (r *Registry) Live(only map[string]bool, now int64) ([]*Policy, []ClassRow) {
	r.mu.Lock()
	var pols []*Policy
	for _, p := range r.policies {
		if (only == nil || only[p.Class]) && p.live(now) {
			pols = append(pols, p)
		}
	}
	var names []string
	var divisors []func(now int64) int64
	for name, c := range r.classes {
		if (only == nil || only[name]) && (now-c.seen < int64(Idle) || classCounts(pols, name)) {
			names = append(names, name)
			divisors = append(divisors, c.divisor)
		}
	}
	r.mu.Unlock()
	classes := make([]ClassRow, len(names))
	for i, name := range names {
		classes[i] = ClassRow{Name: name, N: divisors[i](now)}
	}
	sort.Slice(pols, func(i, j int) bool {
		if pols[i].Class != pols[j].Class {
			return pols[i].Class < pols[j].Class
		}
		return pols[i].Name < pols[j].Name
	})
	sort.Slice(classes, func(i, j int) bool { return classes[i].Name < classes[j].Name })
	return pols, classes
}

// classCounts reports whether a live policy of pols belongs to class.
func classCounts(pols []*Policy, class string) bool {
	for _, p := range pols {
		if p.Class == class {
			return true
		}
	}
	return false
}

// DecisionName is the decision label's value for how (ByRedis...).
func DecisionName(how int) string { return decisionNames[how] }
