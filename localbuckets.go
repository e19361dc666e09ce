package tollgate

// The local fallback's buckets: per pod, on the pod's monotonic clock (see
// fallback.go for when they decide, internal/clock for the clock). One store per
// class, so that a flood of clients on one middleware cannot evict another
// middleware's depleted buckets.

import (
	"hash/crc32"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
)

const (
	// localShards is the number of shards of one store: a take locks only
	// the shards of its keys, and a shard is what eviction looks into.
	localShards = 32
	// evictLook bounds the entries one insertion into a full shard looks
	// at: the work of a take does not grow with the store. (Each entry
	// looked at costs about 0.3 µs under Yaegi.)
	evictLook = 16
	// maxLocalBuckets bounds the buckets of one class store.
	maxLocalBuckets = 100000
	// maxLocalStores bounds the class stores (see localStores).
	maxLocalStores = 64
	// localStoreIdle is how long a class store must go unused (no take, no
	// New of its class) before a new class may take its place.
	localStoreIdle = int64(10 * time.Minute)
)

// localBuckets holds the fallback buckets of one class (or of the overflow
// classes, see localStores) by bucket key: the TAT of each, in µs since the
// process start on the monotonic clock (internal/clock). The bucket math (TakeAll)
// only needs one origin per store, so this is a valid clock for it; the
// values are smaller than bucket.go's µs since EpochUS, so its precision note
// holds. A bucket with TAT <= now is full, which is the same as absent.
//
// Sharded: localShards maps (fewer when max is smaller), each under its own
// mutex, a key's shard picked by the hash of its tag, the key up to its
// first '}' (shardOf). The keys of one request share the client's tag
// (tg{...}, like the hash tag that keeps them in one Redis Cluster slot), so
// a take locks one shard and holds it while it decides: all of its
// buckets are charged or none. Keys of several shards (not the plugin's,
// but take accepts them) lock each of their shards once, in increasing
// order, so that two takes never deadlock.
//
// Bounded: at most max buckets, max/shards per shard. Inserting into a full
// shard looks at up to evictLook of its entries (the map's own random
// order) and drops those full again; if none was, it drops the one nearest
// to full among them, which restarts full. So a take does bounded work
// whatever the store holds, and a flood of new clients, each of whom took a
// token or two, mostly evicts its own buckets before a client's emptied
// one. (The dropped bucket may be another key of the same take, charged a
// moment before: the same loss as any other eviction.)
//
// Safe for concurrent use. Use newLocalBuckets; the zero value is not
// usable.
type localBuckets struct {
	now      func() int64 // monotonic ns (internal/clock); tests inject their own
	perShard int          // buckets one shard holds at most
	shards   []*localShard
	heldMu   sync.Mutex
	held     map[string]int64 // concurrency slots in flight by key (takeHeld), none at 0
}

// localShard is one shard of a store.
type localShard struct {
	mu     sync.Mutex         // guards every field
	tats   map[string]float64 // TAT by key, µs since the process start
	used   int64              // the latest take that locked it (or touch), monotonic ns
	looked int                // entries the last eviction looked at (tests)
}

// newLocalBuckets returns an empty store of at most max buckets (max >= 1).
func newLocalBuckets(max int) *localBuckets {
	n := localShards
	if max < n {
		n = max
	}
	lb := &localBuckets{now: clock.Mono, perShard: max / n, held: make(map[string]int64)}
	for i := 0; i < n; i++ {
		lb.shards = append(lb.shards, &localShard{tats: make(map[string]float64)})
	}
	return lb
}

// take is TakeAll over the local buckets keys[i] with shapes lims[i]: all
// charged or none; d receives the decision. A bucket refused and not clamped
// is left as it was (absent stays absent). keys is not empty (a policy set
// has a policy or more).
func (lb *localBuckets) take(keys []string, lims []bucket.Limit, d []int64) bool {
	k0 := keys[0]
	j, tag := shardOf(k0, len(lb.shards))
	if len(keys) > 1 && !sameTag(keys, tag) {
		return lb.takeSpread(keys, lims, d) // not the plugin's keys
	}
	ns := lb.now()
	now := float64(ns) / 1e3
	tats := make([]float64, len(keys))
	s := lb.shards[j]
	s.mu.Lock()
	s.used = ns
	for i, k := range keys {
		tats[i] = s.tats[k]
	}
	ok := bucket.TakeAll(lims, tats, now, d)
	for i, k := range keys { // s.put inlined: under Yaegi the call costs more than the work
		if tats[i] == s.tats[k] {
			continue // refused and not clamped: unchanged
		}
		if len(s.tats) >= lb.perShard {
			s.roomFor(k, now)
		}
		s.tats[k] = tats[i]
	}
	s.mu.Unlock()
	return ok
}

