// Package tollgate is a Traefik middleware plugin that enforces one global
// rate limit across every Traefik replica, with Redis as the shared store.
//
// Each request is charged, atomically and on Redis's clock, to a token
// bucket per client (Traefik's sourceCriterion) and class, plus one per
// matching rule; all or nothing. Every response carries the IETF
// RateLimit-Policy and RateLimit headers; a refusal is a 429 with
// Retry-After and an application/problem+json body. When Redis fails or is
// slower than its timeout the request falls back to a per-pod bucket
// (fail-open), or answers 503 for policies that fail closed; see fallback.go.
//
// Traefik loads the package from source through Yaegi: CreateConfig, then New
// per router and on every reload. New is cheap and opens nothing; shared
// resources live in the registry (registry.go).
package tollgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Tollgate is the middleware handler built by New. Safe for concurrent use.
type Tollgate struct {
	next  http.Handler
	name  string
	set   *settings
	be    *backend
	local *localBuckets
	top   *policySet // the set when no rule matches; nil without a top-level limit

	mu   sync.Mutex // guards sets
	sets map[uint64]*policySet
}

// policySet is everything prepared for one combination of policies: the
// top-level limit (if any) plus the rules that matched, in config order.
type policySet struct {
	ps           []*policy
	lims         []limit  // shared bucket shapes
	locals       []limit  // fallback bucket shapes
	quoted       []string // `"name"` of each policy
	cmd          *command
	policyHeader string
	failClosed   bool // some policy fails closed
}

// New builds the middleware. It validates and compiles cfg; it dials nothing.
func New(_ context.Context, next http.Handler, cfg *Config, name string) (http.Handler, error) {
	set, err := compile(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	t := &Tollgate{next: next, name: name, set: set, local: shared.local, sets: make(map[uint64]*policySet)}
	if set.disabled {
		return t, nil
	}
	if t.be, err = shared.backend(set.redis); err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if set.top != nil {
		t.top = newPolicySet([]*policy{set.top})
	}
	return t, nil
}

func newPolicySet(ps []*policy) *policySet {
	s := &policySet{ps: ps, policyHeader: policyHeader(ps)}
	for _, p := range ps {
		s.lims = append(s.lims, p.lim)
		s.locals = append(s.locals, p.local)
		s.quoted = append(s.quoted, `"`+p.name+`"`)
		s.failClosed = s.failClosed || p.failClosed
	}
	s.cmd = newCommand(ps, len(clientKey("", "")))
	return s
}

// policiesFor returns the policy set that applies to req, or nil.
func (t *Tollgate) policiesFor(req *http.Request) *policySet {
	var mask, bit uint64 = 0, 1
	for _, r := range t.set.rules {
		if r.matches(req) {
			mask |= bit
		}
		bit <<= 1
	}
	if mask == 0 {
		return t.top
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.sets[mask]; ok {
		return s
	}
	var ps []*policy
	if t.set.top != nil {
		ps = append(ps, t.set.top)
	}
	bit = 1
	for _, r := range t.set.rules {
		if mask&bit != 0 {
			ps = append(ps, r)
		}
		bit <<= 1
	}
	s := newPolicySet(ps)
	t.sets[mask] = s
	return s
}

// matches reports whether a rule applies to req.
func (p *policy) matches(req *http.Request) bool {
	if !strings.HasPrefix(req.URL.Path, p.pathPrefix) {
		return false
	}
	if len(p.methods) == 0 {
		return true
	}
	for _, m := range p.methods {
		if m == req.Method {
			return true
		}
	}
	return false
}

// ServeHTTP charges the request to its buckets, sets the headers, and either
// calls next with the original ResponseWriter or refuses.
func (t *Tollgate) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	set := t.policiesFor(req)
	if set == nil {
		t.next.ServeHTTP(rw, req)
		return
	}
	key := clientKey(t.set.class, t.set.source.identity(req))
	res := make([]result, len(set.ps))
	allowed, err := t.decide(set, key, res)
	if err != nil {
		// Redis unavailable and a policy fails closed.
		if t.set.headers&headersIETF != 0 {
			rw.Header().Set("RateLimit-Policy", set.policyHeader)
		}
		writeUnavailable(rw, set, ceilSecs(t.be.breaker.interval/1e6))
		return
	}
	setHeaders(rw.Header(), t.set.headers, set, res)
	if !allowed {
		writeQuotaExceeded(rw, set, res)
		return
	}
	t.next.ServeHTTP(rw, req)
}

// errFailClosed reports that Redis is unavailable for a policy that fails
// closed.
var errFailClosed = errors.New("tollgate: redis unavailable and failure mode is closed")

// decide charges the request's buckets: in Redis, or, when Redis is
// unavailable, in the local fallback (failure policy: see fallback.go).
func (t *Tollgate) decide(set *policySet, key string, res []result) (bool, error) {
	out := make([]int64, 1+3*len(res))
	if err := t.be.check(set.cmd, key, out); err == nil {
		if allowed, ok := decodeReply(out, res); ok {
			return allowed, nil
		}
	}
	if set.failClosed {
		atomic.AddInt64(&t.be.closed, 1)
		return false, errFailClosed
	}
	atomic.AddInt64(&t.be.fallbacks, 1)
	keys := make([]string, len(set.ps))
	for i, p := range set.ps {
		keys[i] = key + p.keySuffix
	}
	return t.local.take(keys, set.locals, res), nil
}

// decodeReply checks and converts the script's reply; ok is false for a
// reply no correct script produces (it is then treated as a failure).
func decodeReply(out []int64, res []result) (allowed, ok bool) {
	if out[0] != 0 && out[0] != 1 {
		return false, false
	}
	allowed = out[0] == 1
	waiting := false
	for i := range res {
		r := result{remaining: out[1+3*i], waitMS: out[2+3*i], fullMS: out[3+3*i]}
		if r.remaining < 0 || r.waitMS < 0 || r.fullMS < 0 {
			return false, false
		}
		waiting = waiting || r.waitMS > 0
		res[i] = r
	}
	if !allowed && !waiting {
		return false, false
	}
	return allowed, true
}
