package tollgate

// The local fallback's buckets: per pod, on the pod's clock (see
// fallback.go for when they decide).

import (
	"sync"
	"time"
)

// localBuckets holds the per-pod fallback buckets of every middleware in the
// process, by bucket key: the TAT of each (µs since epochUS, the pod's
// clock). Safe for concurrent use.
//
// Bounded: at most max buckets. Inserting into a full store first drops the
// buckets that are full again (equivalent to absent), then, if that freed
// less than a quarter, arbitrary ones, so a flood of distinct clients costs
// at most max entries; a dropped bucket that was not full restarts full.
type localBuckets struct {
	now func() time.Time
	max int

	mu   sync.Mutex // guards tats
	tats map[string]float64
}

func newLocalBuckets(max int) *localBuckets {
	return &localBuckets{now: time.Now, max: max, tats: make(map[string]float64)}
}

// take is takeAll over the local buckets keys[i] with shapes lims[i]: all
// charged or none; d receives the decision.
func (lb *localBuckets) take(keys []string, lims []limit, d []int64) bool {
	now := float64(lb.now().UnixMicro() - epochUS)
	tats := make([]float64, len(keys))
	lb.mu.Lock()
	for i, k := range keys {
		tats[i] = lb.tats[k]
	}
	ok := takeAll(lims, tats, now, d)
	for i, k := range keys {
		if tats[i] == lb.tats[k] {
			continue // refused and not clamped: unchanged
		}
		if _, present := lb.tats[k]; !present && len(lb.tats) >= lb.max {
			lb.evict(now)
		}
		lb.tats[k] = tats[i]
	}
	lb.mu.Unlock()
	return ok
}

// evict makes room; requires lb.mu held.
func (lb *localBuckets) evict(now float64) {
	for k, tat := range lb.tats {
		if tat <= now {
			delete(lb.tats, k)
		}
	}
	for k := range lb.tats {
		if len(lb.tats) < lb.max*3/4 {
			break
		}
		delete(lb.tats, k)
	}
}

// size returns the number of buckets held.
func (lb *localBuckets) size() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return len(lb.tats)
}

// localStores gives the fallback buckets of each class a store of its own,
// so that a flood of clients on one middleware cannot evict another's
// depleted buckets. Safe for concurrent use.
type localStores struct {
	mu      sync.Mutex
	byClass map[string]*localBuckets
	one     *localBuckets // until each class has its own
}

func newLocalStores() *localStores {
	return &localStores{byClass: make(map[string]*localBuckets), one: newLocalBuckets(maxLocalBuckets)}
}

// forClass returns the store of class's buckets.
func (s *localStores) forClass(class string) *localBuckets {
	return s.one
}
