package tollgate

// Leases (Config.Lease): requests a pod admits for a hot client from
// tokens reserved for it in Redis, with no Redis call.
//
// A grant. When Redis admits a request whose client has no lease on this
// pod, the same script call (leaseScript) asks for one: when every bucket
// of the request, after it, still holds 2 x max x the pods counted
// requests' worth, Redis charges max requests more and names them this
// pod's until ttl ends. Near the limit nothing is leased, so refusals stay
// Redis's (or the deny cache's). One ask per client and policy set is out
// at a time; the rest of a burst goes to Redis as before.
//
// Never over the limit. Every token admitted from a lease was charged in
// Redis first, and what leases hold stays out of the bucket while they
// live: bucket key K has a hash K}l, one field per pod and policy set
// ("<tokens> <until>", until on Redis's clock), and every call over a
// leasing middleware's buckets counts the live ones, so the bucket holds
// at most burst less what leases hold; a lease that ended counts as spent
// at its end, so that floor never lifts at once. A client that spent
// little, then bursts, gets its burst and no more: what its pods hold is
// part of it.
//
// Under-admission. A lease's tokens are out of the bucket until it ends,
// spent or not: at most pods x max requests' worth per client, for at most
// ttl (a pod that dies holds them until its ttl ends). What a lease did
// not spend goes back (giveBackScript) in one call per interval, never
// above burst; a lost give-back only under-admits.
//
// The pod's side is one table per Redis backend (leaseTable), bounded,
// shared by every middleware instance on it: a reload with the same
// limits spends the leases the instance before it got.

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// leaseShape is a policy's Config.Lease, compiled.
type leaseShape struct {
	max int64 // requests per lease; 0: none
	ttl int64 // ns
}

const (
	defaultLeaseTTL = time.Second
	maxLeaseTTL     = 10 * time.Second
	minLeaseTTL     = 10 * time.Millisecond
	maxLeaseMax     = 1000000
	// maxLeases bounds one backend's table (leases and asks out): past it,
	// nothing more is asked for.
	maxLeases = 10000
	// giveBackEvery is how often a backend's ended leases go back, in one
	// call (or one per lease in a Cluster, whose keys live on many nodes).
	giveBackEvery = 200 * time.Millisecond
	// giveBackTimeout bounds a give-back call (off any request's path).
	giveBackTimeout = 500 * time.Millisecond
	// maxGiveBacks bounds the leases one give-back call carries.
	maxGiveBacks = 64
	// seenSlots is how many clients' last calls a leased set tells apart
	// (callLeased): 12 bits of their keys' hashes.
	seenSlots = 4096
)

// compileLease validates a Config.Lease (field names it in errors).
func compileLease(field string, l Lease) (leaseShape, error) {
	if l.Max < 0 {
		return leaseShape{}, fmt.Errorf("%s.max: %d is negative", field, l.Max)
	}
	if l.Max > maxLeaseMax {
		return leaseShape{}, fmt.Errorf("%s.max: %d is more than %d", field, l.Max, maxLeaseMax)
	}
	ttl := defaultLeaseTTL
	if strings.TrimSpace(l.TTL) != "" {
		d, err := positiveDuration(field+".ttl", l.TTL)
		if err != nil {
			return leaseShape{}, err
		}
		if d > maxLeaseTTL {
			return leaseShape{}, fmt.Errorf("%s.ttl: %q is longer than %s", field, l.TTL, maxLeaseTTL)
		}
		if d < minLeaseTTL {
			return leaseShape{}, fmt.Errorf("%s.ttl: %q is shorter than %s (a lease ending before it is used only holds tokens out)", field, l.TTL, minLeaseTTL)
		}
		ttl = d
	}
	return leaseShape{max: l.Max, ttl: int64(ttl)}, nil
}

// hotGap is the longest gap between a client's calls on a pod at which
// a lease of shape is worth asking for: at that rate the pod spends a
// quarter of it within its ttl.
func hotGap(shape leaseShape) int64 {
	return 4 * shape.ttl / shape.max
}

