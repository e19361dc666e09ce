package tollgate

// The Lua script (BucketScript) against a real redis-server, step for step
// with its Go twin (TakeAll).
//
// The README's clock claims (one clock, Redis's TIME; time that runs
// backwards clamped in both twins: the style guide's rule 4) are otherwise held only
// by the Go twin (bucket_test.go, localbuckets_test.go). Here the script
// itself runs on Redis, called with the exact bytes the plugin writes
// (newCommand, appendCall: EVAL, then EVALSHA), its reply parsed by decode.
//
// Redis's clock cannot be set, so each step places the bucket's state
// relative to it: a small script of the test's own reads TIME and stores a
// TAT (in the script's format, 1/64 µs since EpochUS) so many µs after it,
// in the same pipeline as the call, microseconds before it. A state further
// ahead than the bucket's capacity is a Redis whose clock is behind the
// last decision (a failover to a node whose clock lags). The pipeline is
//
//	[set state] GET keys, TIME, the call, TIME, GET keys, PTTL keys, TIME
//
// so the step knows the state the script read, and that the script's
// instant lies between the two TIMEs. Two checks per step:
//   - want: the decision the step's design fixes (independent of the µs
//     that pass, for every field not marked tw);
//   - the twin: some instant between the two TIMEs at which TakeAll, given
//     the state read, returns the script's decision field for field, and
//     the state the script stored (value and PTTL: keys expire when full).
//     TakeAll's fields only move once per ms, so in practice this pins
//     every field exactly.
//
// Mutations caught (applied to bucket.go in a private worktree; compiled
// and under Yaegi):
//   - the script's clamp removed (`elseif tat > now + cap[i] then ...`):
//     "clock 1 s behind: wait_ms[0] = 900, want 100", the 1 h steps
//     3600100; the same clamp removed from TakeAll: the twin check fails;
//   - the clamp not stored (`if ok == 1 or clamped[i]` -> `if ok == 1`):
//     the twin check ("key 0 stored ... expiring in 300 ms, Redis holds
//     ... with PTTL 1100");
//   - the wait's rounding: math.ceil -> math.floor (a wait of -1, refused
//     by decode; 999 for 1000), to nearest ("a wait of 59.4 ms": 59, not
//     60; the twin too whenever a wait's fraction is under half a ms),
//     the ns CeilMS takes off dropped ("29/s cost 29": 1001, not 1000).
//
// The redis-server is started with os.StartProcess (os/exec is not in
// Yaegi's restricted stdlib), so this runs under `yaegi test` as well.

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// tw marks a decision field that the µs passing between steps decides: the
// twin checks it, the step's design does not fix it.
const tw = -1

// liveStep is one request of a walk on a real Redis.
type liveStep struct {
	desc string
	// set places each bucket's state before the call: "del" (no key: a
	// fresh or full bucket), or a TAT so many µs after Redis's TIME. nil:
	// the state the previous step left.
	set []string
	// sleep: "wait" sleeps the previous decision's longest wait first,
	// "full" its longest time to full, plus liveMargin.
	sleep string
	// gone: every key must have expired (PTTL -2) before the call.
	gone bool
	want []int64 // the decision, in TakeAll's layout; tw: the twin decides
}

// liveMargin is added to every sleep: Redis's expiry and TIME against the
// test's sleep, both on the host's clock.
const liveMargin = 20 * time.Millisecond

// liveSetScript stores each KEYS[i] as a TAT ARGV[i] µs after TIME (as the
// bucket script computes now), with an expiry at that TAT, or deletes it
// ("del"). Reply: now, then the value stored (-1: deleted).
const liveSetScript = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local out = {now}
for i = 1, #KEYS do
  if ARGV[i] == 'del' then
    redis.call('DEL', KEYS[i])
    out[i + 1] = -1
  else
    local off = tonumber(ARGV[i])
    local v = math.floor((now + off) * 64 + 0.5)
    redis.call('SET', KEYS[i], string.format('%d', v), 'PX', math.max(1, math.ceil(off / 1000)))
    out[i + 1] = v
  end
