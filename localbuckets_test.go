package tollgate

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// testClock is an injected monotonic clock (ns), stepped by the test.
type testClock struct {
	mu sync.Mutex
	ns int64
}

func (c *testClock) now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ns
}

func (c *testClock) set(d time.Duration) {
	c.mu.Lock()
	c.ns = int64(d)
	c.mu.Unlock()
}

// newTestBuckets returns a store of max buckets on a clock starting at 1h.
func newTestBuckets(max int) (*localBuckets, *testClock) {
	clock := &testClock{ns: int64(time.Hour)}
	lb := newLocalBuckets(max)
	lb.now = func() int64 { return clock.now() }
	return lb, clock
}

func TestLocalBucketsSteps(t *testing.T) {
	lb, clock := newTestBuckets(10)
	lim := []bucket.Limit{{Interval: 1e6, Burst: 2, Cost: 1}} // 1 token/s, 2 at most
	steps := []struct {
		desc    string
		at      time.Duration // monotonic clock
		allowed bool
		left    int64 // d[1]
		wait    int64 // d[2], ms until the next request fits
	}{
		{"full", time.Hour, true, 1, 0},
		{"last token", time.Hour, true, 0, 1000},
		{"empty", time.Hour, false, 0, 1000},
		{"half a token later", time.Hour + 500*time.Millisecond, false, 0, 500},
		{"one token later", time.Hour + time.Second, true, 0, 1000},
		{"full again, 10s later", time.Hour + 11*time.Second, true, 1, 0},
		{"last token again", time.Hour + 11*time.Second, true, 0, 1000},
		// The clock steps back an hour: the bucket stays empty (clamped to
		// capacity: never more tokens, never a wait longer than a refill).
		{"clock back 1h", 11 * time.Second, false, 0, 1000},
		{"still empty", 11*time.Second + 999*time.Millisecond, false, 0, 1},
		{"refilled from the clamp", 12 * time.Second, true, 0, 1000},
	}
	for i, s := range steps {
		clock.set(s.at)
		d := make([]int64, bucket.DecisionLen(1))
		if got := lb.take([]string{"k"}, lim, d); got != s.allowed || d[1] != s.left || d[2] != s.wait {
			t.Fatalf("step %d (%s): allowed = %t, left %d, wait %d ms; want %t, %d, %d", i, s.desc, got, d[1], d[2], s.allowed, s.left, s.wait)
		}
	}
}

func TestLocalBucketsClockBackwardsGrantsNothing(t *testing.T) {
	lb, clock := newTestBuckets(100)
	lim := []bucket.Limit{{Interval: 60e6, Burst: 3, Cost: 1}} // 1 token/min
	d := make([]int64, bucket.DecisionLen(1))
	clock.set(2 * time.Hour)
	for i := 0; i < 3; i++ {
		lb.take([]string{"k"}, lim, d)
	}
	// Each step back (and the small steps forward between them) finds the
	// bucket empty: a clock that runs backwards refills nothing.
	for i, at := range []time.Duration{time.Hour, time.Hour + 30*time.Second, time.Minute, 0, 59 * time.Second} {
		clock.set(at)
		if lb.take([]string{"k"}, lim, d) {
			t.Fatalf("step %d (clock at %v after emptying at 2h): allowed = true, want false", i, at)
		}
	}
	clock.set(time.Minute) // a minute after the last clamp (at 0)
	if !lb.take([]string{"k"}, lim, d) {
		t.Fatal("a refill after the last step back: allowed = false, want true")
	}
}

func TestLocalBucketsAllOrNothing(t *testing.T) {
	cases := []struct {
		desc   string
		prefix string
	}{
		{"one client's keys: one shard", "tg{client}:"},
		{"keys over several shards", "k"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			lb, _ := newTestBuckets(1000)
			// Ten buckets; the last holds one token.
			var keys []string
			var lims []bucket.Limit
			for i := 0; i < 10; i++ {
				keys = append(keys, c.prefix+strconv.Itoa(i))
				lims = append(lims, bucket.Limit{Interval: 1e6, Burst: 5, Cost: 1})
			}
			lims[9].Burst = 1
			d := make([]int64, bucket.DecisionLen(10))
			steps := []struct {
				desc    string
				allowed bool
				left0   int64
			}{
				{"every bucket fits", true, 4},
				{"the last is empty: nothing charged", false, 4},
				{"again", false, 4},
			}
			for i, s := range steps {
				if got := lb.take(keys, lims, d); got != s.allowed || d[1] != s.left0 {
					t.Fatalf("step %d (%s): allowed = %t, left of the first %d; want %t, %d", i, s.desc, got, d[1], s.allowed, s.left0)
				}
			}
			if !lb.take(keys[:1], lims[:1], d) || d[1] != 3 {
				t.Fatalf("the first alone: left %d, want 3 (the refused takes charged it)", d[1])
			}
			// A refusal of a bucket that is absent (cost above burst)
			// stores nothing.
			n := lb.size()
			if lb.take([]string{c.prefix + "new"}, []bucket.Limit{{Interval: 1e6, Burst: 1, Cost: 2}}, d) {
				t.Fatal("cost 2 on burst 1: allowed = true, want false")
			}
			if lb.size() != n {
				t.Fatalf("a refused absent bucket was stored: %d buckets, want %d", lb.size(), n)
			}
		})
	}
}