// leasing is what a leased policy set needs: its lease shape, its name in
// the backend's table and in Redis, and its asking calls.
type leasing struct {
	shape leaseShape
	gap   int64 // ns: a client whose calls come closer than this is hot (ask)
	table *leaseTable
	tag   string   // the set's calls' shape: its leases' prefix in table
	field string   // this pod's field in the sets' lease hashes
	costs []int64  // each bucket's cost: a lease's requests in its tokens
	back  []string // each bucket's suffix, interval and cost, for give-backs
	parts cmdParts // the call's shape, for the asking commands
	mu    sync.Mutex
	asks  map[int64]*redis.Command // asking calls by pods counted
	seen  *seenTimes               // when a call for a client key last went out (callLeased)
}

// seenTimes holds when a call for a client key last went out, monotonic
// ns, by a slot of the key's hash (callLeased). (A struct: Yaegi takes the
// address of an array's element in a struct's field, not through a
// pointer to the array.)
type seenTimes struct {
	at [seenSlots]int64
}

// lease is one client's lease on this pod (or an ask for one out).
type lease struct {
	left   int64   // requests it still admits
	end    int64   // monotonic ns: when its ttl ends (counted from the ask's send)
	d      []int64 // Redis's decision with the grant
	tail   string  // ";t=" and its first wait in seconds: the hot path's RateLimit ends so
	until  string  // its end on Redis's clock: the give-back names it
	asking bool    // a call asking for a lease is out
	// answered is closed once that call is answered (granted): a request
	// Redis refused meanwhile waits for it (leaseRefused).
	answered chan struct{}
	key      string
	// For its give-back, its set's (not the set itself: under Yaegi a
	// type may not lead back to itself through another's map).
	field string
	back  []string
}

// leaseTable is a backend's leases, by set tag and client key. Safe for
// concurrent use.
type leaseTable struct {
	rc      *redis.Client // the backend's (not the backend: see lease)
	lost    *int64        // the backend's giveBacksLost
	id      string        // this pod's name in Redis's lease hashes: the instance and the table
	n       int64         // len(leases), read without the lock by the hot path
	mu      sync.Mutex
	leases  map[string]*lease
	ended   []*lease // ended with requests left: to give back
	running bool     // giveBackLoop runs
}

// leaseTables counts the tables made: each names its leases in Redis
// apart from the others' (two backends to one Redis in one process).
var leaseTables int64

// leasesOf returns b's lease table, made on first use.
func leasesOf(b *backend) *leaseTable {
	b.leasesMu.Lock()
	defer b.leasesMu.Unlock()
	if b.leases == nil {
		id := instanceID + "." + strconv.FormatInt(atomic.AddInt64(&leaseTables, 1), 10)
		b.leases = &leaseTable{rc: b.rc, lost: &b.giveBacksLost, id: id, leases: make(map[string]*lease)}
	}
	return b.leases
}

// withLeases has every call over s (and over its enforcing part and its
// Cluster groups) honour what leases hold, and s lease when its top-level
// or plan policy does and nothing rules it out: a policy that fails
// closed, rules keyed their own way. Returns s.
func (t *Tollgate) withLeases(s *policySet) *policySet {
	if !t.set.leases || s == nil {
		return s
	}
	honour(s, t.set.keyLen)
	shape := s.ps[0].lease
	if shape.max == 0 || s.failClosed || s.ownKeys {
		return s
	}
	parts := commandParts(s.ps, t.set.keyLen)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parts.suffixes, "\x00") + "\x00" + strings.Join(parts.args, " ")))
	tag := strconv.FormatUint(h.Sum64(), 36)
	tb := leasesOf(t.be)
	ls := &leasing{shape: shape, gap: hotGap(shape), table: tb, tag: tag + "/", field: tb.id + "/" + tag, parts: parts, asks: map[int64]*redis.Command{}, seen: &seenTimes{}}
	for i, p := range s.ps {
		ls.costs = append(ls.costs, int64(p.lim.cost))
		ls.back = append(ls.back, p.keySuffix, parts.args[3*i], parts.args[3*i+2])
	}
	s.lease = ls
	return s
}

// honour replaces the calls of s, its enforcing part and its groups with
// leaseScript's that ask for nothing.
func honour(s *policySet, keyLen int) {
	cmd := leaseCommand(commandParts(s.ps, keyLen), "-", 0, 0, 1, false)
	if s.ownKeys {
		cmd = cmd.Whole()
	}
	s.cmd = cmd
	if s.enforce != nil {
		honour(s.enforce, keyLen)
	}
	for _, g := range s.groups {
		honour(g, keyLen)
	}
}

