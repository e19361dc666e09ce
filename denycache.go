package tollgate

// The in-process deny cache. A refusal from Redis names, per policy, the wait
// until a request of this cost could pass. Buckets only refill with time,
// and other pods can only take more, so until the longest of those waits
// has passed Redis would refuse the same request again: the pod refuses it
// itself, with the same 429 and headers (the waits counted down on the pod's
// monotonic clock, internal/clock, so that a wall clock stepped back keeps no
// refusal longer), and no Redis call. A flood from a client already over its limit
// then costs Redis nothing.
//
// One cache per policy set, i.e. per middleware instance and combination of
// matching rules: a reload builds new instances, so a cached refusal never
// outlives the limits that produced it. Only Redis's refusals are cached
// (not the local fallback's).

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

// quotaRecheckMS bounds how long a quota's refusal is remembered, ms: a
// counter reset or lost in Redis takes effect on every pod within it.
const quotaRecheckMS = 5000

// maxDenials bounds one cache: at most this many clients are remembered;
// past it, expired entries are dropped, then arbitrary ones.
const maxDenials = 10000

// denyCache maps client keys to their last refusal. The zero value is not
// usable; use newDenyCache. Safe for concurrent use.
type denyCache struct {
	now    func() int64 // monotonic ns; nil: the process's (internal/clock); tests inject their own
	max    int
	n      int64      // len(entries), read without the lock by the hot path
	shadow []bool     // by policy: shadow (nil: none is); see remember
	capped []bool     // by policy: a concurrency cap, whose refusal is not kept (nil: none is)
	quota  []bool     // by policy: a calendar quota, whose refusal is kept at most quotaRecheck (nil: none is)
	latest int64      // the end of the latest refusal remembered, monotonic ns (atomic): see denyWatch
	watch  *denyWatch // counts its entries for the metrics (the registry's); nil: none
	// prepare, when not nil, prepares the answer to a refusal as it stands
	// (lookup keeps it; refuseCached writes it): set by the middleware whose
	// requests this cache answers.
	prepare func(d []int64) *refusal
	// showsFull: its answers show the times until full (legacy and draft
	// 07 headers' reset), so they change when those tick too (keep).
	showsFull bool
	// answers holds the prepared answers of a one-policy cache that shows
	// no time until full, by what they show (answerKey): every client
	// refused with the same tokens left and wait in seconds gets the same
	// answer, prepared once (guarded by mu; at most maxAnswers).
	answers map[int64]*refusal

	mu      sync.Mutex // guards entries and last
	entries map[string]*denial
	// last is the latest now read, monotonic ns: the cache's time never
	// runs backwards, so the waits it names only count down (even when a
	// caller's now, read before the lock, is a little behind another's).
	last int64
}

// denial is one refusal: its decision (waits as of at) and when it ends;
// ans, when not nil, is its answer while none of the seconds it names has
// changed (before ansUntil).
type denial struct {
	at, until int64 // monotonic ns
	d         []int64
	ans       *refusal
	ansUntil  int64
}

// refusal is a prepared answer to a refusal from the cache: its headers
// (keys[i]: vals[i], assigned as they are), its problem body and the
// counter it is counted in. What a flood of refused requests costs is a
// map lookup and this written: nothing is built per request, so the
// refusal path allocates little beyond its two frames (under Yaegi, every
// value a path computes is part of its frames).
type refusal struct {
	keys    []string
	vals    [][]string
	body    []byte
	counted *int64
}

// Results of refuseCached.
const (
	notDenied = iota // no refusal cached for the key
	inForce          // one is, and lookup has it
	refused          // its prepared answer was written
)

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]*denial)}
}

// mono is the cache's clock, monotonic ns: now when a test set it, else
// the process's (internal/clock).
func (c *denyCache) mono() int64 {
	if c.now != nil {
		return c.now()
	}
	return clock.Mono()
}

// lookup fills d with the refusal cached for key, its waits counted down to
// now, and reports whether there is one still in force.
func (c *denyCache) lookup(key string, d []int64) bool {
	now := c.mono()
	c.mu.Lock()
	if now < c.last {
		now = c.last // see last
	}
	c.last = now
	e := c.entries[key]
	if e == nil {
		c.mu.Unlock()
		return false
	}
	if now >= e.until {
		delete(c.entries, key)
		atomic.StoreInt64(&c.n, int64(len(c.entries)))
		c.mu.Unlock()
		return false
	}
	copy(d, e.d)
	at := e.at
	c.mu.Unlock()
	elapsed := (now - at) / int64(time.Millisecond)
	for i := 2; i+1 < len(d); i += 3 {
		d[i] = countDown(d[i], elapsed)     // wait
		d[i+1] = countDown(d[i+1], elapsed) // until full
	}
	if c.prepare != nil {
		c.keep(e, d)
	}
	return true
}

