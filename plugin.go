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
// top-level limit and a rule may key clients its own way (keys.go); shadow
// policies are charged but never refuse (shadow.go); every decision is
// counted for a serveMetrics middleware to serve (internal/metrics).
//
// Traefik loads the package from source through Yaegi: CreateConfig, then New
// per router and on every reload. New is cheap and opens nothing; shared
// resources live in the registry (registry.go).
package tollgate

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

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
	next  http.Handler
	set   *settings
	be    *backend
	local *localBuckets
	top   *policySet     // the set when no rule matches; nil without a top-level limit
	hb    *heartbeat     // the class's pod count; nil with the heartbeat off
	notes *regions.Notes // where requests note keys for the region exchange; nil without regions (internal/regions)
	plain bool           // ServeHTTP's common case applies: top alone, plain (see policySet)

	mu   sync.Mutex // guards sets
	sets map[uint64]*policySet
}

// New builds the middleware. It validates and compiles cfg; it dials nothing.
func New(_ context.Context, next http.Handler, cfg *Config, name string) (http.Handler, error) {
	atomic.StoreInt64(&shared.lastNew, shared.now())
	if cfg != nil && cfg.ServeMetrics {
		h, err := metricsEndpoint(cfg)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		return h, nil
	}
	set, err := compile(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if cfg.Class == "" {
		if err := shared.claimClass(set.class, name); err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
	}
	t := &Tollgate{next: next, set: set, local: shared.locals.forClass(set.class), sets: make(map[uint64]*policySet)}
	if set.disabled {
		return t, nil
	}
	if t.be, err = shared.backend(set.redis); err != nil {
		return nil, fmt.Errorf("tollgate %s: %w", name, err)
	}
	if set.redis.heartbeatNS > 0 {
		t.hb = t.be.heartbeatFor(set.class, t.be.now())
	}
	if set.region != nil {
		x, err := shared.exchangerFor(set.region, set.regionPeers, t.be)
		if err != nil {
			return nil, fmt.Errorf("tollgate %s: %w", name, err)
		}
		t.notes = x.Notes()
	}
	now := shared.now()
	for _, p := range append(append(set.rules, set.top), set.plans...) {
		if p != nil {
			p.m = shared.metrics.Policy(set.class, p.name, now)
		}
	}
	hb, floor := t.hb, set.replicas
	shared.metrics.Class(set.class, func(now int64) int64 { return replicasSeen(hb, floor, now) }, now)
	if set.top != nil {
		t.top = withHeaders(newPolicySet([]*policy{set.top}, set.keyLen), set.headers)
		t.plain = len(set.rules) == 0 && t.top.plain && set.plans == nil && set.exempt == nil
	}
	return t, nil
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
		t.serveAny(rw, req)
		return
	}
	d := make([]int64, 4) // decisionLen(1)
	how := decide(t, t.top, req, d)
	if how > decidedLocal || d[0] != 1 || d[1] < t.top.nearBelow { // near the limit: counted by answer
		t.answer(rw, req, t.top, d, how)
		return
	}
	atomic.AddInt64(t.top.admitted[how], 1) // count(t.top, d, how), inlined: admitted, not near the limit
	// setHeaders' IETF case for one policy, by map assignment.
	h := rw.Header()
	if t.top.policyValue != nil {
		h[hdrPolicy] = t.top.policyValue
		h[hdrRateLimit] = []string{t.top.rPrefix + strconv.FormatInt(d[1], 10) + ";t=" + strconv.FormatInt((d[2]+999)/1000, 10)}
	}
	if t.set.decision != "" {
		h[t.set.decision] = decisionValues[how]
	}
	t.next.ServeHTTP(rw, req)
}