// asking returns the call that asks for a lease for pods pods counted.
func (ls *leasing) asking(pods int64) *redis.Command {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	cmd := ls.asks[pods]
	if cmd == nil {
		if len(ls.asks) >= 16 {
			ls.asks = map[int64]*redis.Command{} // pods counts seldom vary: a bound, not a cache policy
		}
		cmd = leaseCommand(ls.parts, ls.field, ls.shape.max, ls.shape.ttl/1000, pods, true)
		ls.asks[pods] = cmd
	}
	return cmd
}

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

// ask reports whether a hot client's call (key k) may ask for a lease:
// none is out for it, and the table has room. It then marks one out
// (answered: granted).
func (tb *leaseTable) ask(k string) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	e := tb.leases[k]
	if e != nil || len(tb.leases) >= maxLeases {
		return false
	}
	tb.leases[k] = &lease{asking: true, answered: make(chan struct{})}
	atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	return true
}

// granted ends the ask out for k: with a lease of left requests (none when
// 0) until end (monotonic ns) and until (Redis's clock), decision d.
func (tb *leaseTable) granted(k string, ls *leasing, key string, left, end int64, until string, d []int64) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	e := tb.leases[k]
	if e == nil || !e.asking {
		return
	}
	close(e.answered)
	if left <= 0 {
		delete(tb.leases, k)
		atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
		return
	}
	e.asking = false
	e.left, e.end, e.until, e.key, e.field, e.back = left, end, until, key, ls.field, ls.back
	e.d = append([]int64(nil), d...)
	e.tail = ";t=" + strconv.FormatInt((d[2]+999)/1000, 10)
	if !tb.running {
		tb.running = true
		go tb.giveBackLoop()
	}
}

// end removes lease e (at k) and queues what it has left to go back (past
// maxLeases waiting, a give-back lost). Requires tb.mu held.
func (tb *leaseTable) end(k string, e *lease) {
	delete(tb.leases, k)
	atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	if e.left > 0 && len(tb.ended) < maxLeases {
		tb.ended = append(tb.ended, e)
	} else if e.left > 0 {
		atomic.AddInt64(tb.lost, 1)
	}
}

// giveBackLoop ends the leases whose ttl is over and gives back what they
// have left, every giveBackEvery, until the table is empty.
func (tb *leaseTable) giveBackLoop() {
	for {
		time.Sleep(giveBackEvery)
		now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
		tb.mu.Lock()
		for k, e := range tb.leases {
			if !e.asking && now >= e.end {
				tb.end(k, e)
			}
		}
		batch := tb.ended
		tb.ended = nil
		if len(tb.leases) == 0 && len(batch) == 0 {
			tb.running = false
			tb.mu.Unlock()
			return
		}
		tb.mu.Unlock()
		tb.giveBack(batch)
	}
}

// giveBack sends batch's give-backs: one call for up to maxGiveBacks
// leases, or one per lease in a Cluster (a call's keys share a slot).
// A failed give-back is dropped: it only under-admits.
func (tb *leaseTable) giveBack(batch []*lease) {
	cluster := tb.rc.Mode() == redis.Cluster
	for len(batch) > 0 {
		n := maxGiveBacks
		if cluster {
			n = 1
		}
		if n > len(batch) {
			n = len(batch)
		}
		cmd, key := giveBackCommand(batch[:n], cluster)
		d := make([]int64, 1)
		if err := tb.rc.Check(cmd, key, d, giveBackTimeout); err != nil {
			atomic.AddInt64(tb.lost, int64(n))
		}
		batch = batch[n:]
	}
}

