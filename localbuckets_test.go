package tollgate

import (
	"fmt"
	"testing"
	"time"
)

func TestLocalBucketsAreBounded(t *testing.T) {
	lb := newLocalBuckets(100)
	now := time.Unix(1800000000, 0)
	lb.now = func() time.Time { return now }
	lim := []limit{{interval: 1e6, burst: 5, cost: 1}}
	d := make([]int64, decisionLen(1))
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
	lb := newLocalBuckets(100)
	now := time.Unix(1800000000, 0)
	lb.now = func() time.Time { return now }
	lim := []limit{{interval: 1e6, burst: 5, cost: 1}}
	d := make([]int64, decisionLen(1))
	for i := 0; i < 99; i++ {
		lb.take([]string{fmt.Sprint("client", i)}, lim, d) // full again after 1s
	}
	for i := 0; i < 5; i++ {
		lb.take([]string{"runaway"}, lim, d) // full again after 5s
	}
	now = now.Add(2 * time.Second)
	for i := 0; i < 50; i++ {
		lb.take([]string{fmt.Sprint("late", i)}, lim, d) // the first one evicts
	}
	if lb.take([]string{"runaway"}, lim, d); d[1] != 1 {
		t.Fatalf("runaway 2s after emptying its bucket: r=%d, want 1 (evicted while not full?)", d[1])
	}
}

func TestLocalBucketsUseThePodClock(t *testing.T) {
	lb := newLocalBuckets(10)
	now := time.Unix(1800000000, 0)
	lb.now = func() time.Time { return now }
	lim := []limit{{interval: 1e6, burst: 1, cost: 1}}
	d := make([]int64, decisionLen(1))
	if !lb.take([]string{"k"}, lim, d) {
		t.Fatal("step 0: allowed = false, want true")
	}
	if lb.take([]string{"k"}, lim, d) {
		t.Fatal("step 1: allowed = true, want false")
	}
	now = now.Add(time.Second)
	if !lb.take([]string{"k"}, lim, d) {
		t.Fatal("step 2 (1s later): allowed = false, want true")
	}
}
