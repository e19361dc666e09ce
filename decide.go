package tollgate

// How a request is decided: by Redis through the deny cache and the
// breaker (decide, its common case), or by the local fallback. Beyond the
// common case (decideAny): its plan's top-level policy (Config.Plans,
// planOf) and rules that key clients their own way (Rule.SourceCriterion,
// ownCall). A login rule keyed by IP while the top level keys by API key
// gives a client that rotates API keys nothing: its login bucket is its
// address's.

import (
	"math/rand"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// decide charges the request's buckets into decision d: in Redis (under
// the client's key, or one of its shards' when sharded), or, when Redis is
// unavailable, in the local fallback (failure policy: see fallback.go). A
// refusal still in force is answered from the deny cache, and one from
// Redis is remembered there. It returns decidedUnavailable when Redis is
// unavailable and a policy fails closed, and decidedAnswered when rw (not
// nil) has had the cached refusal's prepared answer.
func decide(t *Tollgate, set *policySet, req *http.Request, rw http.ResponseWriter, d []int64) int {
	v := req.Header[t.conf.Source.Header]
	if !t.conf.ByHeader || len(v) == 0 || v[0] == "" || set.capped {
		return decideAny(t, set, req, rw, d)
	}
	key := bucket.HashKey(t.conf.HeaderTag + v[0]) // ClientKey(class, "h:"+v[0])
	if set.lease != nil {
		return decideLeased(t, set, key, rw, d)
	}
	r := notDenied
	if atomic.LoadInt64(&set.denied.n) != 0 {
		if r = refuseCached(set.denied, key, rw); r == refused {
			return decidedAnswered
		}
	}
	return decideKey(t, set, key, r, rw, d)
}

// decideKey is decide for the client key of a header identity, whose
// refusal in the deny cache is r (refuseCached's notDenied or inForce).
func decideKey(t *Tollgate, set *policySet, key string, r int, rw http.ResponseWriter, d []int64) int {
	if r == inForce && set.denied.lookup(key, d) {
		if t.notes != nil {
			noteRegion(t.notes, set.ps, key, d, true)
		} else if refuseCached(set.denied, key, rw) == refused { // the answer lookup prepared (or found)
			return decidedAnswered
		}
		return decidedCache
	}
	cmd := set.cmd
	if set.quotas {
		cmd = quotaCall(set).cmd
	}
	if redisCheck(t.be, cmd, key, d, &t.conf.Redis, t.hb) != nil {
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
func decideAny(t *Tollgate, set *policySet, req *http.Request, rw http.ResponseWriter, d []int64) int {
	key := bucket.ClientKey(t.conf.Class, identity(&t.conf.Source, req))
	if set.lease != nil { // never sharded, never keyed by rules their own way
		return decideLeased(t, set, key, rw, d)
	}
	rkey := key
	if t.conf.Shards > 1 {
		rkey = shardKey(t.conf, key)
	}
	call := rkey // the keys as the call writes them
	if set.ownKeys {
		if set.groups != nil {
			return decideGroups(t, set, req, d)
		}
		call = ownCall(t, set, req, rkey)
	}
	if atomic.LoadInt64(&set.denied.n) != 0 {
		if r := refuseCached(set.denied, call, rw); r == refused {
			return decidedAnswered
		} else if r == inForce && set.denied.lookup(call, d) {
			if t.notes != nil && !set.ownKeys {
				noteRegion(t.notes, set.ps, rkey, d, true)
			}
			return decidedCache
		}
	}
	cmd := set.cmd
	if set.quotas {
		cmd = quotaCall(set).cmd
	}
	if set.capped {
		return callCapped(t, set, req, rkey, call, capCall(set, capKeysOf(t, set, req, rkey), newMember()), cmd, d)
	}
	if redisCheck(t.be, cmd, call, d, &t.conf.Redis, t.hb) != nil {
		if set.ownKeys {
			return fallbackOwn(t, set, req, key, d)
		}
		return fallback(t, set, key, d)
	}
	if t.notes != nil && !set.ownKeys && (d[0] != 1 || d[1] == 0 || len(set.ps) > 1) {
		noteRegion(t.notes, set.ps, rkey, d, false) // before scaleRemaining: a shard's own tokens
	}
	if t.conf.Shards > 1 {
		scaleRemaining(set, d, t.conf.Shards)
	}
	if d[0] != 1 {
		set.denied.remember(call, d)
	}
	return decidedRedis
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
	// The slot of two of the key's hash characters (ClientKey: "tg{" and
	// base64): no lock, no map. Keys that share a slot look hotter
	// together: at worst an ask more.
	i := int(key[3]&63)<<6 | int(key[4]&63)
	seen := ls.seen
	if now-atomic.SwapInt64(&seen.at[i], now) > ls.gap {
		atomic.StoreInt64(&seen.streak[i], 0)
	} else if atomic.AddInt64(&seen.streak[i], 1) >= ls.hot {
		return askLease(t, set, key, now, d)
	}
	if redisCheck(t.be, set.cmd, key, d, &t.conf.Redis, t.hb) != nil {
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
		if redisCheck(t.be, set.cmd, key, d, &t.conf.Redis, t.hb) != nil {
			return fallback(t, set, key, d)
		}
		return leaseRefused(set, key, d)
	}
	sent := now
	n := len(d)
	ld := make([]int64, n+2)
	err := redisCheck(t.be, ls.asking(replicasSeen(t.hb, t.conf.Replicas, sent)), key, ld, &t.conf.Redis, t.hb)
	granted := int64(0)
	if err == nil {
		copy(d, ld[:n])
		if d[0] == 1 && ld[n] <= ls.shape.Max {
			granted = ld[n] // more than asked is no reply of ours: none taken
		}
	}
	ls.table.granted(k, ls, key, granted, sent+ls.shape.TTL, strconv.FormatInt(ld[n+1], 10), d)
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
		atomic.StoreInt64(&ls.seen.at[int(key[3]&63)<<6|int(key[4]&63)], now+4*ls.shape.TTL-ls.gap)
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

// scaleRemaining turns a shard's remaining tokens into the client's
// estimate: shards x the shard's (all shards are alike on average), for
// every policy but a rule keyed its own way (never sharded).
func scaleRemaining(set *policySet, d []int64, shards int64) {
	for i, p := range set.ps {
		if p.Source == nil {
			d[1+3*i] *= shards
		}
	}
}

// ownCall returns the keys of a call over set, whose rules key clients
// their own way, written as one string (policySet.joints): key for the
// policies keyed as the top level, the rule's own identity's for the
// others (unsharded), so that they are all charged in one script, all or
// nothing (decideAny).
func ownCall(t *Tollgate, set *policySet, req *http.Request, key string) string {
	keys := clientKeys(t, set, req, key)
	call := keys[0]
	for i, j := range set.joints {
		call += j + keys[i+1]
	}
	return call
}

// decideGroups is decideAny in a Redis Cluster, for a set whose rules key
// clients their own way: each group is charged in a script of its own,
// every group every time, and the request passes when every group admits
// it. So a request one group refuses still took its
// tokens from the groups that admitted it: the all-or-nothing of one
// script holds within a group, not across identities. It returns the least
// global decision (local, then cache, then redis), or decidedUnavailable
// when an enforcing group fails closed. A shadow group that fails closed
// is a shadow refusal (its wait: the probe interval), so that the
// enforcing groups, decided and charged on their own, decide the request.
// In a refusal, a group that admitted shows no wait (as a bucket that fits
// does in one script's refusal): only the refusing policies name one.
func decideGroups(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	how := decidedRedis
	unavailable := false
	d[0] = 1
	admittedBy := make([]bool, len(set.groups))
	for gi, g := range set.groups {
		gd := make([]int64, g.decisionLen)
		ghow := decideAny(t, g, req, nil, gd)
		if ghow == decidedUnavailable {
			if !g.shadow {
				unavailable = true
				continue
			}
			gd[0] = 0
			for k := range g.ps {
				gd[1+3*k], gd[2+3*k], gd[3+3*k] = 0, t.conf.Redis.ProbeNS/1e6, t.conf.Redis.ProbeNS/1e6
			}
			ghow = decidedLocal
		}
		if ghow == decidedLocal || ghow == decidedCache && how == decidedRedis {
			how = ghow
		}
		if gd[0] != 1 {
			d[0] = 0
		}
		admittedBy[gi] = gd[0] == 1
		for k, i := range set.groupPos[gi] {
			copy(d[1+3*i:4+3*i], gd[1+3*k:4+3*k])
		}
	}
	if d[0] != 1 {
		for gi := range set.groups {
			if admittedBy[gi] {
				for _, i := range set.groupPos[gi] {
					d[2+3*i] = 0
				}
			}
		}
	}
	if unavailable {
		return decidedUnavailable
	}
	return how
}

// shardKey returns the key of one of the client's sub-buckets, picked at
// random: the shard number, fixed width, inside the hash tag, so that
// shards spread over Redis Cluster slots (tg{tag:07}).
func shardKey(s *config.Settings, key string) string {
	n := strconv.Itoa(rand.Intn(int(s.Shards)))
	for len(n) < s.Digits {
		n = "0" + n
	}
	return key[:len(key)-1] + ":" + n + "}"
}

// capKeysOf returns each policy's key for a request over set (a set with
// a cap) of client key: a class cap's class key, a rule keyed its own
// way its own client key, else key. A cap's slots are its key and its
// suffix.
func capKeysOf(t *Tollgate, set *policySet, req *http.Request, key string) []string {
	var keys []string
	if set.ownKeys {
		keys = clientKeys(t, set, req, key)
	} else {
		keys = make([]string, len(set.ps))
		for i := range keys {
			keys[i] = key
		}
	}
	for i, p := range set.ps {
		if p.Cap != nil && p.Cap.Class != "" {
			keys[i] = p.Cap.Class
		}
	}
	return keys
}

// callCapped is the Redis call over set, a set with a cap, of the take's
// call hc (capCall; key: the client key, call: the deny cache's key,
// cmd: the set's call now). A call that may have reached Redis and
// failed has its slots given back.
func callCapped(t *Tollgate, set *policySet, req *http.Request, key, call, hc string, cmd *redis.Command, d []int64) int {
	if err := redisCheck(t.be, cmd, hc, d, &t.conf.Redis, t.hb); err != nil {
		if tookMaybe(err) {
			returnSlots(t, set, hc) // the script may run yet: a tombstone refuses it
		}
		if set.ownKeys {
			return fallbackOwn(t, set, req, key, d)
		}
		return fallback(t, set, key, d)
	}
	if d[0] != 1 {
		set.denied.remember(call, d)
	}
	return decidedRedis
}

// tookMaybe reports whether a check that failed with err may have run in
// Redis (its call was written).
func tookMaybe(err error) bool {
	return err != errBreakerOpen && err != redis.ErrDialFailed && err != redis.ErrNoRoute && err != redis.ErrQueueFull
}

// noteRegion notes, for the exchange, the buckets of policies ps for
// client key that pressed in decision d: refused, or emptied (no whole
// token left, whatever the region's share of the burst); cached: the
// deny cache refused it (regions.Notes.Note). Rules keyed their own way
// and policies that fail closed hold the static share, and are not noted.
func noteRegion(n *regions.Notes, ps []*config.Policy, key string, d []int64, cached bool) {
	for i, p := range ps {
		if p.RegionPPM <= 0 || (d[2+3*i] == 0 && d[1+3*i] > 0) {
			continue
		}
		n.Note(key+p.KeySuffix, int64(p.Shard.Cost), cached)
	}
}
