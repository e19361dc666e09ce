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
// A client's plan (from the authentication layer) may replace the
// top-level limit and a rule may key clients its own way (source.go); shadow
// policies are charged but never refuse (answer.go); every decision is
// counted for a serveMetrics middleware to serve (internal/metrics).
//
// Traefik loads the package from source through Yaegi: CreateConfig, then New
// per router and on every reload. New is cheap and opens nothing; shared
// resources live in the registry (registry.go).
package tollgate

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// CreateConfig returns the default configuration (config.Default);
// Traefik decodes the middleware's options over it.
func CreateConfig() *config.Config { return config.Default() }

// New builds the middleware. It validates and compiles cfg; it dials nothing.
func New(_ context.Context, next http.Handler, cfg *config.Config, name string) (http.Handler, error) {
	now := shared.now()
	shared.admins.built(now, atomic.SwapInt64(&shared.lastNew, now))
	if cfg != nil && cfg.ServeMetrics {
		h, err := metricsEndpoint(cfg)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		return h, nil
	}
	if cfg != nil && cfg.ServeAdmin {
		h, err := adminEndpoint(cfg)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		return h, nil
	}
	conf, err := config.Compile(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if cfg.Class == "" {
		if err := shared.claimClass(conf.Class, name); err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
	}
	t := &Tollgate{next: next, conf: conf, keyHeader: noHeader, local: shared.locals.forClass(conf.Class), sets: make(map[uint64]*policySet)}
	if t.be, err = shared.backend(conf.Redis); err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if conf.Redis.HeartbeatNS > 0 {
		t.hb = t.be.heartbeatFor(conf.Class, t.be.now())
	}
	if conf.Region != nil {
		x, err := shared.exchangerFor(conf.Region, conf.RegionPeers, t.be)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		t.notes = x.Notes()
	}
	for _, p := range conf.Policies() {
		p.Metrics = shared.metrics.Policy(conf.Class, p.Name, now)
		if p.RespCost != nil && p.Cap == nil {
			atomic.StoreInt64(&p.Metrics.Costed, 1)
		}
		if p.Cap != nil {
			atomic.StoreInt64(&p.Metrics.Capped, 1)
		}
	}
	if conf.ByHeader {
		t.keyHeader = conf.Source.Header
	}
	t.adm = shared.admins.forClass(conf.Class)
	t.admOn = &t.adm.on
	hb, floor := t.hb, conf.Replicas
	shared.metrics.Class(conf.Class, func(now int64) int64 { return replicasSeen(hb, floor, now) }, now)
	if top := conf.TopPolicies(); top != nil {
		t.top = t.withLeases(t.prepared(withHeaders(newPolicySet(top, conf.KeyLen), conf.Headers)))
		t.plain = len(conf.Rules) == 0 && t.top.plain && conf.Plans == nil && conf.Exempt == nil
		t.capped = t.top.policyValue != nil && t.top.capped && !t.top.shadow && !t.top.costed && !t.top.ownKeys && !t.top.quotas &&
			len(conf.Rules) == 0 && conf.Plans == nil && conf.Exempt == nil && t.notes == nil
	}
	t.adm.join(t, now) // built: the admin endpoint may read it
	return t, nil
}

// withLeases has every call over s (and over its enforcing part and its
// Cluster groups) honour what leases hold, and s lease when its top-level
// or plan policy does and nothing rules it out: a policy that fails
// closed, rules keyed their own way. Returns s.
func (t *Tollgate) withLeases(s *policySet) *policySet {
	if !t.conf.Leases || s == nil {
		return s
	}
	honour(s, t.conf.KeyLen)
	shape := s.ps[0].Lease
	if shape.Max == 0 || s.failClosed || s.ownKeys {
		return s
	}
	parts := commandParts(s.ps, t.conf.KeyLen)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parts.suffixes, "\x00") + "\x00" + strings.Join(parts.args, " ")))
	tag := strconv.FormatUint(h.Sum64(), 36)
	tb := leasesOf(t.be)
	ls := &leasing{shape: shape, gap: hotGap(shape), hot: hotStreak, table: tb, tag: tag + "/", field: tb.id + "/" + tag, parts: parts, asks: map[int64]*redis.Command{}, seen: &seenTimes{at: make([]int64, seenSlots), streak: make([]int64, seenSlots)}}
	for i, p := range s.ps {
		ls.costs = append(ls.costs, int64(p.Lim.Cost))
		ls.back = append(ls.back, p.KeySuffix, parts.args[3*i], parts.args[3*i+2])
	}
	s.lease = ls
	return s
}