// serveAny is ServeHTTP for every configuration: rules (the policy set
// depends on the request), no top-level limit, several policies or headers
// other than IETF alone.
func (t *Tollgate) serveAny(rw http.ResponseWriter, req *http.Request) {
	if t.set.exempt != nil && t.set.source.exempt(req, t.set.exempt) {
		t.next.ServeHTTP(rw, req) // exemptSourceRange: untouched
		return
	}
	set := t.top
	if len(t.set.rules) > 0 || t.set.plans != nil {
		set = t.policiesFor(req)
	}
	if set == nil {
		t.next.ServeHTTP(rw, req)
		return
	}
	d := make([]int64, set.decisionLen)
	if set.ownKeys {
		t.answer(rw, req, set, d, decideAny(t, set, req, d)) // not decide's header fast path: its keys are several
		return
	}
	t.answer(rw, req, set, d, decide(t, set, req, d))
}

// Canonical header names, for map assignment (the hot path's headers).
const (
	hdrPolicy    = "Ratelimit-Policy"
	hdrRateLimit = "Ratelimit"
)

// answer is ServeHTTP after decision d over set, decided how, for every
// case (ServeHTTP does the common one itself): a refusal (from Redis, the
// deny cache or the fallback), a 503, any headers.
func (t *Tollgate) answer(rw http.ResponseWriter, req *http.Request, set *policySet, d []int64, how int) {
	if set.shadow && (how == decidedUnavailable || d[0] != 1) && shadowOnly(set, d, how) {
		t.passShadow(rw, req, set, d, how)
		return
	}
	count(set, d, how)
	if t.set.decision != "" {
		rw.Header()[t.set.decision] = decisionValues[how]
	}
	if how == decidedUnavailable {
		t.refuseUnavailable(rw, set)
		return
	}
	if t.set.headers != 0 {
		setHeaders(rw.Header(), t.set.headers, set, d)
	}
	if d[0] != 1 {
		writeQuotaExceeded(rw, set, d)
		return
	}
	t.next.ServeHTTP(rw, req)
}

// refuseUnavailable answers 503 when Redis is unavailable and a policy fails
// closed.
func (t *Tollgate) refuseUnavailable(rw http.ResponseWriter, set *policySet) {
	atomic.AddInt64(&t.be.closed, 1)
	writeUnavailable(rw, set, t.unavailableHeaders(rw, set))
}

// unavailableHeaders sets the headers of a request decided unavailable
// and returns the retry time, in seconds.
func (t *Tollgate) unavailableHeaders(rw http.ResponseWriter, set *policySet) int64 {
	retry := ceilSecs(t.set.redis.probeNS / 1e6)
	if t.set.headers&headersIETF != 0 {
		// No budget is known; r=0 with the retry time keeps "every
		// response carries RateLimit" true and tells SDKs to pause.
		rw.Header().Set("RateLimit-Policy", set.policyHeader)
		items := make([]string, len(set.ps))
		for i := range set.ps {
			items[i] = set.quoted[i] + ";r=0;t=" + strconv.FormatInt(retry, 10)
		}
		rw.Header().Set("RateLimit", strings.Join(items, ", "))
	}
	return retry
}

// How a request was decided (DecisionHeader).
const (
	decidedRedis       = metrics.ByRedis
	decidedLocal       = metrics.ByLocal
	decidedUnavailable = metrics.ByUnavailable
	decidedCache       = metrics.ByCache // a refusal from Redis still in force (denycache.go)
)

// decisionValues are the DecisionHeader values by decision, assigned to the
// header map as they are (each has no spare capacity: an append copies).
var decisionValues = [...][]string{{"redis"}, {"local"}, {"unavailable"}, {"cache"}}

// shadowValues are decisionValues for a request that shadow policies alone
// would have refused, let through.
var shadowValues = [...][]string{{"redis;shadow"}, {"local;shadow"}, {"unavailable;shadow"}, {"cache;shadow"}}

