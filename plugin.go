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
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// CreateConfig returns the default configuration (config.Default);
// Traefik decodes the middleware's options over it.
func CreateConfig() *config.Config { return config.Default() }

// New builds the middleware. It validates and compiles cfg; it dials nothing.
func New(_ context.Context, next http.Handler, cfg *config.Config, name string) (http.Handler, error) {
	atomic.StoreInt64(&shared.lastNew, shared.now())
	if cfg != nil && cfg.ServeMetrics {
		h, err := metricsEndpoint(cfg)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		return h, nil
	}
	set, err := config.Compile(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if cfg.Class == "" {
		if err := shared.claimClass(set.Class, name); err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
	}
	t := &Tollgate{next: next, set: set, local: shared.locals.forClass(set.Class), sets: make(map[uint64]*policySet)}
	if t.be, err = shared.backend(set.Redis); err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if set.Redis.HeartbeatNS > 0 {
		t.hb = t.be.heartbeatFor(set.Class, t.be.now())
	}
	if set.Region != nil {
		x, err := shared.exchangerFor(set.Region, set.RegionPeers, t.be)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		t.notes = x.Notes()
	}
	now := shared.now()
	for _, p := range set.Policies() {
		p.Metrics = shared.metrics.Policy(set.Class, p.Name, now)
		if p.RespCost != nil && p.Cap == nil {
			atomic.StoreInt64(&p.Metrics.Costed, 1)
		}
		if p.Cap != nil {
			atomic.StoreInt64(&p.Metrics.Capped, 1)
		}
	}
	hb, floor := t.hb, set.Replicas
	shared.metrics.Class(set.Class, func(now int64) int64 { return replicasSeen(hb, floor, now) }, now)
	if top := set.TopPolicies(); top != nil {
		t.top = t.withLeases(t.prepared(withHeaders(newPolicySet(top, set.KeyLen), set.Headers)))
		t.plain = len(set.Rules) == 0 && t.top.plain && set.Plans == nil && set.Exempt == nil
		t.capped = t.top.policyValue != nil && t.top.held && !t.top.shadow && !t.top.costed && !t.top.ownKeys && !t.top.quotas &&
			len(set.Rules) == 0 && set.Plans == nil && set.Exempt == nil && t.notes == nil
	}
	return t, nil
}

// withLeases has every call over s (and over its enforcing part and its
// Cluster groups) honour what leases hold, and s lease when its top-level
// or plan policy does and nothing rules it out: a policy that fails
// closed, rules keyed their own way. Returns s.
func (t *Tollgate) withLeases(s *policySet) *policySet {
	if !t.set.Leases || s == nil {
		return s
	}
	honour(s, t.set.KeyLen)
	shape := s.ps[0].Lease
	if shape.Max == 0 || s.failClosed || s.ownKeys {
		return s
	}
	parts := commandParts(s.ps, t.set.KeyLen)
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

// ServeHTTP charges the request to its buckets, sets the headers, and either
// calls next with the original ResponseWriter or refuses.
//
// This is the hot path, written for the interpreter's cost model (measured
// by yaegi-costs): a call on an interpreted method costs 3-5 times a plain
// function's and allocates a frame holding every value of the function,
// taken branches or not, while field reads, map gets and header map
// assignments are nearly free. So the common case (admitted by Redis, or by
// the local fallback, IETF headers) runs through a few plain functions
// with explicit arguments, the headers are assigned as prepared values, and
// everything else (refusals, 503s, other header modes, rules, shards) is
// out of line in answer.
func (t *Tollgate) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	if !t.plain {
		if t.capped {
			serveCapped(t, rw, req)
			return
		}
		t.serveAny(rw, req)
		return
	}
	// A client refused from the deny cache is answered here, in this frame
	// and refuseCached's: a flood from clients over their limit is the
	// path that must cost least.
	key, r := "", notDenied // any identity but a header's: decideAny's
	if v := req.Header[t.set.Source.Header]; t.set.ByHeader && len(v) > 0 && v[0] != "" {
		sum := sha256.Sum256([]byte(t.set.HeaderTag + v[0]))
		key = bucket.KeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}" // HashKey, inlined
		// A lease is spent first, before the deny cache (decideLeased).
		if ls := t.top.lease; ls != nil && atomic.LoadInt64(&ls.table.n) != 0 && serveLeased(t, rw, req, key) {
			return
		}
		if atomic.LoadInt64(&t.top.denied.n) != 0 {
			if r = refuseCached(t.top.denied, key, rw); r == refused {
				return
			}
		}
	}
	servePlain(t, rw, req, key, r)
}