// refuseCached writes to rw (when not nil) the prepared answer to key's
// refusal in c when it is still in force and up to date: the refusal
// path's one call (a plain function: under Yaegi a method costs more).
// Otherwise it reports whether c.lookup has a refusal for key.
func refuseCached(c *denyCache, key string, rw http.ResponseWriter) int {
	if rw == nil || c.prepare == nil {
		return inForce // no prepared answers: lookup alone looks (one lock, one map get)
	}
	now := int64(time.Since(processStart)) + monoOrigin // c.mono(), inlined
	if c.now != nil {
		now = c.now()
	}
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.mu.Unlock()
		return notDenied
	}
	if now < c.last {
		now = c.last // see last: a check that waited for the lock read its clock before another's
	}
	if now >= e.ansUntil { // ansUntil is 0 while there is no answer
		c.mu.Unlock()
		return inForce
	}
	c.last = now
	a := e.ans
	c.mu.Unlock()
	h := rw.Header()
	for i, k := range a.keys {
		h[k] = a.vals[i]
	}
	rw.WriteHeader(http.StatusTooManyRequests)
	_, _ = rw.Write(a.body)
	atomic.AddInt64(a.counted, 1)
	return refused
}

// keep prepares e's answer as decision d shows it (counted down to now)
// and keeps it until one of the seconds it names would change: the next
// time a wait (or a time until full, when shown), in whole seconds rounded
// up, ticks down (lookup's count down, at e.at's whole elapsed ms). With
// several policies, also until a wait reaches countDown's floor (1 ms):
// equal waits there may change which policy counts it (decider) and which
// the legacy headers describe.
func (c *denyCache) keep(e *denial, d []int64) {
	a := c.answerFor(d)
	until := e.until
	for i := 2; i+1 < len(d); i += 3 { // each policy's wait, then its time until full
		for j, m := range d[i : i+2] {
			left := int64(-1) // ms left when what the answer shows of m changes; -1: not before the refusal ends
			switch {
			case j == 1 && !c.showsFull:
			case m > 1000: // a tick of the seconds shown
				left = ((m+999)/1000 - 1) * 1000
			case j == 0 && m > 1 && len(d) > 4: // several policies' waits: countDown's floor
				left = 1
			}
			if t := e.at + (e.d[i+j]-left)*int64(time.Millisecond); left >= 0 && t < until {
				until = t
			}
		}
	}
	c.mu.Lock()
	e.ans = a
	e.ansUntil = until
	c.mu.Unlock()
}

// maxAnswers bounds a cache's shared answers: a wait of up to an hour
// in seconds, for a few counts of tokens left.
const maxAnswers = 4096

// answerFor returns the prepared answer to refusal d: one already
// prepared for the same answer (answerKey), or one prepared now.
func (c *denyCache) answerFor(d []int64) *refusal {
	k := answerKey(c, d)
	if k < 0 {
		return c.prepare(d)
	}
	c.mu.Lock()
	a := c.answers[k]
	c.mu.Unlock()
	if a != nil {
		return a
	}
	a = c.prepare(d)
	c.mu.Lock()
	if c.answers == nil || len(c.answers) >= maxAnswers {
		c.answers = make(map[int64]*refusal)
	}
	c.answers[k] = a
	c.mu.Unlock()
	return a
}

// answerKey names what the answer to refusal d shows, when that is all it
// depends on: one policy, no time until full shown, its tokens left and
// its wait in whole seconds (RateLimit's r and t, Retry-After and the
// problem's retry). -1: the answer is d's alone (several policies, whose
// waits in ms decide which one the answer names; a time until full
// shown; a quota, whose window's length the policy header names; a cap).
func answerKey(c *denyCache, d []int64) int64 {
	if len(d) != 4 || c.showsFull || c.quota != nil || c.capped != nil || d[1] < 0 || d[1] >= 1<<20 || d[2] < 0 || d[2] >= 1<<40 {
		return -1
	}
	return d[1]<<32 | ceilSecs(d[2])
}

// forget drops key's refusal, or (key "") every refusal: an operator
// reset the key (admin.go).
func (c *denyCache) forget(key string) {
	c.mu.Lock()
	if key == "" {
		c.entries = make(map[string]*denial)
	} else {
		delete(c.entries, key)
	}
	atomic.StoreInt64(&c.n, int64(len(c.entries)))
	c.mu.Unlock()
}

// countDown subtracts elapsed ms from a positive duration, keeping it
// positive: a refusal in force always names a wait.
func countDown(ms, elapsed int64) int64 {
	if ms <= 0 {
		return ms
	}
	if ms -= elapsed; ms < 1 {
		return 1
	}
	return ms
}