// roomFor makes room for key in the full shard unless it is there.
// Requires s.mu held.
func (s *localShard) roomFor(key string, now float64) {
	if _, present := s.tats[key]; !present {
		s.makeRoom(now)
	}
}

// sameTag reports whether every key starts with keys[0]'s tag of tag
// bytes (0: none).
func sameTag(keys []string, tag int) bool {
	for _, k := range keys[1:] {
		if tag == 0 || len(k) < tag || k[:tag] != keys[0][:tag] {
			return false
		}
	}
	return true
}

// takeSpread is take over keys of several shards: it locks each once, in
// increasing order, so that two takes never deadlock.
func (lb *localBuckets) takeSpread(keys []string, lims []bucket.Limit, d []int64) bool {
	idx := make([]int, len(keys)) // the shard of each key
	for i, k := range keys {
		idx[i], _ = shardOf(k, len(lb.shards))
	}
	held := sortedSet(idx)
	ns := lb.now()
	now := float64(ns) / 1e3
	for _, j := range held {
		lb.shards[j].mu.Lock()
	}
	lb.shards[held[0]].used = ns
	tats := make([]float64, len(keys))
	for i, k := range keys {
		tats[i] = lb.shards[idx[i]].tats[k]
	}
	ok := bucket.TakeAll(lims, tats, now, d)
	for i, k := range keys {
		if s := lb.shards[idx[i]]; tats[i] != s.tats[k] {
			s.put(k, tats[i], now, lb.perShard)
		}
	}
	for _, j := range held {
		lb.shards[j].mu.Unlock()
	}
	return ok
}

// put stores tat for key, first making room if key is new and the shard
// holds max. Requires s.mu held.
func (s *localShard) put(key string, tat, now float64, max int) {
	if len(s.tats) >= max {
		s.roomFor(key, now)
	}
	s.tats[key] = tat
}

// shardOf returns the shard of key among n, by CRC-32 over its hash tag:
// the bytes up to and including its first '}' (the whole key if it has
// none), and the tag's length (0 if none). A request's keys share the
// client's tag (tg{...}, source.go), so take locks one shard. (Two compiled
// calls: under Yaegi a loop over the bytes costs several times more.)
func shardOf(key string, n int) (shard, tag int) {
	tag = strings.IndexByte(key, '}') + 1
	tagged := key
	if tag > 0 {
		tagged = key[:tag]
	}
	return int(crc32.ChecksumIEEE([]byte(tagged)) % uint32(n)), tag
}

// sortedSet returns the distinct values of idx in increasing order (idx is
// a take's few shard indexes: insertion sort).
func sortedSet(idx []int) []int {
	set := make([]int, 0, len(idx))
	for _, j := range idx {
		at := len(set)
		for at > 0 && set[at-1] >= j {
			at--
		}
		if at < len(set) && set[at] == j {
			continue
		}
		set = append(set, 0)
		copy(set[at+1:], set[at:])
		set[at] = j
	}
	return set
}

// makeRoom drops at least one entry, looking at no more than evictLook:
// those full again at now, else the one nearest to full. Requires s.mu held
// and s.tats not empty.
func (s *localShard) makeRoom(now float64) {
	n, dropped := 0, false
	var victim string
	victimTAT := math.Inf(1)
	for k, tat := range s.tats {
		if tat <= now {
			delete(s.tats, k)
			dropped = true
		} else if tat < victimTAT {
			victim, victimTAT = k, tat
		}
		if n++; n == evictLook {
			break
		}
	}
	s.looked = n
	if !dropped {
		delete(s.tats, victim)
	}
}

// size returns the number of buckets held.
func (lb *localBuckets) size() int {
	n := 0
	for _, s := range lb.shards {
		s.mu.Lock()
		n += len(s.tats)
		s.mu.Unlock()
	}
	return n
}

// idle reports whether the store has gone unused (no take, no touch) for
// localStoreIdle at now (monotonic ns). It stops at the first shard used
// since.
func (lb *localBuckets) idle(now int64) bool {
	for _, s := range lb.shards {
		s.mu.Lock()
		used := s.used
		s.mu.Unlock()
		if now-used < localStoreIdle {
			return false
		}
	}
	return true
}

