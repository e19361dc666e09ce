package tollgate

// Answering a decision: the headers, a 429 or a 503, or a refusal by
// shadow policies alone let through.
//
// Shadow mode (Config.Shadow, Rule.Shadow): a shadow policy is checked and
// charged exactly as an enforcing one, and the headers say what enforcing
// would, but a request that shadow policies alone refuse passes. It is
// counted (result "shadow_limited"), marked in the decision header
// (";shadow") and logged at most once per probeInterval per policy. The
// enforcing policies of the set decide such a request by themselves, so a
// shadow rule never lets traffic past an enforcing limit; switching shadow
// off by a reload enforces with the buckets as they are.

import (
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/usage"
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
	if t.conf.Decision != "" {
		rw.Header()[t.conf.Decision] = decisionValues[how]
	}
	if how == decidedUnavailable {
		t.refuseUnavailable(rw, set)
		return
	}
	if t.conf.Headers != 0 {
		setHeaders(rw.Header(), t.conf.Headers, set, d)
	}
	if d[0] != 1 {
		writeQuotaExceeded(rw, set, d)
		return
	}
	if !set.costed && !set.capped {
		t.next.ServeHTTP(rw, req)
		return
	}
	t.serveNext(rw, req, set, set, d, how)
}

// prepared has s's deny cache prepare its answers (refuseCached) when
// a refusal from it is answered the same way every time: no shadow policy
// (passShadow) and no region to note it to. It returns s. (The cache
// keeps what its answers need, not t: a cache the metrics still watch
// after a reload must not keep the old instance and its next.)
func (t *Tollgate) prepared(s *policySet) *policySet {
	if !s.shadow && t.notes == nil {
		decision, headers := t.conf.Decision, t.conf.Headers
		s.denied.prepare = func(d []int64) *refusal { return prepareRefusal(decision, headers, s, d) }
		s.denied.showsFull = headers&(headersLegacy|headersDraft07) != 0
	}
	return s
}