func TestLocalBucketsConcurrentTakes(t *testing.T) {
	lb, _ := newTestBuckets(1000)
	// Takes over shared keys, locked in different orders (no deadlock), all
	// or nothing: a and b are in every take, so exactly 100 pass, and each
	// charged c or d, never a part of its buckets. Nothing refills.
	lims := []bucket.Limit{{Interval: 1e12, Burst: 100, Cost: 1}, {Interval: 1e12, Burst: 100, Cost: 1}, {Interval: 1e12, Burst: 100, Cost: 1}}
	orders := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "d", "a"}, {"d", "a", "b"}}
	for _, keys := range orders {
		if j, _ := shardOf(keys[0], len(lb.shards)); j == shardIndex(lb, keys[1]) && j == shardIndex(lb, keys[2]) {
			t.Fatalf("keys %v share a shard: the test would not lock several", keys)
		}
	}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(keys []string) {
			defer wg.Done()
			d := make([]int64, bucket.DecisionLen(3))
			for i := 0; i < 200; i++ {
				if lb.take(keys, lims, d) {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}(orders[g%len(orders)])
	}
	wg.Wait()
	// A take that cannot pass (cost above burst) reads what is left.
	left := make(map[string]int64)
	d := make([]int64, bucket.DecisionLen(1))
	for _, k := range []string{"a", "b", "c", "d"} {
		lb.take([]string{k}, []bucket.Limit{{Interval: 1e12, Burst: 100, Cost: 101}}, d)
		left[k] = d[1]
	}
	if allowed != 100 || left["a"] != 0 || left["b"] != 0 || left["c"]+left["d"] != 100 {
		t.Fatalf("%d takes passed, tokens left %v; want 100 passed, a and b empty, 100 left in c and d together", allowed, left)
	}
}

func TestLocalBucketsAreBounded(t *testing.T) {
	lb, _ := newTestBuckets(100)
	lim := []bucket.Limit{{Interval: 1e6, Burst: 5, Cost: 1}}
	d := make([]int64, bucket.DecisionLen(1))
	for i := 0; i < 1000; i++ {
		if !lb.take([]string{fmt.Sprint("client", i)}, lim, d) {
			t.Fatalf("client %d: first request refused", i)
		}
		if lb.size() > 100 {
			t.Fatalf("after %d clients the store holds %d buckets, want at most 100", i+1, lb.size())
		}
	}
}

func TestLocalBucketsEvictFullBucketsFirst(t *testing.T) {
	lb, clock := newTestBuckets(100)
	lim := []bucket.Limit{{Interval: 1e6, Burst: 5, Cost: 1}}
	d := make([]int64, bucket.DecisionLen(1))
	for i := 0; i < 99; i++ {
		lb.take([]string{fmt.Sprint("client", i)}, lim, d) // full again after 1s
	}
	for i := 0; i < 5; i++ {
		lb.take([]string{"runaway"}, lim, d) // full again after 5s
	}
	clock.set(time.Hour + 2*time.Second)
	for i := 0; i < 50; i++ {
		lb.take([]string{fmt.Sprint("late", i)}, lim, d)
	}
	if lb.take([]string{"runaway"}, lim, d); d[1] != 1 {
		t.Fatalf("runaway 2s after emptying its bucket: r=%d, want 1 (evicted while not full?)", d[1])
	}
}

// A flood of distinct clients on a store at its bound: every take pays for
// at most evictLook entries, however full the store (checked through the
// shards' looked, not by time).
func TestLocalBucketsEvictionLooksAtBoundedEntries(t *testing.T) {
	lb, _ := newTestBuckets(maxLocalBuckets)
	lim := []bucket.Limit{{Interval: 1e9, Burst: 5, Cost: 1}} // nothing refills during the test
	d := make([]int64, bucket.DecisionLen(1))
	evictions := 0
	for i := 0; i < 2*maxLocalBuckets; i++ {
		key := "flood" + strconv.Itoa(i)
		lb.take([]string{key}, lim, d)
		s := lb.shards[shardIndex(lb, key)]
		if s.looked > evictLook {
			t.Fatalf("client %d: its eviction looked at %d entries, want at most %d", i, s.looked, evictLook)
		}
		if s.looked > 0 {
			evictions++
		}
		s.looked = 0
	}
	if n := lb.size(); n != maxLocalBuckets || evictions < maxLocalBuckets {
		t.Fatalf("after the flood: %d buckets, %d evictions; want the store at its bound %d, and an eviction per client past it", n, evictions, maxLocalBuckets)
	}
}