end
return out
`

func TestLuaScriptOnRedisMatchesTwin(t *testing.T) {
	addr := redistest.Start(t)
	// 100 ms a token, capacity 300 ms.
	one := func(c *config.Config) { c.Average, c.Period, c.Burst = 10, "1s", 3 }
	// And a rule of 500 ms a token, capacity 500 ms.
	login := func(c *config.Config) {
		one(c)
		c.Rules = []config.Rule{{Name: "login", Average: 2, Period: "1s", Burst: 1}}
	}
	// 333333.33 µs a token, capacity and cost 1 s.
	thirds := func(c *config.Config) { c.Average, c.Period, c.Burst, c.Cost = 3, "1s", 3, 3 }
	// 34482.76 µs a token: capacity and cost 29 × that, 999999.9999999999
	// µs in float64, so a wait of exactly 1 s computes as 1000000.0000000001
	// µs and only the ns that CeilMS takes off makes it 1000 ms, not 1001.
	under := func(c *config.Config) { c.Average, c.Period, c.Burst, c.Cost = 29, "1s", 29, 29 }
	for _, tc := range []struct {
		desc   string
		config func(*config.Config)
		steps  []liveStep
	}{
		{
			desc:   "10/s burst 3",
			config: one,
			steps: []liveStep{
				{desc: "a fresh key", set: []string{"del"}, want: []int64{1, 2, 0, 100}},
				{desc: "the burst's second", want: []int64{1, 1, 0, tw}},
				{desc: "the burst's last", want: []int64{1, 0, tw, tw}},
				{desc: "past the burst", want: []int64{0, 0, tw, tw}},
				{desc: "refilled after the wait", sleep: "wait", want: []int64{1, 0, tw, tw}},
				{desc: "an empty bucket's wait", set: []string{"300000"}, want: []int64{0, 0, 100, 300}},
				{desc: "half a token's wait", set: []string{"250000"}, want: []int64{0, 0, 50, 250}},
				{desc: "a wait of 59.4 ms rounds up", set: []string{"259400"}, want: []int64{0, 0, 60, 260}},
				// The old node's full bucket, 100 ms ahead: 100 ms of
				// negative time cost a token (1 left, not 2), none granted.
				{desc: "clock 100 ms behind a full bucket", set: []string{"100000"}, want: []int64{1, 1, 0, 200}},
				// One token taken on a node 1 s ahead: clamped to empty,
				// one interval's wait, not 1.1 s; the clamp is stored.
				{desc: "clock 1 s behind", set: []string{"1100000"}, want: []int64{0, 0, 100, 300}},
				{desc: "recovers after 1 s behind", sleep: "wait", want: []int64{1, 0, tw, tw}},
				{desc: "clock 1 h behind", set: []string{"3600300000"}, want: []int64{0, 0, 100, 300}},
				{desc: "recovers after 1 h behind", sleep: "wait", want: []int64{1, 0, tw, tw}},
				{desc: "expired once full", sleep: "full", gone: true, want: []int64{1, 2, 0, 100}},
			},
		},
		{
			desc:   "10/s burst 3 and login 2/s burst 1, all or nothing",
			config: login,
			steps: []liveStep{
				{desc: "fresh keys", set: []string{"del", "del"}, want: []int64{1, 2, 0, 100, 0, 500, 500}},
				{desc: "login empty: nothing charged", want: []int64{0, 2, 0, tw, 0, tw, tw}},
				{desc: "top empty: login not charged", set: []string{"300000", "del"}, want: []int64{0, 0, 100, 300, 1, 0, 0}},
				{desc: "top clock 1 h behind: clamp stored, login not charged", set: []string{"3600300000", "del"}, want: []int64{0, 0, 100, 300, 1, 0, 0}},
				{desc: "login clock 1 s behind: clamp stored, top not charged", set: []string{"del", "1500000"}, want: []int64{0, 3, 0, 0, 0, 500, 500}},
				{desc: "both recover", sleep: "wait", want: []int64{1, 2, 0, 100, 0, 500, 500}},
				{desc: "expired once full", sleep: "full", gone: true, want: []int64{1, 2, 0, 100, 0, 500, 500}},
			},
		},
		{
			desc:   "3/s cost 3: a fractional interval",
			config: thirds,
			steps: []liveStep{
				{desc: "a fresh key", set: []string{"del"}, want: []int64{1, 0, 1000, 1000}},
				{desc: "empty", want: []int64{0, 0, tw, tw}},
				{desc: "clock 1 h behind", set: []string{"3600000000"}, want: []int64{0, 0, 1000, 1000}},
				{desc: "recovers", sleep: "wait", want: []int64{1, 0, tw, tw}},
			},
		},
		{
			desc:   "29/s cost 29: a capacity just under 1 s",
			config: under,
			steps: []liveStep{
				{desc: "a fresh key", set: []string{"del"}, want: []int64{1, 0, 1000, 1000}},
				{desc: "empty", want: []int64{0, 0, tw, tw}},
				{desc: "clock 1 s behind", set: []string{"2000000"}, want: []int64{0, 0, 1000, 1000}},
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := CreateConfig()
			cfg.Class = "live"
			tc.config(cfg)
			s, err := config.Compile(cfg, "live@file")
			if err != nil {
				t.Fatal(err)
			}
			ps := []*config.Policy{s.Top}
			ps = append(ps, s.Rules...)
			set := newPolicySet(ps, s.KeyLen)
			key := bucket.ClientKey(s.Class, tc.desc)
			if len(key) != s.KeyLen {
				t.Fatalf("key %q: %d bytes, the command is prepared for %d", key, len(key), s.KeyLen)
			}
			walkLive(t, addr, set, key, tc.steps)
		})
	}
}

// liveResult is what one step's pipeline observed. Stored values are the
// keys' raw values (TAT × 64), -1 when missing; times are µs since EpochUS.
type liveResult struct {
	setNow int64   // the state's script's now; -1 when the step set nothing
	pre    []int64 // the keys as the script read them
	ta, tb int64   // TIME right before and right after the call
	tc     int64   // TIME after the PTTLs
	line   string  // the script's reply line
	d      []int64 // decoded
	post   []int64 // the keys after the call
	pttl   []int64
}

func walkLive(t *testing.T, addr string, set *policySet, key string, steps []liveStep) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	n := len(set.ps)
	keys := set.localKeys(key) // the script's KEYS, as appendCall writes them
	lims := make([]bucket.Limit, n)
	for i, p := range set.ps {
		lims[i] = p.Shard // the ARGV newCommand writes
	}
	var prev []int64
	for i, st := range steps {
		if st.sleep != "" {
			var ms int64
			for b := 0; b < n; b++ {
				v := prev[2+3*b]
				if st.sleep == "full" {
					v = prev[3+3*b]
				}
				if v > ms {
					ms = v
				}
			}
			time.Sleep(time.Duration(ms)*time.Millisecond + liveMargin)
		}
		if st.gone {
			for _, k := range keys {
				if v := liveDo(t, nc, br, "PTTL", k); v != "-2" {
					t.Fatalf("step %d (%s): PTTL %s = %s, want -2: the key outlived its bucket's refill", i, st.desc, k, v)
				}
			}
		}
		eval := i == 0 // as after NOSCRIPT; then EVALSHA finds it
		var r liveResult
		for attempt := 1; ; attempt++ {
			r = liveCall(t, nc, br, set.cmd, eval, key, keys, st.set)
			// A set state is exact for the want values while less than
			// 400 µs pass between it and the call (measured 19-304 µs
			// from the state's TIME to the TIME after the call, the
			// script's first EVAL included, with three other test suites
			// on 2 cores): if more did, set it again.
			if st.set == nil || r.tb-r.setNow < 400 || attempt == 10 {
				break
			}
			t.Logf("step %d (%s): %d µs between the state and the call; again", i, st.desc, r.tb-r.setNow)
		}
		if len(st.want) != len(r.d) {
			t.Fatalf("step %d (%s): the table wants %d fields, the decision has %d", i, st.desc, len(st.want), len(r.d))
		}
		for f, w := range st.want {
			if w != tw && r.d[f] != w {
				t.Errorf("step %d (%s): %s = %d, want %d (reply %q)", i, st.desc, liveField(f), r.d[f], w, r.line)
			}
		}
		if msg := twinExplains(lims, &r); msg != "" {
			t.Errorf("step %d (%s): %s", i, st.desc, msg)
		}
		if t.Failed() {
			t.FailNow()
		}
		prev = r.d
	}
}

// liveField names field f of a decision.
func liveField(f int) string {
	if f == 0 {
		return "allowed"
	}
	return fmt.Sprintf("%s[%d]", []string{"full_ms", "remaining", "wait_ms"}[f%3], (f-1)/3)
}

// liveCall runs one step's pipeline (see the file's comment).
func liveCall(t *testing.T, nc net.Conn, br *bufio.Reader, cmd *redis.Command, eval bool, key string, keys, set []string) liveResult {
	t.Helper()
	n := len(keys)
	var b []byte
	if set != nil {
		args := append([]string{liveSetScript, strconv.Itoa(n)}, keys...)
		b = redis.AppendCommand(b, "EVAL", append(args, set...)...)
	}
	for _, k := range keys {
		b = redis.AppendCommand(b, "GET", k)
	}
	b = redis.AppendCommand(b, "TIME")
	b = cmd.Append(b, key, eval)
	b = redis.AppendCommand(b, "TIME")
	for _, k := range keys {
		b = redis.AppendCommand(b, "GET", k)
	}
	for _, k := range keys {
		b = redis.AppendCommand(b, "PTTL", k)
	}
	b = redis.AppendCommand(b, "TIME")
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	r := liveResult{setNow: -1, d: make([]int64, bucket.DecisionLen(n))}
	if set != nil {
		vs, err := redistest.ReadReply(br)
		if err != nil || len(vs) != 1+n {
			t.Fatalf("setting the state: %q, %v", vs, err)
		}
		if r.setNow, err = strconv.ParseInt(vs[0], 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	r.pre = liveGets(t, br, n)
	r.ta = liveTime(t, br)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the script's reply: %v", err)
	}
	r.line = line
	if err := liveDecode(line, r.d); err != nil {
		t.Fatalf("the script's reply %q: %v", r.line, err)
	}
	r.tb = liveTime(t, br)
	r.post = liveGets(t, br, n)
	for i := 0; i < n; i++ {
		v, err := redistest.ReadReply(br)
		if err != nil || len(v) != 1 {
			t.Fatalf("PTTL: %q, %v", v, err)
		}
		ms, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			t.Fatalf("PTTL: %q", v[0])
		}
		r.pttl = append(r.pttl, ms)
	}
	r.tc = liveTime(t, br)
	return r
}

// twinExplains looks for an instant from r.ta to r.tb at which TakeAll,
// given the state the script read, decides as the script did and leaves
// the state Redis holds after it; "" when there is one, else what differs
// at r.ta.
func twinExplains(lims []bucket.Limit, r *liveResult) string {
	// A key that expires between the GET and the script changes nothing:
	// keys expire at their TAT or later (never earlier: measured, 200
	// keys of a 1 ms interval), and a TAT that has passed is a full
	// bucket to TakeAll as to the script.
	for now := r.ta; now <= r.tb; now++ {
		if twinAt(lims, r.pre, now, r) == "" {
			return ""
		}
	}
	return fmt.Sprintf("the Go twin explains no instant from Redis's TIME before the call (%d µs) to after it (%d µs): script reply %q, stored %v, PTTL %v, read %v; at the first instant the twin: %s",
		r.ta, r.tb, r.line, r.post, r.pttl, r.pre, twinAt(lims, r.pre, r.ta, r))
}

// twinAt compares TakeAll at now, on the state pre (raw values), with r:
// "" when they agree.
func twinAt(lims []bucket.Limit, pre []int64, now int64, r *liveResult) string {
	n := len(lims)
	tats := make([]float64, n)
	for i, v := range pre {
		if v >= 0 {
			tats[i] = float64(v) / 64 // as the script reads it
		}
	}
	fnow := float64(now)
	clamped := make([]bool, n)
	for i := range lims {
		clamped[i] = tats[i] > fnow+lims[i].Interval*lims[i].Burst
	}
	d := make([]int64, bucket.DecisionLen(n))
	ok := bucket.TakeAll(lims, tats, fnow, d)
	for f := range d {
		if d[f] != r.d[f] {
			return fmt.Sprintf("decision %v (%s = %d)", d, liveField(f), d[f])
		}
	}
	for i := range lims {
		if !ok && !clamped[i] {
			// Not written: as read, or expired since, its TAT passed.
			if r.post[i] != pre[i] && !(r.post[i] == -1 && tats[i] <= float64(r.tc)) {
				return fmt.Sprintf("decision %v, key %d unchanged at %d, Redis holds %d", d, i, pre[i], r.post[i])
			}
			continue
		}
		want := int64(math.Floor(tats[i]*64 + 0.5))
		px := int64(math.Ceil((tats[i] - fnow) / 1000))
		if px < 1 {
			px = 1
		}
		lag := (r.tc-now)/1000 + 2 // ms between the SET and the PTTL, and Redis's ms rounding
		if r.post[i] != want || r.pttl[i] > px || r.pttl[i] < px-lag {
			return fmt.Sprintf("decision %v, key %d stored %d expiring in %d ms, Redis holds %d with PTTL %d", d, i, want, px, r.post[i], r.pttl[i])
		}
	}
	return ""
}

// liveGets reads n GET replies as raw integers (-1: no key).
func liveGets(t *testing.T, br *bufio.Reader, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		v, err := redistest.ReadReply(br)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		if len(v) == 0 {
			out[i] = -1
			continue
		}
		if out[i], err = strconv.ParseInt(v[0], 10, 64); err != nil {
			t.Fatalf("GET: %q is not the script's format (an integer): %v", v[0], err)
		}
	}
	return out
}

// liveDecode parses the script's reply line, "+" and numbers split by a
// space, into d (len(d) of them).
func liveDecode(line string, d []int64) error {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSuffix(line, "\r\n"), "+"))
	if len(f) != len(d) {
		return fmt.Errorf("%d numbers, want %d", len(f), len(d))
	}
	for i := range f {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return err
		}
		d[i] = v
	}
	return nil
}

// liveTime reads TIME's reply in µs since EpochUS, the script's time.
func liveTime(t *testing.T, br *bufio.Reader) int64 {
	t.Helper()
	v, err := redistest.ReadReply(br)
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %q, %v", v, err)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	us, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME: %q", v)
	}
	return sec*1000000 + us - bucket.EpochUS
}

// liveDo runs one command and returns its reply line (without the type
// byte), for integer and status replies.
func liveDo(t *testing.T, nc net.Conn, br *bufio.Reader, verb string, args ...string) string {
	t.Helper()
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(redis.AppendCommand(nil, verb, args...)); err != nil {
		t.Fatal(err)
	}
	v, err := redistest.ReadReply(br)
	if err != nil || len(v) != 1 {
		t.Fatalf("%s: %q, %v", verb, v, err)
	}
	return v[0]
}
