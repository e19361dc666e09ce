package tollgate

// A request over a leased policy set (lease.go): spent from the pod's
// lease, or decided by Redis with an ask for one when its client is hot.

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// takeLease admits a request from this pod's lease on key, when it holds
// one with requests left and its ttl not over: d gets Redis's decision
// with the grant, each bucket's tokens left counting what the lease still
// holds. A lease found past its ttl is ended (its rest given back).
func takeLease(ls *leasing, key string, d []int64) bool {
	tb := ls.table
	if atomic.LoadInt64(&tb.n) == 0 {
		return false
	}
	now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	k := ls.tag + key
	tb.mu.Lock()
	e := tb.leases[k]
	if e == nil || e.left == 0 {
		tb.mu.Unlock()
		return false
	}
	if now >= e.end {
		tb.end(k, e)
		tb.mu.Unlock()
		return false
	}
	e.left--
	left := e.left
	copy(d, e.d)
	if left == 0 {
		delete(tb.leases, k) // spent: nothing to give back
		atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	}
	tb.mu.Unlock()
	for i, c := range ls.costs {
		d[1+3*i] += left * c
	}
	return true
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
	if t.set.decision != "" {
		h[t.set.decision] = decisionValues[decidedLease]
	}
	t.next.ServeHTTP(rw, req)
	return true
}

// decideLeased is decideKey for a leased set (key: its client key): the
// pod's lease first, then the deny cache, then Redis, asking for a lease
// when none is out for key.
func decideLeased(t *Tollgate, set *policySet, key string, rw http.ResponseWriter, d []int64) int {
	if takeLease(set.lease, key, d) {
		return decidedLease
	}
	if atomic.LoadInt64(&set.denied.n) != 0 {
		if r := refuseCached(set.denied, key, rw); r == refused {
			return decidedAnswered
		} else if r == inForce && set.denied.lookup(key, d) {
			return decidedCache
		}
	}
	return callLeased(t, set, key, d)
}

// callLeased is decideLeased's Redis call (no lease to spend, no refusal
// cached): a client that is hot on the pod (hotStreak calls in a row,
// each less than the set's gap after the one before, or back within
// 4 x ttl of its last grant) asks for a lease (askLease); any other is
// one check, as without leases, and two atomic operations (ServeHTTP's
// lukewarm path: the 1,000-key load's).
func callLeased(t *Tollgate, set *policySet, key string, d []int64) int {
	ls := set.lease
	now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	// The slot of two of the key's hash characters (clientKey: "tg{" and
	// base64): no lock, no map. Keys that share a slot look hotter
	// together: at worst an ask more.
	i := int(key[3]&63)<<6 | int(key[4]&63)
	seen := ls.seen
	if now-atomic.SwapInt64(&seen.at[i], now) > ls.gap {
		atomic.StoreInt64(&seen.streak[i], 0)
	} else if atomic.AddInt64(&seen.streak[i], 1) >= ls.hot {
		return askLease(t, set, key, now, d)
	}
	if redisCheck(t.be, set.cmd, key, d, &t.set.redis, t.hb) != nil {
		return fallback(t, set, key, d)
	}
	if d[0] != 1 {
		return leaseRefused(set, key, d)
	}
	return decidedRedis
}

// askLease is callLeased for a hot client: its call asks for a lease
// unless one is out for it (or the table is full), and a grant becomes
// this pod's lease.
func askLease(t *Tollgate, set *policySet, key string, now int64, d []int64) int {
	ls := set.lease
	k := ls.tag + key
	if !ls.table.ask(k) {
		if redisCheck(t.be, set.cmd, key, d, &t.set.redis, t.hb) != nil {
			return fallback(t, set, key, d)
		}
		return leaseRefused(set, key, d)
	}
	sent := now
	n := len(d)
	ld := make([]int64, n+2)
	err := redisCheck(t.be, ls.asking(replicasSeen(t.hb, t.set.replicas, sent)), key, ld, &t.set.redis, t.hb)
	granted := int64(0)
	if err == nil {
		copy(d, ld[:n])
		if d[0] == 1 && ld[n] <= ls.shape.max {
			granted = ld[n] // more than asked is no reply of ours: none taken
		}
	}
	ls.table.granted(k, ls, key, granted, sent+ls.shape.ttl, strconv.FormatInt(ld[n+1], 10), d)
	if err != nil {
		return fallback(t, set, key, d)
	}
	if granted > 0 {
		for i, c := range ls.costs {
			d[1+3*i] += granted * c
		}
		// Hot while it comes back within 4 x ttl: a lease of max spent at
		// the pace hotGap asks for takes that long (callLeased's gap is
		// counted from this shifted time).
		atomic.StoreInt64(&ls.seen.at[int(key[3]&63)<<6|int(key[4]&63)], now+4*ls.shape.ttl-ls.gap)
	}
	return leaseRefused(set, key, d)
}

// leaseRefused is Redis's decision d for key over a leased set: a refusal
// is remembered, unless a lease granted meanwhile admits the request.
func leaseRefused(set *policySet, key string, d []int64) int {
	if d[0] == 1 {
		return decidedRedis
	}
	if takeLease(set.lease, key, d) {
		return decidedLease
	}
	// A lease asked for by another request of this client's may be on its
	// way: a burst's requests all reach Redis before its grant comes back,
	// and what it holds would go unspent while they are refused. The ask
	// is answered within its timeout.
	if ch := set.lease.table.pending(set.lease.tag + key); ch != nil {
		<-ch
		if takeLease(set.lease, key, d) {
			return decidedLease
		}
	}
	set.denied.remember(key, d)
	return decidedRedis
}

// pending returns the channel an ask out for k closes once answered, or
// nil when none is out.
func (tb *leaseTable) pending(k string) chan struct{} {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if e := tb.leases[k]; e != nil && e.asking {
		return e.answered
	}
	return nil
}
