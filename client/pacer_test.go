package client

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

const ms = time.Millisecond

// mirrorStep is one step of a mirror's walk through fixed instants: at
// instant at, op ("observe", "take", "force"), then the next token is due
// at due.
type mirrorStep struct {
	at    time.Duration
	op    string
	l     limit // observe's
	after int   // observe's
	ok    bool  // take's result
	due   time.Duration
}

func walkMirror(t *testing.T, m *mirror, steps []mirrorStep) {
	t.Helper()
	for i, s := range steps {
		switch s.op {
		case "observe":
			m.observe(s.at, s.l, s.after)
		case "take":
			if ok := m.take(s.at); ok != s.ok {
				t.Fatalf("step %d: take at %v = %v, want %v (zero %v)", i, s.at, ok, s.ok, m.zero)
			}
		case "force":
			m.force(s.at)
		}
		if due := m.due(s.at); due != s.due {
			t.Fatalf("step %d: after %s at %v the next token is due at %v, want %v (zero %v)", i, s.op, s.at, due, s.due, m.zero)
		}
	}
}

func TestMirror(t *testing.T) {
	iv := 10 * ms // Tollgate's "api";q=100;w=1
	for _, c := range []struct {
		desc  string
		steps []mirrorStep
	}{
		{"tokens left are free now, then one per interval", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 3, interval: iv}, due: -20 * ms},
			{at: 0, op: "take", ok: true, due: -10 * ms},
			{at: 0, op: "take", ok: true, due: 0},
			{at: 0, op: "take", ok: true, due: 10 * ms},
			{at: 0, op: "take", ok: false, due: 10 * ms},
			{at: 9 * ms, op: "take", ok: false, due: 10 * ms},
			{at: 10 * ms, op: "take", ok: true, due: 20 * ms},
			{at: 25 * ms, op: "take", ok: true, due: 30 * ms},
		}},
		{"a refusal's t, rounded up to 1 s, is the interval", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: sec, interval: iv}, due: 10 * ms},
		}},
		{"a slow rate's t is the wait", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: 45 * sec, interval: 60 * sec}, due: 45 * sec},
		}},
		{"a t within a second of the interval: the interval", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: 2 * sec, interval: 1500 * ms}, due: 1500 * ms},
		}},
		{"a fixed window: the tokens left spread to end at the reset", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 5, reset: 10 * sec, interval: sec}, due: 6 * sec},
			{at: 6 * sec, op: "take", ok: true, due: 7 * sec},
		}},
		{"a fixed window with more left than its rate: some now", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 20, reset: 5 * sec, interval: 500 * ms}, due: -4500 * ms},
		}},
		{"an exhausted fixed window: none before the reset", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: 30 * sec, interval: 600 * ms}, due: 30 * sec},
		}},
		{"draft 07: the time to full, rounded up", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 4, reset: 12 * sec, interval: 12 * sec, burst: 5, toFull: true}, due: -36 * sec},
			{at: 0, op: "observe", l: limit{reset: 60 * sec, interval: 12 * sec, burst: 5, toFull: true}, due: 12 * sec},
		}},
		{"requests not decided yet count", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 4, interval: iv}, after: 3, due: 0},
		}},
		{"an answer showing more than the copy counts changes nothing", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: sec, interval: iv}, due: 10 * ms},
			{at: 10 * ms, op: "take", ok: true, due: 20 * ms},
			{at: 10 * ms, op: "observe", l: limit{remaining: 9, interval: iv}, due: 20 * ms},
		}},
		{"an answer showing less holds back", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 9, interval: iv}, due: -80 * ms},
			{at: 0, op: "observe", l: limit{remaining: 1, interval: iv}, due: 0},
		}},
		{"idle: no more than the burst", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 4, interval: iv}, due: -30 * ms},
			{at: 10 * sec, op: "take", ok: true, due: 10*sec - 30*ms},
		}},
		{"force takes what is not free", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: sec, interval: iv}, due: 10 * ms},
			{at: 0, op: "force", due: 20 * ms},
		}},
		{"a new interval applies at once", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 1, interval: iv}, due: -0},
			{at: 0, op: "observe", l: limit{remaining: 1, interval: 20 * ms}, due: 10 * ms},
		}},
		{"unpaced", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: 1}, due: 0},
			{at: 0, op: "take", ok: true, due: 0},
			{at: 0, op: "take", ok: true, due: 0},
		}},
		{"huge figures stay within maxSpan", []mirrorStep{
			{at: 0, op: "observe", l: limit{reset: maxSpan, interval: maxSpan}, after: 1 << 30, due: maxSpan + maxSpan},
			{at: sec, op: "take", ok: false, due: maxSpan + maxSpan},
		}},
		{"huge figures: tokens, the burst's", []mirrorStep{
			{at: 0, op: "observe", l: limit{remaining: maxCount, reset: maxSpan, interval: maxSpan}, due: 0},
			{at: 0, op: "take", ok: true, due: maxSpan},
		}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			walkMirror(t, &mirror{}, c.steps)
		})
	}
}

func TestPending(t *testing.T) {
	p := &policy{}
	for i := 0; i < 5; i++ {
		p.took()
	}
	p.done(2)
	p.done(9) // not pending: nothing
	for _, c := range []struct {
		seq  uint64
		want int
	}{{1, 3}, {3, 2}, {5, 0}, {0, 4}} {
		if got := p.later(c.seq); got != c.want {
			t.Fatalf("later(%d) = %d, want %d (pending %v)", c.seq, got, c.want, p.pending)
		}
	}
	for _, s := range []uint64{1, 3, 4, 5} {
		p.done(s)
	}
	if p.pending != nil {
		t.Fatalf("pending %v, want none", p.pending)
	}
}

