package tollgate

import (
	"crypto/sha256"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// The request's entry paths. ServeHTTP picks one per request; the fast
// paths are the general path (serveAny) written out for one shape of
// configuration, in fewer interpreted frames, and each is pinned to it by
// TestFastPathsArePinned (pinned_test.go): the same fixture run as chosen
// and forced through serveAny answers, counts and calls Redis byte for
// byte alike.
//
//	path              chosen when (New sets plain, capped)                       pinned by
//	refuseCached      plain, a header identity, its refusal in the deny cache     TestPreparedRefusalsAreTheAnswer, TestFastPathsArePinned
//	serveLeased       plain, a header identity, a lease this pod holds for it     TestFastPathsArePinned (serveLeased)
//	servePlain        plain: the top level alone, one rate, IETF headers or none  TestFastPathsArePinned (servePlain)
//	serveQuotas       plain, and the top level has calendar quotas               TestFastPathsArePinned (serveQuotas)
//	serveCapped       capped: the top level with a concurrency cap, nothing else  TestFastPathsArePinned (serveCapped)
//	serveAny          everything else: rules, plans, exemptions, other headers    (the general path)

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
	if atomic.LoadInt32(t.admOn) != 0 && serveOverridden(t, rw, req) {
		return // the class syncs its overrides and resets (admin.go)
	}
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
	if v := req.Header[t.keyHeader]; len(v) > 0 && v[0] != "" {
		top := t.top
		sum := sha256.Sum256([]byte(t.conf.HeaderTag + v[0]))
		key = keyPrefix + rawURL.EncodeToString(sum[:8])[:10] + "}" // HashKey, inlined
		// A lease is spent first, before the deny cache (decideLeased).
		if ls := top.lease; ls != nil && atomic.LoadInt64(&ls.table.n) != 0 && serveLeased(t, rw, req, key) {
			return
		}
		if atomic.LoadInt64(&top.denied.n) != 0 {
			if r = refuseCached(top.denied, key, rw); r == refused {
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
		how = decideKey(t, top, key, r, rw, d)
	} else if top.lease != nil {
		how = callLeased(t, top, key, d) // the lease and the deny cache were ServeHTTP's
	} else if redisCheck(t.be, top.cmd, key, d, &t.conf.Redis, t.hb) != nil {
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
	if t.conf.Decision != "" {
		h[t.conf.Decision] = decisionValues[how]
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
		how = decideKey(t, top, key, r, rw, d)
	} else if redisCheck(t.be, v.cmd, key, d, &t.conf.Redis, t.hb) != nil {
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
	atomic.AddInt64(&top.ps[j].Metrics.N[how*nResults+resAllowed], 1)
	h := rw.Header()
	if t.conf.Headers != 0 {
		h[hdrPolicy] = v.policyValue
		h[hdrRateLimit] = []string{string(b)}
	}
	if t.conf.Decision != "" {
		h[t.conf.Decision] = decisionValues[how]
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
	if t.conf.Decision != "" {
		h[t.conf.Decision] = decisionValues[decidedLease]
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
	key := bucket.ClientKey(t.conf.Class, identity(&t.conf.Source, req))
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
	keys := make([]string, len(top.ps)) // capKeysOf, inlined
	for i, p := range top.ps {
		keys[i] = key
		if p.Cap != nil && p.Cap.Class != "" {
			keys[i] = p.Cap.Class
		}
	}
	hc := capCall(top, keys, newMember())
	how := callCapped(t, top, req, key, key, hc, top.cmd, d)
	if how == decidedUnavailable || d[0] != 1 {
		t.answer(rw, req, top, d, how)
		return
	}
	count(top, d, how)
	h := rw.Header()
	if t.conf.Headers != 0 {
		h[hdrPolicy] = top.policyValue
		h[hdrRateLimit] = []string{rateLimitValue(top, d)}
	}
	if t.conf.Decision != "" {
		h[t.conf.Decision] = decisionValues[how]
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
	if t.conf.Exempt != nil && exempt(&t.conf.Source, req, t.conf.Exempt) {
		t.next.ServeHTTP(rw, req) // exemptSourceRange: untouched
		return
	}
	set := t.top
	if len(t.conf.Rules) > 0 || t.conf.Plans != nil {
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