// giveBackCommand is giveBackScript's call for leases, and the key it is
// routed by: the client's key in a Cluster (one lease), else "" with
// every key written whole.
func giveBackCommand(leases []*lease, routed bool) (*redis.Command, string) {
	var lens []int
	var keys, args []string
	for _, e := range leases {
		b := e.back
		args = append(args, strconv.Itoa(len(b)/3), e.field, strconv.FormatInt(e.left, 10), e.until)
		for i := 0; i < len(b); i += 3 {
			if routed {
				lens = append(lens, len(e.key))
				keys = append(keys, b[i])
			} else {
				lens = append(lens, 0)
				keys = append(keys, e.key+b[i])
			}
			args = append(args, b[i+1], b[i+2])
		}
	}
	key := ""
	if routed {
		key = leases[0].key
	}
	return redis.NewCommand(giveBack, lens, keys, args, nil), key
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
// cached): a client that is hot on the pod (its previous call less than
// the set's gap ago) asks for a lease (askLease); any other is one
// check, as without leases, and one map write (ServeHTTP's lukewarm
// path: the 1,000-key load's).
func callLeased(t *Tollgate, set *policySet, key string, d []int64) int {
	ls := set.lease
	now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	// The slot of two of the key's hash characters (clientKey: "tg{" and
	// base64): one atomic swap, no lock, no map. Keys that share a slot
	// look hotter together: at worst an ask more.
	last := atomic.SwapInt64(&ls.seen.at[int(key[3]&63)<<6|int(key[4]&63)], now)
	if now-last <= ls.gap {
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

// leaseScript is bucketScript (bucket.go) over buckets that leases hold
// tokens of, and that may grant one.
//
//	KEYS, ARGV[1..3n]  as bucketScript's (no regions: leases are off there)
//	ARGV[3n+1]         this pod's field in the lease hashes (KEYS[i]..'}l')
//	ARGV[3n+2]         max: requests per lease
//	ARGV[3n+3]         ttl, µs
//	ARGV[3n+4]         pods counted
//	ARGV[3n+5]         1: ask for a lease (the reply then ends with the
//	                   requests granted and the lease's end, µs since
//	                   epochUS); 0: ask for none
//
// Each bucket holds at most burst less what live leases hold (the hash's
// fields: "<tokens> <until>"): the TAT is raised to that floor before the
// decision, and stored raised when charged. A lease that ended (its
// until passed, or this pod's own when it asks again: its lease has ended
// on the pod) is counted as spent at its end at the latest, with the
// leases live then: the floor it kept does not lift at once (a client
// that spent its lease, then bursts, gets what a bucket would have given
// it, not a bucket that refilled behind the lease); that floor is stored
// and the field dropped. Malformed fields, and fields ending further ahead
// than a lease lasts (a clock stepped back), are dropped. The hash lives
// a ttl and a full refill, so an ended field is still there to count. A grant: when the request passes and every bucket, after it,
// holds at least 2 x max x pods requests' worth, max requests more are
// charged and the pod's field records them.
const leaseScript = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local n = #KEYS
local field, lmax, ttl, pods = ARGV[3*n+1], tonumber(ARGV[3*n+2]), tonumber(ARGV[3*n+3]), tonumber(ARGV[3*n+4])
local ask = ARGV[3*n+5] == '1'
local iv, burst, cost, cap, slack, s, clamped = {}, {}, {}, {}, {}, {}, {}
local ok = 1
for i = 1, n do
  iv[i] = tonumber(ARGV[3*i-2])
  burst[i] = tonumber(ARGV[3*i-1])
  cost[i] = tonumber(ARGV[3*i])
  cap[i] = iv[i] * burst[i]
  slack[i] = 1 + burst[i] / 64
  local lk = KEYS[i] .. '}l'
  local held, ended, last = 0, 0, 0
  local hs = redis.call('HGETALL', lk)
  for j = 1, #hs, 2 do
    local tk, u = string.match(hs[j+1], '^(%d+) (%d+)$')
    tk, u = tonumber(tk), tonumber(u)
    if not tk or not u or u > now + 20000000 then
      redis.call('HDEL', lk, hs[j])
    elseif u > now and not (ask and hs[j] == field) then
      held = held + tk
    else
      ended = ended + tk
      if u > now then u = now end
      if u > last then last = u end
      redis.call('HDEL', lk, hs[j])
    end
  end
  local v = tonumber(redis.call('GET', KEYS[i]))
  local tat = now
  if v then tat = v / 64 end
  clamped[i] = false
  if tat < now then tat = now elseif tat > now + cap[i] then tat = now + cap[i]; clamped[i] = true end
  local floor = now + held * iv[i]
  if ended > 0 and last + (ended + held) * iv[i] > floor then floor = last + (ended + held) * iv[i] end
  if floor > now + cap[i] then floor = now + cap[i] end
  if tat < floor then
    tat = floor
    if ended > 0 then clamped[i] = true end
  end
  s[i] = tat
  if tat + iv[i] * cost[i] - now > cap[i] + slack[i] then ok = 0 end
end
local k = 0
if ok == 1 and ask and lmax > 0 then
  k = lmax
  for i = 1, n do
    if (now + cap[i] - s[i]) / iv[i] - cost[i] < 2 * lmax * pods * cost[i] then k = 0 end
  end
end
local untl = math.floor(now + ttl)
local out = {}
for i = 1, n do
  local tat = s[i]
  if ok == 1 then tat = tat + iv[i] * cost[i] * (1 + k) end
  if ok == 1 or clamped[i] then
    redis.call('SET', KEYS[i], string.format('%.0f', math.floor(tat * 64 + 0.5)), 'PX', math.min(maxms, math.max(1, math.ceil((tat - now) / 1000))))
  end
  if k > 0 then
    local lk = KEYS[i] .. '}l'
    redis.call('HSET', lk, field, string.format('%.0f %.0f', k * cost[i], untl))
    local ms = math.min(maxms, math.ceil((ttl + cap[i]) / 1000) + 1)
    if redis.call('PTTL', lk) < ms then redis.call('PEXPIRE', lk, ms) end
  end
  local r = math.floor((now + cap[i] - tat + slack[i]) / iv[i])
  if r < 0 then r = 0 elseif r > burst[i] then r = burst[i] end
  local w = tat + iv[i] * cost[i] - now - cap[i]
  if w <= slack[i] then w = 0 end
  local f = tat - now
  if f < 0 then f = 0 end
  out[i] = string.format('%d %d %d', r, math.min(maxms, math.ceil((w - 0.001) / 1000)), math.min(maxms, math.ceil((f - 0.001) / 1000)))
end
local tail = ''
if ask then tail = ' ' .. k .. ' ' .. string.format('%.0f', untl) end
return redis.status_reply(ok .. ' ' .. table.concat(out, ' ') .. tail)
`

// giveBackScript gives back what ended leases did not spend.
//
//	ARGV, per lease: its buckets (n), its field, the requests it has left
//	      (r), its end as granted (until); then per bucket its interval and
//	      cost
//	KEYS  each lease's bucket keys, in order
//
// The lease's field, when it is still this grant's (a later grant
// replaced it otherwise), is counted as spent at its end (as leaseScript
// counts an ended field) and dropped; then each bucket's TAT moves back by
// r requests' worth, no lower than what the other live leases hold nor
// than now (full: the key goes).
const giveBackScript = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local a, k = 1, 1
while a + 3 <= #ARGV do
  local n, field, r, untl = tonumber(ARGV[a]), ARGV[a+1], tonumber(ARGV[a+2]), ARGV[a+3]
  a = a + 4
  for i = 1, n do
    local key, iv, cost = KEYS[k], tonumber(ARGV[a]), tonumber(ARGV[a+1])
    k = k + 1
    a = a + 2
    local lk = key .. '}l'
    local held, mine = 0, 0
    local hs = redis.call('HGETALL', lk)
    for j = 1, #hs, 2 do
      local tk, u = string.match(hs[j+1], '^(%d+) (%d+)$')
      if hs[j] == field and u == untl and tonumber(tk) then
        mine = tonumber(tk)
        redis.call('HDEL', lk, field)
      elseif tonumber(tk) and tonumber(u) and tonumber(u) > now and tonumber(u) <= now + 20000000 then
        held = held + tonumber(tk)
      end
    end
    local v = tonumber(redis.call('GET', key))
    if (v or mine > 0) and (r > 0 or mine > 0) then
      local tat = now
      if v then tat = v / 64 end
      if mine > 0 then
        local e = tonumber(untl)
        if e > now then e = now end
        if tat < e + (mine + held) * iv then tat = e + (mine + held) * iv end
      end
      tat = tat - r * cost * iv
      local floor = now + held * iv
      if tat < floor then tat = floor end
      if tat > now then
        redis.call('SET', key, string.format('%.0f', math.floor(tat * 64 + 0.5)), 'PX', math.min(maxms, math.max(1, math.ceil((tat - now) / 1000))))
      else
        redis.call('DEL', key)
      end
    end
  end
end
return redis.status_reply('1')
`