// remember caches refusal d for key until its longest wait ends: the
// longest of the enforcing policies' that refused, when one did (a shadow
// policy's longer wait would keep refusing once they admit: answer.go);
// else the shadow policies'.
func (c *denyCache) remember(key string, d []int64) {
	var wait, shadowWait int64
	for i := 2; i < len(d); i += 3 {
		if c.capped != nil && c.capped[(i-2)/3] {
			continue // a slot may free at any moment
		}
		w := d[i]
		if c.quota != nil && c.quota[(i-2)/3] && w > quotaRecheckMS {
			// A quota's counter may be reset (an operator) or lost (a
			// Redis restarted without persistence) before its window
			// ends: Redis is asked again within quotaRecheckMS (the
			// answers meanwhile name the whole wait).
			w = quotaRecheckMS
		}
		if c.shadow != nil && c.shadow[(i-2)/3] {
			if w > shadowWait {
				shadowWait = w
			}
		} else if w > wait {
			wait = w
		}
	}
	if wait <= 0 {
		wait = shadowWait
	}
	if wait <= 0 {
		return
	}
	kept := append([]int64(nil), d...)
	for i, capped := range c.capped {
		if capped {
			kept[2+3*i] = 0 // not named from the cache: its slot may be free
		}
	}
	now := c.mono()
	c.mu.Lock()
	if now < c.last {
		now = c.last // see last
	}
	c.last = now
	e := &denial{at: now, until: now + wait*int64(time.Millisecond), d: kept}
	if len(c.entries) >= c.max {
		c.evict(now)
	}
	// Watched by the metrics unless it was, with a refusal still in force
	// (an expired cache may have been dropped from the watch: denyWatch).
	watch := len(c.entries) == 0 || atomic.LoadInt64(&c.latest) <= now
	c.entries[key] = e
	atomic.StoreInt64(&c.n, int64(len(c.entries)))
	if e.until > atomic.LoadInt64(&c.latest) {
		atomic.StoreInt64(&c.latest, e.until)
	}
	c.mu.Unlock()
	if watch {
		deniesWatched.watch(c, now) // after the lock: the watch's comes first (entries)
	}
}

// prune drops the refusals no longer in force.
func (c *denyCache) prune() {
	now := c.mono()
	c.mu.Lock()
	if now < c.last {
		now = c.last
	}
	for k, e := range c.entries {
		if now >= e.until {
			delete(c.entries, k)
		}
	}
	atomic.StoreInt64(&c.n, int64(len(c.entries)))
	c.mu.Unlock()
}

// evict drops expired entries, then arbitrary ones until a quarter is
// free. Requires that c.mu is held.
func (c *denyCache) evict(now int64) {
	for k, e := range c.entries {
		if now >= e.until {
			delete(c.entries, k)
		}
	}
	for k := range c.entries {
		if len(c.entries) <= c.max*3/4 {
			break
		}
		delete(c.entries, k)
	}
}

// denyWatch is the deny caches holding entries, for
// tollgate_deny_cache_entries. Safe for concurrent use. (A cache does not
// point to its watch: Yaegi v0.16.1 cannot build a struct type that refers
// back to itself through another's map.)
type denyWatch struct {
	mu     sync.Mutex
	denies map[*denyCache]bool // caches holding entries (denyCache.remember)
}

// deniesWatched is the process's deny caches holding entries.
var deniesWatched = &denyWatch{denies: make(map[*denyCache]bool)}

// watch counts c's entries in tollgate_deny_cache_entries; c calls it
// at now when it takes a refusal while empty or holding only expired ones.
// Caches whose refusals have all expired are dropped from the watch here,
// once it holds pruneWatchedAt (a reload leaves its instances' caches
// behind: they must not be kept), and at each scrape.
func (r *denyWatch) watch(c *denyCache, now int64) {
	r.mu.Lock()
	if len(r.denies) >= pruneWatchedAt {
		for w := range r.denies {
			if atomic.LoadInt64(&w.latest) <= now {
				delete(r.denies, w)
			}
		}
	}
	r.denies[c] = true
	r.mu.Unlock()
}

// pruneWatchedAt is how many deny caches are watched before expired ones
// are looked for (an atomic load each).
const pruneWatchedAt = 8

// entries drops expired refusals from the watched caches and returns
// the entries left; caches left empty stop being watched (they watch
// themselves again on their next refusal). The caches are pruned outside
// the registry's lock.
func (r *denyWatch) entries() int64 {
	r.mu.Lock()
	caches := make([]*denyCache, 0, len(r.denies))
	for c := range r.denies {
		caches = append(caches, c)
	}
	r.mu.Unlock()
	var n int64
	for _, c := range caches {
		c.prune()
		if k := atomic.LoadInt64(&c.n); k > 0 {
			n += k
		} else {
			r.mu.Lock()
			if atomic.LoadInt64(&c.n) == 0 {
				delete(r.denies, c)
			}
			r.mu.Unlock()
		}
	}
	return n
}