// servePlain is ServeHTTP's common case past the deny cache: one policy,
// IETF headers or none, the client's key (its header identity's, or ""
// for any other) and its refusal in the deny cache, r.
func servePlain(t *Tollgate, rw http.ResponseWriter, req *http.Request, key string, r int) {
	top := t.top // one selector: under Yaegi each is a value of the frame
	if top.quotas {
		serveQuotas(t, rw, req, key, r)
		return
	}
	d := make([]int64, 4) // DecisionLen(1)
	how := decidedRedis
	// decideKey's common case inlined (a frame fewer: 0.9 KB under Yaegi).
	if key == "" {
		how = decideAny(t, top, req, rw, d)
	} else if r == inForce || t.notes != nil {
		how = decideKey(t, top, key, r, d)
	} else if top.lease != nil {
		how = callLeased(t, top, key, d) // the lease and the deny cache were ServeHTTP's
	} else if redisCheck(t.be, top.cmd, key, d, &t.set.Redis, t.hb) != nil {
		how = fallback(t, top, key, d)
	} else if d[0] != 1 {
		top.denied.remember(key, d)
	}
	if how > decidedLease || d[0] != 1 || d[1] < top.nearBelow { // near the limit: counted by answer
		if how != decidedAnswered {
			t.answer(rw, req, top, d, how)
		}
		return
	}
	atomic.AddInt64(top.admitted[how], 1) // count(top, d, how), inlined: admitted, not near the limit
	// setHeaders' IETF case for one policy, by map assignment.
	h := rw.Header()
	if top.policyValue != nil {
		h[hdrPolicy] = top.policyValue
		h[hdrRateLimit] = []string{top.rPrefix + strconv.FormatInt(d[1], 10) + ";t=" + strconv.FormatInt((d[2]+999)/1000, 10)}
	}
	if t.set.Decision != "" {
		h[t.set.Decision] = decisionValues[how]
	}
	t.next.ServeHTTP(rw, req)
}