func TestLocalStoresIsolateClasses(t *testing.T) {
	stores := newLocalStores()
	a, b := stores.forClass("a"), stores.forClass("b")
	lim := []bucket.Limit{{Interval: 1e9, Burst: 3, Cost: 1}} // nothing refills during the test
	d := make([]int64, bucket.DecisionLen(1))
	for i := 0; i < 3; i++ {
		b.take([]string{"K"}, lim, d)
	}
	for i := 0; i < 2*maxLocalBuckets; i++ {
		a.take([]string{"flood" + strconv.Itoa(i)}, lim, d)
	}
	if b.take([]string{"K"}, lim, d) {
		t.Fatal("K on class b after a flood of 200000 clients on class a: allowed = true, want false (its empty bucket was evicted)")
	}
	if stores.forClass("b") != b {
		t.Fatal("class b asked again: another store")
	}
}

func TestLocalStoresAreBounded(t *testing.T) {
	clock := &testClock{ns: int64(time.Hour)}
	stores := newLocalStores()
	stores.now = func() int64 { return clock.now() }
	own := make(map[*localBuckets]string) // store -> its class
	byName := make(map[string]*localBuckets)
	for i := 0; i < maxLocalStores; i++ {
		c := "c" + strconv.Itoa(i)
		lb := stores.forClass(c)
		if own[lb] != "" {
			t.Fatalf("class %s got the store of class %s", c, own[lb])
		}
		own[lb], byName[c] = c, lb
	}
	if lb := stores.forClass("x"); lb != stores.overflow || own[lb] != "" {
		t.Fatalf("a 65th class, none idle: got the store of %q, want the overflow store", own[lb])
	}
	clock.set(time.Hour + 9*time.Minute)
	if lb := stores.forClass("y"); lb != stores.overflow {
		t.Fatalf("a 66th class: got the store of %q, want the overflow store", own[lb])
	}
	if lb := stores.forClass("c1"); lb != byName["c1"] { // a reload's New: a use
		t.Fatalf("class c1 asked again: got the store of %q", own[lb])
	}
	byName["c2"].take([]string{"k"}, []bucket.Limit{{Interval: 1, Burst: 1, Cost: 1}}, make([]int64, bucket.DecisionLen(1)))
	// The other 62 have now been unused for 10 minutes and make room.
	clock.set(time.Hour + 10*time.Minute)
	if lb := stores.forClass("z"); lb == stores.overflow || own[lb] != "" {
		t.Fatalf("a new class after 10 idle minutes: got the store of %q (overflow %t), want its own", own[lb], lb == stores.overflow)
	}
	if len(stores.byClass) != 3 {
		t.Fatalf("%d class stores after the idle ones were dropped, want 3 (c1, c2, z)", len(stores.byClass))
	}
	for _, c := range []string{"c1", "c2"} {
		if stores.forClass(c) != byName[c] {
			t.Fatalf("class %s, used within 10 minutes, lost its store", c)
		}
	}
}

// BenchmarkLocalTakeFull is the fallback's worst case: every take inserts a
// new client into a store at its bound, so every take evicts. worst-µs is
// the slowest single take (garbage collection and scheduling included).
func BenchmarkLocalTakeFull(b *testing.B) {
	lb, _ := newTestBuckets(maxLocalBuckets)
	for i := 0; lb.size() < maxLocalBuckets; i++ {
		key := bucket.ClientKey("fill", strconv.Itoa(i))
		s := lb.shards[shardIndex(lb, key)]
		if len(s.tats) < lb.perShard {
			s.tats[key] = 1e12 // not full for days
		}
	}
	keys := make([][]string, b.N)
	for i := range keys {
		keys[i] = []string{bucket.ClientKey("new", strconv.Itoa(i))}
	}
	lim := []bucket.Limit{{Interval: 1e9, Burst: 5, Cost: 1}}
	d := make([]int64, bucket.DecisionLen(1))
	var worst time.Duration
	runtime.GC()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		lb.take(keys[i], lim, d)
		if el := time.Since(start); el > worst {
			worst = el
		}
	}
	b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
}

// BenchmarkLocalTake is the fallback's usual case: one client's bucket.
func BenchmarkLocalTake(b *testing.B) {
	lb := newLocalBuckets(maxLocalBuckets)
	keys := []string{bucket.ClientKey("c", "client")}
	lim := []bucket.Limit{{Interval: 1, Burst: 5, Cost: 1}}
	d := make([]int64, bucket.DecisionLen(1))
	for i := 0; i < b.N; i++ {
		lb.take(keys, lim, d)
	}
}

// shardIndex is the shard of key in lb.
func shardIndex(lb *localBuckets, key string) int {
	j, _ := shardOf(key, len(lb.shards))
	return j
}
