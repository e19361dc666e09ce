package metrics

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// one is a class's divisor: 1.
func one(_ int64) int64 { return 1 }

func TestMetricsSeriesLifetime(t *testing.T) {
	r := NewRegistry()
	now := int64(time.Hour)
	m := r.Policy("c", "p", now)
	live := func(at int64) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return m.live(at)
	}
	if !live(now + int64(Idle) - 1) {
		t.Fatal("compiled just under Idle ago: left out")
	}
	if live(now + int64(Idle)) {
		t.Fatal("neither compiled nor counting for Idle: still served")
	}
	atomic.AddInt64(&m.N[0], 1)
	later := now + 2*int64(Idle)
	if !live(later) {
		t.Fatal("counted again: left out")
	}
	if !live(later+int64(Idle)-1) || live(later+int64(Idle)) {
		t.Fatal("after counting, served for Idle then left out: wrong")
	}
	if again := r.Policy("c", "p", later); again != m {
		t.Fatal("the same class and policy got new counters")
	}
}

// TestMetricsCapsAreSoft: MaxPolicies bounds what the registry keeps
// of classes and policies left out of the output; live ones are never
// dropped for room (the registry grows past it), as the README says.
func TestMetricsCapsAreSoft(t *testing.T) {
	r := NewRegistry()
	now := int64(time.Hour)
	for i := 0; i < MaxPolicies+10; i++ {
		r.Policy("c", fmt.Sprint(i), now)
		r.Class(fmt.Sprint("c", i), one, now)
	}
	if len(r.policies) != MaxPolicies+10 || len(r.classes) != MaxPolicies+10 {
		t.Fatalf("%d policies, %d classes kept, want %d of each: all live", len(r.policies), len(r.classes), MaxPolicies+10)
	}
	later := now + int64(Idle)
	r.Policy("c", "new", later)
	r.Class("new", one, later)
	if len(r.policies) != 1 || len(r.classes) != 1 {
		t.Fatalf("%d policies, %d classes kept once the others were left out, want 1 of each", len(r.policies), len(r.classes))
	}
}
