package tollgate

// Counting a request under the policy that decided it (internal/metrics
// holds the counters and writes them).

import (
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/internal/metrics"
)

// count counts a request decided how with decision d, under the policy
// that decided it (decider), and the admitted policies near their limit:
// of the burst they were decided on (the pod's share, for the fallback).
func count(set *policySet, d []int64, how int) {
	res := metrics.Allowed
	if how == decidedUnavailable {
		res = metrics.Unavailable
	} else if d[0] != 1 {
		res = metrics.Limited
	}
	atomic.AddInt64(counter(set, d, how, res), 1)
	if res != metrics.Allowed {
		return
	}
	var locals []Limit
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
	return &set.ps[i].Metrics.N[how*metrics.NResults+res]
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