// prepareRefusal prepares answer's answer to refusal d over set from the
// deny cache, with the decision header and headers mode given: its
// headers, as answer sets them, its body and its count.
func prepareRefusal(decision string, headers int, set *policySet, d []int64) *refusal {
	h := http.Header{}
	if decision != "" {
		h[decision] = decisionValues[decidedCache]
	}
	if headers != 0 {
		setHeaders(h, headers, set, d)
	}
	a := &refusal{body: quotaExceeded(h, set, d), counted: counter(set, d, decidedCache, resLimited)}
	for k, v := range h {
		a.keys = append(a.keys, k)
		a.vals = append(a.vals, v)
	}
	return a
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
	retry := ceilSecs(t.conf.Redis.ProbeNS / 1e6)
	if t.conf.Headers&headersIETF != 0 {
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

// shadowValues are decisionValues for a request that shadow policies alone
// would have refused, let through.
var shadowValues = [...][]string{{"redis;shadow"}, {"local;shadow"}, {"lease;shadow"}, {"unavailable;shadow"}, {"cache;shadow"}}

// shadowOnly reports whether a refusal (or a 503) comes from shadow
// policies alone: every policy that refused (a wait) or fails closed
// (unavailable) is one.
func shadowOnly(set *policySet, d []int64, how int) bool {
	for i, p := range set.ps {
		refused := p.FailClosed
		if how != decidedUnavailable {
			refused = d[2+3*i] > 0
		}
		if refused && !p.Shadow {
			return false
		}
	}
	return true
}

// passShadow lets through a request that shadow policies alone refused
// (decision d, decided how): the other policies of the set, when there are
// any, decide it by themselves (charged as if the shadow ones were not
// there; a refusal of theirs is answered as usual); the shadow refusal is
// counted, shown in DecisionHeader and logged at most once per
// probeInterval per policy. The headers are what enforcing would show.
// When Redis did not decide (the fallback did, or a policy fails closed),
// the enforcing policies go to the fallback too: Redis is not asked twice.
func (t *Tollgate) passShadow(rw http.ResponseWriter, req *http.Request, set *policySet, d []int64, how int) {
	var held *policySet // the enforcing policies' slots, when they took some
	var hd []int64
	hhow := how
	if set.enforce != nil && set.groups == nil { // (groups: each enforcing group admitted and was charged)
		e := make([]int64, set.enforce.decisionLen)
		var ehow int
		switch {
		case how == decidedLocal || how == decidedUnavailable:
			ehow = fallbackFor(t, set.enforce, req, e)
		case set.enforce.ownKeys:
			ehow = decideAny(t, set.enforce, req, nil, e)
		default:
			ehow = decide(t, set.enforce, req, nil, e)
		}
		if ehow == decidedUnavailable || e[0] != 1 {
			t.answer(rw, req, set.enforce, e, ehow)
			return
		}
		held, hd, hhow = set.enforce, e, ehow
	}
	p := set.ps[decider(set, d, how)]
	n := atomic.AddInt64(&p.Metrics.N[how*nResults+resShadow], 1)
	now := int64(time.Since(processStart)) + monoOrigin
	if last := atomic.LoadInt64(&p.Metrics.ShadowLog); (last == 0 || now-last >= t.conf.Redis.ProbeNS) && atomic.CompareAndSwapInt64(&p.Metrics.ShadowLog, last, now) {
		log.Printf("tollgate: shadow: policy %q of class %q would have refused a request (%s); let through (%d so far)",
			p.Name, t.conf.Class, metrics.DecisionName(how), n)
	}
	if t.conf.Decision != "" {
		rw.Header()[t.conf.Decision] = shadowValues[how]
	}
	if how == decidedUnavailable {
		t.unavailableHeaders(rw, set)
	} else if t.conf.Headers != 0 {
		setHeaders(rw.Header(), t.conf.Headers, set, d)
	}
	t.serveNext(rw, req, set, held, hd, hhow)
}

// chargeKeys returns the keys of req's client in each policy of set,
// taken before next: a middleware after Tollgate may change req (strip
// the header that names the client), and the charge is the client's the
// request was decided for.
func chargeKeys(t *Tollgate, req *http.Request, set *policySet) []string {
	keys := clientKeys(t, set, req, bucket.ClientKey(t.conf.Class, identity(&t.conf.Source, req)))
	for i, p := range set.ps {
		keys[i] += p.KeySuffix
	}
	return keys
}

// chargeResponse charges what the response says the admitted request
// cost (w, after next), beyond the cost already charged, to each policy
// of set whose owner reads a response cost, under keys (chargeKeys):
// queued on the backend's charge queue (costs.go), its Redis call off
// the response's path.
func (t *Tollgate) chargeResponse(w *usage.Writer, set *policySet, keys []string) {
	ns, rs := w.Costs()
	var c *charge
	for i, p := range set.ps {
		j := set.costShape[i]
		if j < 0 {
			continue
		}
		switch rs[j] {
		case costInvalid:
			atomic.AddInt64(&p.Metrics.CostInvalid, 1)
			continue
		case costMissing:
			atomic.AddInt64(&p.Metrics.CostMissing, 1)
			continue
		case costEncoded:
			atomic.AddInt64(&p.Metrics.CostEncoded, 1)
			continue
		}
		extra := ns[j] - int64(p.Lim.Cost)
		if extra <= 0 {
			continue
		}
		if c == nil {
			c = &charge{}
		}
		if p.Kind == kindQuota {
			c.args = append(c.args, bucket.QuotaCharge(p.Quota.Limit, extra, quotaWindow(p.Quota, quotaNow()), quotaShiftUS)...)
		} else {
			c.args = append(c.args, bucket.RateCharge(p.Lim, extra)...)
		}
		c.keys = append(c.keys, keys[i])
		c.amounts = append(c.amounts, extra)
		c.ms = append(c.ms, p.Metrics)
	}
	if c != nil {
		chargesOf(t.be).add(c)
	}
}

// serveNext calls next for a request admitted over set: the slots of
// held's caps (decision hd, decided hhow; held nil: none) held while it
// runs and given back when it returns, panics included; its response's
// cost charged after it.
func (t *Tollgate) serveNext(rw http.ResponseWriter, req *http.Request, set, held *policySet, hd []int64, hhow int) {
	var keys []string
	if set.costed {
		keys = chargeKeys(t, req, set) // before next, which may change req (a middleware that strips the key)
	}
	if held != nil && held.capped && (hhow == decidedRedis || hhow == decidedLocal) {
		hk := capKeysOf(t, held, req, bucket.ClientKey(t.conf.Class, identity(&t.conf.Source, req)))
		for _, p := range held.ps {
			if p.Cap != nil {
				atomic.AddInt64(&p.Metrics.InFlight, 1)
			}
		}
		defer release(t, held, hk, "", hd, hhow)
	}
	if keys == nil {
		t.next.ServeHTTP(rw, req)
		return
	}
	if set.readsBody {
		// A body the backend compresses is not read (encoded): whoever
		// asks for gzip would not pay. The backend answers in clear; a
		// compress middleware before Tollgate compresses for the client.
		req.Header.Del("Accept-Encoding")
	}
	w := usage.NewWriter(rw, set.costShapes, req.Method)
	// Deferred: a client gone mid-stream makes the proxy panic
	// (http.ErrAbortHandler), and it is charged what it was told so far.
	defer t.chargeResponse(w, set, keys)
	t.next.ServeHTTP(w, req)
}

// release gives back the slots of a request admitted over set (keys:
// capKeysOf, decision d, decided how): to the local store, or queued for
// Redis.
func release(t *Tollgate, set *policySet, keys []string, call string, d []int64, how int) {
	for _, p := range set.ps {
		if p.Cap != nil {
			atomic.AddInt64(&p.Metrics.InFlight, -1)
		}
	}
	if how == decidedLocal {
		for i, p := range set.ps {
			if p.Cap != nil {
				t.local.unhold(keys[i] + p.KeySuffix)
			}
		}
		return
	}
	// Sent now, before the handler returns, while the client has not
	// yet got the whole response (its last bytes are flushed when the
	// handler returns): a client that sends its next request once the
	// last ended finds the slot free. One round trip after next,
	// pipelined; queued and tried again when Redis does not take it in
	// time (a second give-back is harmless).
	if call == "" {
		for i, p := range set.ps {
			if p.Cap != nil {
				call = capCall(set, keys, strconv.FormatInt(d[3+3*i], 10)) // the take's member
				break
			}
		}
	}
	if t.be.rc.Check(set.give, call, make([]int64, 1), t.conf.Redis.Timeout) != nil {
		returnSlots(t, set, call)
	}
}

// count counts a request decided how with decision d, under the policy
// that decided it (decider), and the admitted policies near their limit:
// of the burst they were decided on (the pod's share, for the fallback).
func count(set *policySet, d []int64, how int) {
	res := resAllowed
	if how == decidedUnavailable {
		res = resUnavailable
	} else if d[0] != 1 {
		res = resLimited
	}
	atomic.AddInt64(counter(set, d, how, res), 1)
	if res != resAllowed {
		return
	}
	var locals []bucket.Limit
	if how == decidedLocal {
		set.localsMu.Lock()
		locals = set.locals
		set.localsMu.Unlock()
	}
	for i, p := range set.ps {
		burst := p.Lim.Burst
		if i < len(locals) {
			burst = locals[i].Burst
		}
		if 5*d[1+3*i] < int64(burst) {
			atomic.AddInt64(&p.Metrics.Near, 1)
		}
	}
}

// counter is the count of result res of requests decided how, under the
// policy that decided decision d (decider).
func counter(set *policySet, d []int64, how, res int) *int64 {
	i := 0 // one policy: it decided (a refusal's common case, the deny cache's)
	if len(set.ps) > 1 {
		i = decider(set, d, how)
	}
	return &set.ps[i].Metrics.N[how*nResults+res]
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
			better = p.FailClosed && (best < 0 || set.ps[best].Shadow && !p.Shadow)
		case d[0] != 1:
			better = d[2+3*i] > 0 && (best < 0 || set.ps[best].Shadow && !p.Shadow ||
				set.ps[best].Shadow == p.Shadow && d[2+3*i] > d[2+3*best])
		default:
			better = best < 0 || float64(d[1+3*i])/p.Lim.Burst < float64(d[1+3*best])/set.ps[best].Lim.Burst
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