// policiesFor returns the policy set that applies to req, or nil: the
// top level's (or the request's plan's) and every rule that matches. Sets
// are prepared once per combination (the rules' bits, the plan above them).
func (t *Tollgate) policiesFor(req *http.Request) *policySet {
	var mask, bit uint64 = 0, 1
	for _, r := range t.conf.Rules {
		if matches(r, req) {
			mask |= bit
		}
		bit <<= 1
	}
	ps := t.conf.TopPolicies()
	if t.conf.Plans != nil {
		if pi := planOf(t.conf, req); pi >= 0 {
			ps = nil // unlimited
			if p := t.conf.Plans[pi]; p != nil {
				ps = t.conf.WithQuotas(p, t.conf.PlanQuotas, pi)
			}
			mask |= uint64(pi+1) << maxRules
		}
	}
	if mask == 0 {
		return t.top
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.sets[mask]; ok {
		return s
	}
	ps = append([]*config.Policy(nil), ps...)
	bit = 1
	for i, r := range t.conf.Rules {
		if mask&bit != 0 {
			ps = append(ps, t.conf.WithQuotas(r, t.conf.RuleQuotas, i)...)
		}
		bit <<= 1
	}
	if len(ps) == 0 { // an unlimited plan, no rule
		t.sets[mask] = nil
		return nil
	}
	s := t.prepared(withHeaders(newPolicySet(ps, t.conf.KeyLen), t.conf.Headers))
	if s.ownKeys && t.conf.Redis.Mode == modeCluster {
		withGroups(s, t.conf.KeyLen)
	}
	t.withLeases(s)
	t.sets[mask] = s
	return s
}

// Tollgate is the middleware handler built by New.
//
// Model: each request belongs to a client (sourceCriterion) and takes cost
// tokens from the client's bucket of the class (average tokens per period,
// at most burst; its plan's, with plans) and from the bucket of every rule
// it matches (under the rule's own identity, when it has one), all or
// nothing, in Redis on Redis's clock; the buckets are shared by every
// replica and every router of the class. Without a top-level limit and with
// no matching rule a request passes untouched; so does a client in
// exemptSourceRange.
//
// Safe for concurrent use. A Tollgate owns nothing that needs closing: its
// Redis pool, breaker and fallback buckets belong to the registry, so
// Traefik may drop it at any reload. Invariant: ServeHTTP calls next with
// the ResponseWriter it was given (never a wrapper), or answers itself.
type Tollgate struct {
	next   http.Handler
	conf   *config.Settings
	be     *backend
	local  *localBuckets
	top    *policySet     // the set when no rule matches; nil without a top-level limit
	hb     *heartbeat     // the class's pod count; nil with the heartbeat off
	notes  *regions.Notes // where requests note keys for the region exchange; nil without regions (internal/regions)
	plain  bool           // ServeHTTP's common case applies: top alone, plain (see policySet)
	capped bool           // top alone, with a concurrency cap and nothing else of the general path's (serveCapped)

	keyHeader string // the header clients are keyed by, when ServeHTTP hashes it (conf.ByHeader); else noHeader

	adm   *classAdmin // the class's overrides and resets (admin.go)
	admOn *int32      // &adm.on: ServeHTTP's one load for it

	mu       sync.Mutex // guards sets and overSets
	sets     map[uint64]*policySet
	overSets map[string]*policySet // by override (admin.go)
}
