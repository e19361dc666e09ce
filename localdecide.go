package tollgate

// Deciding without Redis: the local fallback's buckets and slots, shared
// by the pods counted (heartbeat.go), and how a request was decided.

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// How a request was decided (DecisionHeader), by value: the request's
// path reads its own constants, not another package's. Each equals the
// metrics decision it is counted under (metrics.ByRedis, ...; held by
// TestDecidedMatchesMetrics); decidedAnswered, one past them, is a
// refusal already answered from its prepared form.
const (
	decidedRedis       = 0
	decidedLocal       = 1
	decidedLease       = 2 // admitted from the pod's lease (lease.go)
	decidedUnavailable = 3
	decidedCache       = 4 // a refusal from Redis still in force (denycache.go)
	decidedAnswered    = 5 // the same, already answered from its prepared refusal
)

// fallback decides without Redis: 503 (decidedUnavailable) when a policy
// fails closed, else the local buckets decide, with the limits shared by
// the pods seen (heartbeat.go). A plain function, its cold parts out of
// line (see ServeHTTP).
func fallback(t *Tollgate, set *policySet, key string, d []int64) int {
	if set.failClosed {
		return decidedUnavailable // counted as a 503 by refuseUnavailable
	}
	keys := []string{key + set.ps[0].KeySuffix}
	if len(set.ps) > 1 {
		keys = set.localKeys(key)
	}
	return takeLocal(t, set, keys, d)
}

// takeLocal is the fallback's take: the local buckets of keys, one per
// policy of set, with the limits shared by the pods seen.
func takeLocal(t *Tollgate, set *policySet, keys []string, d []int64) int {
	atomic.AddInt64(&t.be.fallbacks, 1)
	n := replicasSeen(t.hb, t.set.Replicas, int64(time.Since(processStart))+monoOrigin)
	set.localsMu.Lock()
	if set.localsN != n || set.locals == nil {
		set.shareLocals(n)
	}
	lims := set.locals
	set.localsMu.Unlock()
	if set.held {
		return takeHeld(t, set, keys, lims, n, d)
	}
	t.local.take(keys, lims, d)
	if set.quotas {
		localQuotas(set, d)
	}
	return decidedLocal
}

// clientKeys returns each policy's client key: the rule's own identity's, or
// key.
func clientKeys(t *Tollgate, set *policySet, req *http.Request, key string) []string {
	keys := make([]string, len(set.ps))
	for i, p := range set.ps {
		keys[i] = key
		if p.Source != nil {
			keys[i] = bucket.ClientKey(t.set.Class, identity(p.Source, req))
		}
	}
	return keys
}

// fallbackOwn is fallback for a set whose rules key clients their own way
// (key: the top level's unsharded client key).
func fallbackOwn(t *Tollgate, set *policySet, req *http.Request, key string, d []int64) int {
	if set.failClosed {
		return decidedUnavailable
	}
	keys := clientKeys(t, set, req, key)
	for i, p := range set.ps {
		keys[i] += p.KeySuffix
	}
	return takeLocal(t, set, keys, d)
}

// fallbackFor is the fallback's decision for req over set, whoever keys it.
func fallbackFor(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	key := bucket.ClientKey(t.set.Class, identity(&t.set.Source, req))
	if set.ownKeys {
		return fallbackOwn(t, set, req, key, d)
	}
	return fallback(t, set, key, d)
}

// localQuotas fills in what the local fallback left of the quotas of set
// in d: a quota is not counted without Redis, so its item shows the limit
// and the time to its window's end (the pod's clock).
func localQuotas(set *policySet, d []int64) {
	now := quotaNow()
	us := quotaUS(now)
	for i, p := range set.ps {
		if p.Quota == nil {
			continue
		}
		b := quotaWindow(p.Quota, now)
		d[1+3*i] = p.Quota.Limit
		d[2+3*i] = 0
		d[3+3*i] = (b[2] - us + 999) / 1000
	}
}

// takeHeld is takeLocal for a set with caps (lims: its local shapes for
// n pods): each cap's slot taken in the local store, at most max/n (at
// least 1) per key, before the buckets; a full cap refuses and charges
// nothing (its rates' items show their local burst), a bucket's refusal
// gives the slots back.
func takeHeld(t *Tollgate, set *policySet, keys []string, lims []bucket.Limit, n int64, d []int64) int {
	lb := t.local
	caps := make([]int64, len(set.ps))
	ck := make([]string, len(set.ps))
	for i, p := range set.ps {
		if p.Cap == nil {
			continue
		}
		caps[i] = p.Cap.Max / n
		if caps[i] < 1 {
			caps[i] = 1
		}
		ck[i] = keys[i]
		if p.Cap.Class != "" {
			ck[i] = p.Cap.Class + p.KeySuffix
		}
	}
	full := lb.hold(ck, caps, d)
	if full >= 0 {
		d[0] = 0
		for i, p := range set.ps {
			if p.Cap == nil {
				d[1+3*i], d[2+3*i], d[3+3*i] = int64(lims[i].Burst), 0, 0
			}
		}
		d[2+3*full] = concRetryMS
		return decidedLocal
	}
	left := append([]int64(nil), d...) // hold's slots left, by cap
	t.local.take(keys, lims, d)
	if set.quotas {
		localQuotas(set, d)
	}
	for i, p := range set.ps {
		if p.Cap != nil {
			d[1+3*i], d[2+3*i], d[3+3*i] = left[1+3*i], 0, 0
			if d[0] != 1 {
				lb.unhold(ck[i])
				d[1+3*i]++
			}
		}
	}
	return decidedLocal
}
