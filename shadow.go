package tollgate

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
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/metrics"
)

// shadowOnly reports whether a refusal (or a 503) comes from shadow
// policies alone: every policy that refused (a wait) or fails closed
// (unavailable) is one.
func shadowOnly(set *policySet, d []int64, how int) bool {
	for i, p := range set.ps {
		refused := p.failClosed
		if how != decidedUnavailable {
			refused = d[2+3*i] > 0
		}
		if refused && !p.shadow {
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
	if set.enforce != nil && set.groups == nil { // (groups: each enforcing group admitted and was charged)
		e := make([]int64, set.enforce.decisionLen)
		var ehow int
		switch {
		case how == decidedLocal || how == decidedUnavailable:
			ehow = fallbackFor(t, set.enforce, req, e)
		case set.enforce.ownKeys:
			ehow = decideAny(t, set.enforce, req, e)
		default:
			ehow = decide(t, set.enforce, req, e)
		}
		if ehow == decidedUnavailable || e[0] != 1 {
			t.answer(rw, req, set.enforce, e, ehow)
			return
		}
	}
	p := set.ps[decider(set, d, how)]
	n := atomic.AddInt64(&p.m.N[how*metrics.NResults+metrics.ShadowLimited], 1)
	now := int64(time.Since(clock.Start)) + clock.Origin
	if last := atomic.LoadInt64(&p.m.ShadowLog); (last == 0 || now-last >= t.set.redis.probeNS) && atomic.CompareAndSwapInt64(&p.m.ShadowLog, last, now) {
		log.Printf("tollgate: shadow: policy %q of class %q would have refused a request (%s); let through (%d so far)",
			p.name, t.set.class, metrics.DecisionName(how), n)
	}
	if t.set.decision != "" {
		rw.Header()[t.set.decision] = shadowValues[how]
	}
	if how == decidedUnavailable {
		t.unavailableHeaders(rw, set)
	} else if t.set.headers != 0 {
		setHeaders(rw.Header(), t.set.headers, set, d)
	}
	t.next.ServeHTTP(rw, req)
}
