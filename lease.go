package tollgate

// Leases (Config.Lease): requests a pod admits for a hot client from
// tokens reserved for it in Redis, with no Redis call.
//
// A grant. When Redis admits a request whose client has no lease on this
// pod, the same script call (LeaseScript) asks for one: when every bucket
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
// not spend goes back (LeaseReturnScript) in one call per interval, never
// above burst; a lost give-back only under-admits.
//
// The pod's side is one table per Redis backend (leaseTable), bounded,
// shared by every middleware instance on it: a reload with the same
// limits spends the leases the instance before it got.

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

const (
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
	// hotStreak is how many calls in a row, each within the gap of the one
	// before, make a client hot (callLeased): one close pair (two clients'
	// calls sharing a slot, two connections cycling through the same keys)
	// does not.
	hotStreak = 2
)

// hotGap is the longest gap between a client's calls on a pod at which
// a lease of shape is worth asking for: at that rate the pod spends a
// quarter of it within its ttl.
func hotGap(shape config.LeaseShape) int64 {
	return 4 * shape.TTL / shape.Max
}

// leasing is what a leased policy set needs: its lease shape, its name in
// the backend's table and in Redis, and its asking calls.
type leasing struct {
	shape config.LeaseShape
	gap   int64 // ns: a client whose calls come closer than this is hot (ask)
	hot   int64 // how many such calls in a row make it hot: hotStreak (tests set 1)
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
// ns, by a slot of the key's hash (callLeased). (Slices: under Yaegi an
// array field's element is reached through a copy of the whole array,
// 32 KB a request here; a pointer to an array's element is refused.)
type seenTimes struct {
	at     []int64 // seenSlots
	streak []int64 // calls in a row within the gap, seenSlots
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
	b.lazyMu.Lock()
	defer b.lazyMu.Unlock()
	if b.leases == nil {
		id := instanceID + "." + strconv.FormatInt(atomic.AddInt64(&leaseTables, 1), 10)
		b.leases = &leaseTable{rc: b.rc, lost: &b.giveBacksLost, id: id, leases: make(map[string]*lease)}
	}
	return b.leases
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
		cmd = leaseCommand(ls.parts, ls.field, ls.shape.Max, ls.shape.TTL/1000, pods, true)
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
	cluster := tb.rc.Mode() == modeCluster
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

// giveBackCommand is LeaseReturnScript's call for leases, and the key it is
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