// touch marks the store used at now (monotonic ns).
func (lb *localBuckets) touch(now int64) {
	s := lb.shards[0]
	s.mu.Lock()
	if now > s.used {
		s.used = now
	}
	s.mu.Unlock()
}

// localStores gives the fallback buckets of each class a store of its own
// (max buckets each), so that a flood of clients on one middleware cannot
// evict another class's depleted buckets. Safe for concurrent use; use
// newLocalStores.
//
// Bounded: at most maxLocalStores class stores plus one overflow store, so
// at most (maxLocalStores+1)*max buckets in all. When a new class asks and
// the bound is reached, the stores unused for localStoreIdle are forgotten
// (a handler still holding one keeps using it; a later New of that class
// gets a new, empty store). If none is idle, the new class gets the
// overflow store, shared by every class that found no room: those classes
// can evict each other's buckets, as all classes could when the pod had one
// store. A class keeps the store forClass gave its handler until a reload.
type localStores struct {
	now func() int64 // monotonic ns; given to the stores it creates
	max int          // buckets per store

	mu       sync.Mutex // guards byClass and overflow
	byClass  map[string]*localBuckets
	overflow *localBuckets // nil until a class finds no room
}

func newLocalStores() *localStores {
	return &localStores{now: clock.Mono, max: maxLocalBuckets, byClass: make(map[string]*localBuckets)}
}

// forClass returns the store of class's buckets, creating it on first use
// (called by New, not per request).
func (s *localStores) forClass(class string) *localBuckets {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if lb := s.byClass[class]; lb != nil {
		lb.touch(now)
		return lb
	}
	if len(s.byClass) >= maxLocalStores {
		for c, lb := range s.byClass {
			if lb.idle(now) {
				delete(s.byClass, c)
			}
		}
	}
	if len(s.byClass) >= maxLocalStores {
		if s.overflow == nil {
			s.overflow = s.newStore()
		}
		return s.overflow
	}
	lb := s.newStore()
	lb.touch(now)
	s.byClass[class] = lb
	return lb
}

// newStore returns an empty store on s's clock.
func (s *localStores) newStore() *localBuckets {
	lb := newLocalBuckets(s.max)
	lb.now = s.now
	return lb
}

// hold takes a slot of every key of keys that is not "" (at most caps[i]
// held at once), all or none; d receives each one's slots left. It
// returns the index of a full one (none taken), or -1.
func (lb *localBuckets) hold(keys []string, caps []int64, d []int64) int {
	lb.heldMu.Lock()
	defer lb.heldMu.Unlock()
	for i, k := range keys {
		if k != "" && lb.held[k] >= caps[i] {
			for j, kj := range keys {
				if kj != "" {
					d[1+3*j] = caps[j] - lb.held[kj]
					if d[1+3*j] < 0 {
						d[1+3*j] = 0
					}
				}
			}
			return i
		}
	}
	for i, k := range keys {
		if k != "" {
			lb.held[k]++
			d[1+3*i] = caps[i] - lb.held[k]
			if d[1+3*i] < 0 {
				d[1+3*i] = 0
			}
		}
	}
	return -1
}

// unhold gives back a slot of key taken by hold.
func (lb *localBuckets) unhold(key string) {
	lb.heldMu.Lock()
	if lb.held[key] <= 1 {
		delete(lb.held, key)
	} else {
		lb.held[key]--
	}
	lb.heldMu.Unlock()
}

// localShare is the per-pod fallback bucket while Redis is unavailable and
// replicas pods share the limit (the region's static share of it, with
// regions): average/replicas over the same period, burst/replicas, each at
// least one request's cost.
func localShare(p *config.Policy, replicas int64) bucket.Limit {
	if p.Quota != nil || p.Cap != nil {
		return p.Lim // not counted without Redis (localQuotas), or counted apart (takeHeld): a bucket that refills at once
	}
	if replicas < 1 {
		replicas = 1
	}
	share := 1.0
	if p.RegionPPM != 0 {
		share = float64(abs64(p.RegionPPM)) / ppm
	}
	lb := int64(p.Lim.Burst*share) / replicas
	if lb < int64(p.Lim.Cost) {
		lb = int64(p.Lim.Cost)
	}
	la := float64(p.Average) * share / float64(replicas)
	return bucket.Limit{Interval: p.PeriodUS / la, Burst: float64(lb), Cost: p.Lim.Cost}
}

// abs64 is |v|.
func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// ppm: a region's share of a limit is in parts per million.
const ppm = 1000000