// serveQuotas is servePlain for a rate and its calendar quotas (or quotas
// alone): the call of the windows now (quotaCall), and RateLimit's items
// built in one pass. An admission counted under another policy than the
// first (one with less of its limit left) goes through answer.
func serveQuotas(t *Tollgate, rw http.ResponseWriter, req *http.Request, key string, r int) {
	top := t.top
	var v *quotaView
	if int64(time.Since(processStart))+monoOrigin < atomic.LoadInt64(&top.quotaUntil) { // quotaCall, inlined
		v = top.quotaV.Load().(*quotaView)
	} else {
		v = quotaRoll(top)
	}
	d := make([]int64, top.decisionLen)
	how := decidedRedis
	if key == "" {
		how = decideAny(t, top, req, rw, d)
	} else if r == inForce || t.notes != nil {
		how = decideKey(t, top, key, r, d)
	} else if redisCheck(t.be, v.cmd, key, d, &t.set.Redis, t.hb) != nil {
		how = fallback(t, top, key, d)
	} else if d[0] != 1 {
		top.denied.remember(key, d)
	}
	if how > decidedLease || d[0] != 1 {
		if how != decidedAnswered {
			t.answer(rw, req, top, d, how)
		}
		return
	}
	// count's admission, inlined: under the policy with the least of its
	// limit left (decider), near the limit through answer; and the
	// RateLimit items (rateLimitValue) in the same pass.
	j := 0
	b := make([]byte, 0, 64)
	for i, p := range top.ps {
		if 5*d[1+3*i] < int64(p.Lim.Burst) {
			t.answer(rw, req, top, d, how)
			return
		}
		if float64(d[1+3*i])/p.Lim.Burst < float64(d[1+3*j])/top.ps[j].Lim.Burst {
			j = i
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		w := d[2+3*i]
		if p.Quota != nil {
			w = d[3+3*i]
		}
		b = strconv.AppendInt(append(append(b, top.quoted[i]...), ";r="...), d[1+3*i], 10)
		b = strconv.AppendInt(append(b, ";t="...), (w+999)/1000, 10)
	}
	atomic.AddInt64(&top.ps[j].Metrics.N[how*metrics.NResults+metrics.Allowed], 1)
	h := rw.Header()
	if t.set.Headers != 0 {
		h[hdrPolicy] = v.policyValue
		h[hdrRateLimit] = []string{string(b)}
	}
	if t.set.Decision != "" {
		h[t.set.Decision] = decisionValues[how]
	}
	t.next.ServeHTTP(rw, req)
}

// serveLeased is ServeHTTP's common case for a client this pod holds a
// lease for (one policy, IETF headers or none): takeLease inlined with
// the headers and next, in one frame (a hot client's whole path). It
// reports false, having done nothing, when the lease is spent, past its
// ttl (decideLeased ends it) or leaves the client near its limit (counted
// by answer).
func serveLeased(t *Tollgate, rw http.ResponseWriter, req *http.Request, key string) bool {
	top := t.top
	ls := top.lease
	tb := ls.table
	now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	k := ls.tag + key
	tb.mu.Lock()
	e := tb.leases[k]
	if e == nil || e.left == 0 || now >= e.end || e.d[1]+(e.left-1)*ls.costs[0] < top.nearBelow {
		tb.mu.Unlock()
		return false
	}
	e.left--
	r := e.d[1] + e.left*ls.costs[0]
	tail := e.tail
	if e.left == 0 {
		delete(tb.leases, k) // spent: nothing to give back
		atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	}
	tb.mu.Unlock()
	atomic.AddInt64(top.admitted[decidedLease], 1)
	h := rw.Header()
	if top.policyValue != nil {
		h[hdrPolicy] = top.policyValue
		h[hdrRateLimit] = []string{top.rPrefix + strconv.FormatInt(r, 10) + tail}
	}
	if t.set.Decision != "" {
		h[t.set.Decision] = decisionValues[decidedLease]
	}
	t.next.ServeHTTP(rw, req)
	return true
}

// serveCapped is ServeHTTP for a top level with a concurrency cap and
// nothing that needs the general path (rules, plans, exemptions, shadow,
// quotas, response costs; IETF headers, or none with policyValue
// unused): decideAny's and answer's common case in this frame, the
// take's call kept for its give-back (release), not built again.
func serveCapped(t *Tollgate, rw http.ResponseWriter, req *http.Request) {
	top := t.top
	key := bucket.ClientKey(t.set.Class, identity(&t.set.Source, req))
	d := make([]int64, top.decisionLen)
	if atomic.LoadInt64(&top.denied.n) != 0 {
		r := refuseCached(top.denied, key, rw)
		if r == refused {
			return
		}
		if r == inForce && top.denied.lookup(key, d) {
			t.answer(rw, req, top, d, decidedCache)
			return
		}
	}
	keys := make([]string, len(top.ps)) // heldKeys, inlined
	for i, p := range top.ps {
		keys[i] = key
		if p.Cap != nil && p.Cap.Class != "" {
			keys[i] = p.Cap.Class
		}
	}
	hc := heldCall(top, keys, newMember())
	how := callHeld(t, top, req, key, key, hc, top.cmd, d)
	if how == decidedUnavailable || d[0] != 1 {
		t.answer(rw, req, top, d, how)
		return
	}
	count(top, d, how)
	h := rw.Header()
	if t.set.Headers != 0 {
		h[hdrPolicy] = top.policyValue
		h[hdrRateLimit] = []string{rateLimitValue(top, d)}
	}
	if t.set.Decision != "" {
		h[t.set.Decision] = decisionValues[how]
	}
	for _, p := range top.ps {
		if p.Cap != nil {
			atomic.AddInt64(&p.Metrics.InFlight, 1)
		}
	}
	defer release(t, top, keys, hc, d, how)
	t.next.ServeHTTP(rw, req)
}

// serveAny is ServeHTTP for every configuration: rules (the policy set
// depends on the request), no top-level limit, several policies or headers
// other than IETF alone.
func (t *Tollgate) serveAny(rw http.ResponseWriter, req *http.Request) {
	if t.set.Exempt != nil && exempt(&t.set.Source, req, t.set.Exempt) {
		t.next.ServeHTTP(rw, req) // exemptSourceRange: untouched
		return
	}
	set := t.top
	if len(t.set.Rules) > 0 || t.set.Plans != nil {
		set = t.policiesFor(req)
	}
	if set == nil {
		t.next.ServeHTTP(rw, req)
		return
	}
	d := make([]int64, set.decisionLen)
	var how int
	if set.ownKeys {
		how = decideAny(t, set, req, rw, d) // not decide's header fast path: its keys are several
	} else {
		how = decide(t, set, req, rw, d)
	}
	if how != decidedAnswered {
		t.answer(rw, req, set, d, how)
	}
}

// Canonical header names, for map assignment (the hot path's headers).
const (
	hdrPolicy    = "Ratelimit-Policy"
	hdrRateLimit = "Ratelimit"
)

// policiesFor returns the policy set that applies to req, or nil: the
// top level's (or the request's plan's) and every rule that matches. Sets
// are prepared once per combination (the rules' bits, the plan above them).
func (t *Tollgate) policiesFor(req *http.Request) *policySet {
	var mask, bit uint64 = 0, 1
	for _, r := range t.set.Rules {
		if matches(r, req) {
			mask |= bit
		}
		bit <<= 1
	}
	ps := t.set.TopPolicies()
	if t.set.Plans != nil {
		if pi := planOf(t.set, req); pi >= 0 {
			ps = nil // unlimited
			if p := t.set.Plans[pi]; p != nil {
				ps = t.set.WithQuotas(p, t.set.PlanQuotas, pi)
			}
			mask |= uint64(pi+1) << config.MaxRules
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
	for i, r := range t.set.Rules {
		if mask&bit != 0 {
			ps = append(ps, t.set.WithQuotas(r, t.set.RuleQuotas, i)...)
		}
		bit <<= 1
	}
	if len(ps) == 0 { // an unlimited plan, no rule
		t.sets[mask] = nil
		return nil
	}
	s := t.prepared(withHeaders(newPolicySet(ps, t.set.KeyLen), t.set.Headers))
	if s.ownKeys && t.set.Redis.Mode == redis.Cluster {
		withGroups(s, t.set.KeyLen)
	}
	t.withLeases(s)
	t.sets[mask] = s
	return s
}

// The middleware as New builds it (plugin.go): what one router's request
// path reads.

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
	set    *config.Settings
	be     *backend
	local  *localBuckets
	top    *policySet     // the set when no rule matches; nil without a top-level limit
	hb     *heartbeat     // the class's pod count; nil with the heartbeat off
	notes  *regions.Notes // where requests note keys for the region exchange; nil without regions (internal/regions)
	plain  bool           // ServeHTTP's common case applies: top alone, plain (see policySet)
	capped bool           // top alone, with a concurrency cap and nothing else of the general path's (serveCapped)

	mu   sync.Mutex // guards sets
	sets map[uint64]*policySet
}