// decide charges the request's buckets into decision d: in Redis (under
// the client's key, or one of its shards' when sharded), or, when Redis is
// unavailable, in the local fallback (failure policy: see fallback.go). A
// refusal still in force is answered from the deny cache, and one from
// Redis is remembered there. It returns decidedUnavailable when Redis is
// unavailable and a policy fails closed.
func decide(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	v := req.Header[t.set.source.header]
	if !t.set.byHeader || len(v) == 0 || v[0] == "" {
		return decideAny(t, set, req, d)
	}
	key := hashKey(t.set.headerTag + v[0]) // clientKey(class, "h:"+v[0])
	if atomic.LoadInt64(&set.denied.n) != 0 && set.denied.lookup(key, d) {
		if t.notes != nil {
			noteRegion(t.notes, set.ps, key, d, true)
		}
		return decidedCache
	}
	if redisCheck(t.be, set.cmd, key, d, &t.set.redis, t.hb) != nil {
		return fallback(t, set, key, d)
	}
	if d[0] != 1 {
		set.denied.remember(key, d)
	}
	if t.notes != nil && (d[0] != 1 || d[1] == 0 || len(set.ps) > 1) { // pressing: note's test, one policy's inlined
		noteRegion(t.notes, set.ps, key, d, false)
	}
	return decidedRedis
}

// decideAny is decide for any client identity, sharded or not.
func decideAny(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	key := clientKey(t.set.class, t.set.source.identity(req))
	rkey := key
	if t.set.shards > 1 {
		rkey = t.set.shardKey(key)
	}
	call := rkey // the keys as the call writes them
	if set.ownKeys {
		if set.groups != nil {
			return decideGroups(t, set, req, d)
		}
		call = ownCall(t, set, req, rkey)
	}
	if atomic.LoadInt64(&set.denied.n) != 0 && set.denied.lookup(call, d) {
		if t.notes != nil && !set.ownKeys {
			noteRegion(t.notes, set.ps, rkey, d, true)
		}
		return decidedCache
	}
	if redisCheck(t.be, set.cmd, call, d, &t.set.redis, t.hb) != nil {
		if set.ownKeys {
			return fallbackOwn(t, set, req, key, d)
		}
		return fallback(t, set, key, d)
	}
	if t.notes != nil && !set.ownKeys && (d[0] != 1 || d[1] == 0 || len(set.ps) > 1) {
		noteRegion(t.notes, set.ps, rkey, d, false) // before scaleRemaining: a shard's own tokens
	}
	if t.set.shards > 1 {
		scaleRemaining(set, d, t.set.shards)
	}
	if d[0] != 1 {
		set.denied.remember(call, d)
	}
	return decidedRedis
}

// scaleRemaining turns a shard's remaining tokens into the client's
// estimate: shards x the shard's (all shards are alike on average), for
// every policy but a rule keyed its own way (never sharded).
func scaleRemaining(set *policySet, d []int64, shards int64) {
	for i, p := range set.ps {
		if p.source == nil {
			d[1+3*i] *= shards
		}
	}
}

// fallback decides without Redis: 503 (decidedUnavailable) when a policy
// fails closed, else the local buckets decide, with the limits shared by
// the pods seen (heartbeat.go). A plain function, its cold parts out of
// line (see ServeHTTP).
func fallback(t *Tollgate, set *policySet, key string, d []int64) int {
	if set.failClosed {
		return decidedUnavailable // counted as a 503 by refuseUnavailable
	}
	keys := []string{key + set.ps[0].keySuffix}
	if len(set.ps) > 1 {
		keys = set.localKeys(key)
	}
	return takeLocal(t, set, keys, d)
}

// takeLocal is the fallback's take: the local buckets of keys, one per
// policy of set, with the limits shared by the pods seen.
func takeLocal(t *Tollgate, set *policySet, keys []string, d []int64) int {
	atomic.AddInt64(&t.be.fallbacks, 1)
	n := replicasSeen(t.hb, t.set.replicas, int64(time.Since(clock.Start))+clock.Origin)
	set.localsMu.Lock()
	if set.localsN != n || set.locals == nil {
		set.shareLocals(n)
	}
	lims := set.locals
	set.localsMu.Unlock()
	t.local.take(keys, lims, d)
	return decidedLocal
}
