package tollgate

// What the plugin takes from Redis as a decision: whatever the reply, a
// check (backend.check) ends in an error or a well-formed decision. (The
// wire, decode and the RESP readers against hostile replies are the
// client's: internal/redis.)

import (
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// mustPolicy is a policy of 60 requests a minute, burst 5, cost 1.
func mustPolicy(t testing.TB) *config.Policy {
	t.Helper()
	p, err := config.CompileLimit("", 60, "1m", 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wellFormed is what a correct script's decision holds: allowed (1) or
// refused (0), non-negative numbers, and a refusal names a wait in one of
// its buckets (each bucket: remaining, wait, reset).
func wellFormed(d []int64) bool {
	for _, v := range d {
		if v < 0 {
			return false
		}
	}
	if d[0] != 0 {
		return d[0] == 1
	}
	for i := 2; i < len(d); i += 3 {
		if d[i] > 0 {
			return true
		}
	}
	return false
}

// FuzzExchangeReply answers a check through the plugin's backend with
// arbitrary replies: it must return a decision or an error, never panic,
// and a decision it accepts must be well-formed.
func FuzzExchangeReply(f *testing.F) {
	for _, seed := range []string{
		"+1 3 0 2000\r\n", "+0 0 1500 5000\r\n", "-NOSCRIPT No matching script\r\n", "-ERR x\r\n",
		"*4\r\n:1\r\n:3\r\n:0\r\n:2000\r\n", "+\r\n", "+1 -1 0 0\r\n", "+1 3 0 2000 9\r\n", ":1\r\n", "$-1\r\n",
		"+0 3 0 2000\r\n", "+2 3 0 2000\r\n", "+0 0 0 0\r\n",
	} {
		f.Add(seed)
	}
	key := bucket.ClientKey("api", "192.0.2.1")
	set := newPolicySet([]*config.Policy{mustPolicy(f)}, len(key))
	f.Fuzz(func(t *testing.T, reply string) {
		fake := redistest.StartFake(t, reply)
		cfg := CreateConfig()
		cfg.Average = 10
		cfg.Redis.Endpoints = []string{fake.Addr()}
		cfg.Redis.Timeout = "100ms"
		s, err := config.Compile(cfg, "api")
		if err != nil {
			t.Fatal(err)
		}
		b, err := newRegistry().backend(s.Redis)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.rc.CloseIdle() })
		atomic.StoreInt64(&b.lastLog, b.now()) // no failure logged (one per probe interval)
		d := make([]int64, set.decisionLen)
		if err := b.check(set.cmd, key, d, &s.Redis, nil); err == nil && !wellFormed(d) {
			t.Fatalf("reply %q accepted as decision %v", reply, d)
		}
	})
}

// TestDecisionChecked checks CheckDecision, which the plugin applies to
// every decision but an allowance, against wellFormed on decisions of one
// to three buckets.
func TestDecisionChecked(t *testing.T) {
	values := []int64{0, 1, 2, 9, 1 << 62}
	r := rand.New(rand.NewSource(1))
	accepted, refused := 0, 0
	for i := 0; i < 20000; i++ {
		d := make([]int64, bucket.DecisionLen(1+r.Intn(3)))
		for j := range d {
			d[j] = values[r.Intn(len(values))]
			if j > 0 && r.Intn(2) == 0 {
				d[j] = 0
			}
		}
		if j := r.Intn(3); j < 2 {
			d[0] = int64(j) // mostly 0 or 1, as Redis sends
		}
		ok := bucket.CheckDecision(d) == nil
		if ok != wellFormed(d) {
			t.Fatalf("CheckDecision(%v) accepted = %v, want %v", d, ok, !ok)
		}
		if ok {
			accepted++
		} else {
			refused++
		}
	}
	if accepted < 1000 || refused < 1000 {
		t.Fatalf("%d accepted and %d refused of 20000: the test says little", accepted, refused)
	}
}