// TestBookedRetries: fresh requests leave the booked retries their tokens.
func TestBookedRetries(t *testing.T) {
	p := &policy{m: mirror{zero: -50 * ms, interval: 10 * ms, burst: 20}} // 5 free at 0
	p.book(30 * ms)
	p.book(30 * ms)
	for i := 0; i < 5; i++ { // the copy still holds 3 at 30 ms: both retries' and one more
		if !p.takeFresh(0) {
			t.Fatalf("fresh take %d at 0 refused (zero %v)", i, p.m.zero)
		}
	}
	if p.takeFresh(10 * ms) {
		t.Fatal("a fresh take at 10 ms left the two retries booked at 30 ms their tokens but not one more")
	}
	p.unbook(30 * ms)
	if !p.takeFresh(10 * ms) {
		t.Fatal("with one retry booked at 30 ms, no fresh take at 10 ms")
	}
	if p.takeFresh(20 * ms) {
		t.Fatal("a fresh take at 20 ms took the booked retry's token or the one more")
	}
	p.m.observe(20*ms, limit{reset: sec, interval: 10 * ms}, 0) // an answer moves zero on by a token
	if !p.m.take(30 * ms) {                                     // the retry, at its instant
		t.Fatalf("the booked retry found no token at 30 ms (zero %v)", p.m.zero)
	}
	p.unbook(30 * ms)
	p.unbook(30 * ms) // not booked: nothing
	p.book(50 * ms)
	if p.spare(35*ms) || p.spare(45*ms) {
		t.Fatal("a fresh take at 35 or 45 ms took the token of the retry booked at 50 ms")
	}
	if !p.spare(60*ms+sec) || len(p.booked) != 0 {
		t.Fatalf("a booking a second past its instant is kept: %v", p.booked)
	}
	for i := 0; i < maxBooked; i++ {
		p.book(sec)
	}
	if p.book(sec) {
		t.Fatal("more than maxBooked bookings")
	}
}

func TestRegistryEvictsTheOldest(t *testing.T) {
	r := newRegistry(3, 2)
	for i := 1; i <= 5; i++ {
		r.policyFor("k" + strconv.Itoa(i))
	}
	r.policy("k3") // used: kept
	r.policyFor("k6")
	for k, want := range map[string]bool{"k1": false, "k2": false, "k3": true, "k4": false, "k5": true, "k6": true} {
		if got := r.policy(k) != nil; got != want {
			t.Fatalf("policy %s tracked %v, want %v", k, got, want)
		}
	}
	r.setKeys("a", []string{"k3"})
	r.setKeys("b", []string{"k5"})
	r.keysOf("a")
	r.setKeys("c", []string{"k6"})
	if r.keysOf("b") != nil || r.keysOf("a") == nil || r.keysOf("c") == nil {
		t.Fatal("host b, the least recently used, is still tracked")
	}
	if len(r.policies) != 3 || r.policyUse.Len() != 3 || len(r.hosts) != 2 || r.hostUse.Len() != 2 {
		t.Fatalf("tracked %d policies, %d hosts", len(r.policies), len(r.hosts))
	}
}

// TestMemoryBoundedByPolicies: answers naming ever new partition keys
// and hosts leave the transport no larger than its bounds.
func TestMemoryBoundedByPolicies(t *testing.T) {
	tr := NewTransport(nil, MaxPolicies(16)).(*transport)
	for i := 0; i < 3000; i++ {
		h := http.Header{"Ratelimit-Policy": {`"a";q=10;w=1`}, "Ratelimit": {`"a";r=1;pk=:` + b64(strconv.Itoa(i)) + `:, "b";r=1`}}
		tr.observe("host"+strconv.Itoa(i%1500), nil, &http.Response{Header: h}, time.Now())
	}
	if n := len(tr.reg.policies); n != 16 {
		t.Fatalf("%d policies tracked, want 16", n)
	}
	if n := len(tr.reg.hosts); n != maxHosts {
		t.Fatalf("%d hosts tracked, want %d", n, maxHosts)
	}
}

func b64(s string) string {
	const enc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	var out []byte
	b := []byte(s)
	for len(b)%3 != 0 {
		b = append(b, 0)
	}
	for i := 0; i < len(b); i += 3 {
		n := int(b[i])<<16 | int(b[i+1])<<8 | int(b[i+2])
		out = append(out, enc[n>>18&63], enc[n>>12&63], enc[n>>6&63], enc[n&63])
	}
	return string(out)
}

// TestJitterSpreads: n consecutive jitters of a window fall about 1/n
// apart, from any start: each of n slots of the window holds at most 3
// (independent draws put 5 or more in one slot, for n = 100, about once
// in 30 runs... and leave a third of the slots empty).
func TestJitterSpreads(t *testing.T) {
	for _, start := range []uint64{0, 1, 1 << 63, 0x123456789abcdef} {
		tr := &transport{seq: start}
		for _, n := range []int{10, 100, 1000} {
			counts := make([]int, n)
			for i := 0; i < n; i++ {
				j := tr.jitter(sec)
				if j < 0 || j >= sec {
					t.Fatalf("jitter %v out of [0, 1s)", j)
				}
				counts[int(j*time.Duration(n)/sec)]++
			}
			empty := 0
			for _, c := range counts {
				if c > 3 {
					t.Fatalf("start %x: %d jitters put %d in one of %d slots", start, n, c, n)
				}
				if c == 0 {
					empty++
				}
			}
			if 4*empty > n {
				t.Fatalf("start %x: %d jitters leave %d of %d slots empty", start, n, empty, n)
			}
		}
	}
	if (&transport{}).jitter(0) != 0 {
		t.Fatal("a jitter of a zero window")
	}
}
