package tollgate

// Leases (lease.go) against a real redis-server: granted only above the
// threshold, never more admitted than charged, what leases hold kept out
// of the bucket, give-backs clamped at burst, and a reload, a Redis that
// lost its data and a clock stepped back with leases out.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// leased is a middleware on addr with a lease of max requests (ttl) over a
// limit of burst requests refilled at average per period, 3 replicas and
// no heartbeat (3 pods counted), the decision header on.
func leased(t *testing.T, addr string, average int64, period string, burst, max int64, ttl string) *Tollgate {
	t.Helper()
	return hotSecond(handlerOn(t, addr, func(c *config.Config) {
		c.Average, c.Period, c.Burst = average, period, burst
		c.Replicas = 3
		c.Redis.Heartbeat = "0"
		c.DecisionHeader = "X-Decision"
		c.Lease = config.Lease{Max: max, TTL: ttl}
	}))
}

// hotSecond has h's client hot from its second call within the gap (one
// short gap, not hotStreak): these tests count from there.
func hotSecond(h *Tollgate) *Tollgate {
	h.top.lease.hot = 1
	return h
}

// scriptCalls is how many times Redis at addr ran a script (EVALSHA and
// EVAL) so far.
func scriptCalls(t *testing.T, addr string) int {
	t.Helper()
	info := strings.Join(redistest.Do(t, addr, "INFO", "commandstats"), "\n")
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, verb := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if strings.HasPrefix(line, verb) {
				v := strings.SplitN(strings.TrimPrefix(line, verb), ",", 2)[0]
				c, _ := strconv.Atoi(v)
				n += c
			}
		}
	}
	return n
}

// sendAll sends n requests for key to h, one after another, and returns
// how many passed and the decisions.
func sendAll(h http.Handler, key string, n int) (int, map[string]int) {
	passed, how := 0, map[string]int{}
	for i := 0; i < n; i++ {
		rec := serve(h, key)
		if rec.Code == http.StatusOK {
			passed++
		}
		how[rec.Header().Get("X-Decision")]++
	}
	return passed, how
}

func TestLeaseGrantedAboveTheThresholdOnly(t *testing.T) {
	addr := redistest.Start(t)
	// 100 an hour, burst 100; a lease holds 10; 3 pods: a grant needs 60
	// left after the request. So leases are granted while the bucket
	// holds 61 or more, and the last requests are Redis's. The client's
	// first call asks for none (it is not yet hot: ask), its second does.
	h := leased(t, addr, 100, "1h", 100, 10, "10s")
	before := scriptCalls(t, addr)
	passed, how := sendAll(h, "k", 130)
	calls := scriptCalls(t, addr) - before
	t.Logf("130 requests: %d passed, decisions %v, %d script calls", passed, how, calls)
	if passed != 100 {
		t.Errorf("%d passed, want the burst, 100", passed)
	}
	// Grants at 99, 88, 77, 66 left (each leaves 11 fewer: the request
	// and 10 leased); at 55 the bucket is under the threshold.
	if how["lease"] != 40 {
		t.Errorf("%d admitted from leases, want 40 (4 leases of 10)", how["lease"])
	}
	if how["lease"]+how["redis"]+how["cache"] != 130 {
		t.Errorf("decisions %v: every request by a lease, Redis or the deny cache", how)
	}
	if calls > 130-40 {
		t.Errorf("%d script calls for 130 requests, 40 of them from leases", calls)
	}
}

func TestLeaseHeadersCountDown(t *testing.T) {
	addr := redistest.Start(t)
	h := leased(t, addr, 100, "1h", 100, 10, "10s")
	var rs []string
	for i := 0; i < 12; i++ {
		rec := serve(h, "k")
		rs = append(rs, rec.Header().Get("RateLimit"))
	}
	// The first request: 99 left; the second, the grant's: 99 - 1 - 10
	// left in Redis, plus the 10 leased; then one fewer each, the lease's
	// included.
	for i, want := range []int{99, 98, 97, 96, 95, 94, 93, 92, 91, 90, 89, 88} {
		if !strings.Contains(rs[i], fmt.Sprintf(";r=%d;", want)) {
			t.Errorf("request %d: RateLimit %q, want r=%d", i+1, rs[i], want)
		}
	}
}

func TestLeaseHeldIsOutOfTheBucket(t *testing.T) {
	addr := redistest.Start(t)
	// 100 per 10 s (one token every 100 ms), burst 100. Pod a takes a
	// lease of 10 (with its second request) and spends none of it; 2 s
	// later the bucket has earned 20 tokens back, but holds at most 90
	// while a's lease lives: pod b then gets 90 (and what it earns
	// meanwhile), a its 10.
	a := leased(t, addr, 100, "10s", 100, 10, "10s")
	b := leased(t, addr, 100, "10s", 100, 10, "10s")
	for i := 0; i < 2; i++ {
		if rec := serve(a, "k"); rec.Code != http.StatusOK || rec.Header().Get("X-Decision") != "redis" {
			t.Fatalf("a's request %d: %d %q", i+1, rec.Code, rec.Header().Get("X-Decision"))
		}
	}
	time.Sleep(2 * time.Second)
	start := time.Now()
	pb, howB := sendAll(b, "k", 130)
	pa, howA := sendAll(a, "k", 10)
	earned := int(time.Since(start)/(100*time.Millisecond)) + 1
	t.Logf("b: %d passed %v; a: %d passed %v; %d earned meanwhile at most", pb, howB, pa, howA, earned)
	if pa != 10 || howA["lease"] != 10 {
		t.Errorf("a: %d passed %v, want its lease's 10", pa, howA)
	}
	if pb+pa > 100+earned {
		t.Errorf("%d + %d passed: more than the burst (100) and %d earned", pb, pa, earned)
	}
	if pb < 90 {
		t.Errorf("b: %d passed, want at least 90", pb)
	}
}

func TestLeaseGivenBackWhenItEnds(t *testing.T) {
	addr := redistest.Start(t)
	// A lease of 10 for 300 ms, spent 3 of: its 7 go back. 100 an hour
	// (36 s a token), so the bucket earns nothing meanwhile: afterwards it
	// holds 100 - 2 - 3 = 95 (the two requests before the lease and the 3
	// spent).
	h := leased(t, addr, 100, "1h", 100, 10, "300ms")
	if p, how := sendAll(h, "k", 5); p != 5 || how["lease"] != 3 {
		t.Fatalf("5 requests: %d passed %v, want 2 by Redis and 3 from the lease", p, how)
	}
	key := clientKeyOf(h, "k")
	// 12 tokens out (432 s to full) until the give-back; 5 after (180 s).
	redistest.WaitFor(t, func() bool {
		v := redistest.Do(t, addr, "PTTL", key)
		ms, _ := strconv.ParseInt(v[0], 10, 64)
		return ms < 250000
	}, "the lease's 7 to go back")
	probe := handlerOn(t, addr, func(c *config.Config) { c.Average, c.Period, c.Burst = 100, "1h", 100 })
	if got := serve(probe, "k").Header().Get("RateLimit"); !strings.Contains(got, ";r=94;") {
		t.Errorf("after the give-back: RateLimit %q, want r=94 (95 before this request)", got)
	}
}

// setTAT stores key's bucket as missing tokens of interval µs each, on
// Redis's clock, in the script's format.
func setTAT(t *testing.T, addr, key string, tokens, interval float64) {
	t.Helper()
	now := redisNowUS(t, addr)
	tat := now + tokens*interval
	redistest.Do(t, addr, "SET", key, strconv.FormatFloat(tat*64, 'f', 0, 64), "PX", strconv.FormatInt(int64(tokens*interval/1000)+1, 10))
}

// redisNowUS is Redis's TIME in µs since EpochUS.
func redisNowUS(t *testing.T, addr string) float64 {
	t.Helper()
	v := redistest.Do(t, addr, "TIME")
	s, _ := strconv.ParseInt(v[0], 10, 64)
	us, _ := strconv.ParseInt(v[1], 10, 64)
	return float64(s*1000000+us) - bucket.EpochUS
}

func TestLeaseGiveBackNeverAboveWhatLeasesLeave(t *testing.T) {
	addr := redistest.Start(t)
	h := leased(t, addr, 100, "1h", 100, 10, "10s")
	ls := h.top.lease
	key := clientKeyOf(h, "k")
	// Another pod's live lease holds 30; the bucket misses 35. Giving
	// back 10 leaves it missing 30, not 25: what leases hold stays out.
	redistest.Do(t, addr, "HSET", key+"}l", "other-pod/x", fmt.Sprintf("30 %.0f", redisNowUS(t, addr)+5e6))
	setTAT(t, addr, key, 35, 36e6)
	ls.table.giveBack([]*lease{{left: 10, until: "0", key: key, field: ls.field, back: ls.back}})
	probe := handlerOn(t, addr, func(c *config.Config) { c.Average, c.Period, c.Burst = 100, "1h", 100 })
	if got := serve(probe, "k").Header().Get("RateLimit"); !strings.Contains(got, ";r=69;") {
		t.Errorf("RateLimit %q, want r=69: 70 left (100 less the 30 leased), less this request", got)
	}
	// With nothing leased, 20 back to a bucket missing 5: full, not more.
	redistest.Do(t, addr, "DEL", key+"}l")
	setTAT(t, addr, key, 5, 36e6)
	ls.table.giveBack([]*lease{{left: 20, until: "0", key: key, field: ls.field, back: ls.back}})
	if got := serve(probe, "k").Header().Get("RateLimit"); !strings.Contains(got, ";r=99;") {
		t.Errorf("RateLimit %q, want r=99: a full bucket (100), less this request", got)
	}
}

func TestLeaseNotForFailClosed(t *testing.T) {
	addr := redistest.Start(t)
	h := handlerOn(t, addr, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 3, "0", "X-Decision"
		c.Lease = config.Lease{Max: 10}
		c.FailureMode = "closed"
	})
	if _, how := sendAll(h, "k", 20); how["lease"] != 0 {
		t.Errorf("a policy that fails closed: %v, want no lease", how)
	}
}

func TestLeaseSurvivesAReloadAndARedisThatLostItsData(t *testing.T) {
	addr := redistest.Start(t)
	cfg := func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 3, "0", "X-Decision"
		c.Lease = config.Lease{Max: 10, TTL: "10s"}
		c.Redis.Username = "reload-test"
	}
	h1 := hotSecond(handlerOn(t, addr, cfg))
	if _, how := sendAll(h1, "k", 3); how["lease"] != 1 {
		t.Fatalf("before the reload: %v", how)
	}
	// A reload: a new instance with the same limits spends the same lease.
	h2 := hotSecond(handlerOn(t, addr, cfg))
	redistest.Do(t, addr, "FLUSHALL") // and Redis lost everything meanwhile
	if _, how := sendAll(h2, "k", 9); how["lease"] != 9 {
		t.Errorf("after the reload: %v, want the lease's 9 left", how)
	}
	// Spent: the next request is Redis's, on a bucket that starts full.
	if rec := serve(h2, "k"); rec.Header().Get("X-Decision") != "redis" || !strings.Contains(rec.Header().Get("RateLimit"), ";r=99;") {
		t.Errorf("after the lease: %q %q, want Redis's decision on a full bucket (r=99 with a new lease of 10 after it: 89+10)",
			rec.Header().Get("X-Decision"), rec.Header().Get("RateLimit"))
	}
}

func TestLeaseFieldsFromAClockSteppedBackAreDropped(t *testing.T) {
	addr := redistest.Start(t)
	h := leased(t, addr, 100, "1h", 100, 10, "1s")
	key := clientKeyOf(h, "k")
	// A field whose end lies an hour ahead: granted before Redis's clock
	// stepped back an hour. It would hold 50 tokens for that hour; it is
	// dropped, as a field no live lease (ttl at most 10 s) can have.
	redistest.Do(t, addr, "HSET", key+"}l", "other-pod/x", fmt.Sprintf("50 %d", (time.Now().UnixMicro()-bucket.EpochUS)+3600e6))
	serve(h, "k") // the first call asks for no lease (ask)
	rec := serve(h, "k")
	if got := rec.Header().Get("RateLimit"); !strings.Contains(got, ";r=98;") {
		t.Errorf("RateLimit %q, want r=98 (the stale field ignored; 88 in Redis and 10 leased)", got)
	}
	// A live field of another pod's is counted.
	redistest.Do(t, addr, "HSET", key+"}l", "other-pod/y", fmt.Sprintf("30 %d", (time.Now().UnixMicro()-bucket.EpochUS)+5e6))
	// The bucket misses 12 (88 in Redis), and leases hold 40 of its 100:
	// it holds 60, 59 after the probe's request; the probe's own lease of
	// 1 is counted in its r.
	probe := leased(t, addr, 100, "1h", 100, 1, "1s")
	if got := serve(probe, "k").Header().Get("RateLimit"); !strings.Contains(got, ";r=59;") {
		t.Errorf("RateLimit %q, want r=59 (60 the leases leave, less this request)", got)
	}
}

func TestLeaseDecisionsCounted(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("leased")
	h := hotSecond(handlerOn(t, addr, func(c *config.Config) {
		c.Class, c.Average, c.Period, c.Burst = class, 100, "1h", 100
		c.Replicas, c.Redis.Heartbeat = 3, "0"
		c.Lease = config.Lease{Max: 10}
	}))
	sendAll(h, "k", 12) // 2 by Redis (the second asks), 10 from the lease
	m := scrape(t)
	if got := m[requests(class, class, "lease", "allowed")]; got != 10 {
		t.Errorf("%s = %v, want 10", requests(class, class, "lease", "allowed"), got)
	}
	if got := m[requests(class, class, "redis", "allowed")]; got != 2 {
		t.Errorf("%s = %v, want 2", requests(class, class, "redis", "allowed"), got)
	}
}

func TestLeaseConfigFromStrings(t *testing.T) {
	for _, tc := range []struct {
		lease config.Lease
		ttl   time.Duration
		err   string
	}{
		{lease: config.Lease{Max: 10}, ttl: time.Second},
		{lease: config.Lease{Max: 10, TTL: "2"}, ttl: 2 * time.Second},
		{lease: config.Lease{Max: 10, TTL: "1.5s"}, ttl: 1500 * time.Millisecond},
		{lease: config.Lease{Max: -1}, err: "lease.max: -1 is negative"},
		{lease: config.Lease{Max: 10, TTL: "11s"}, err: `lease.ttl: "11s" is longer than 10s`},
		{lease: config.Lease{Max: 10, TTL: "0"}, err: "lease.ttl"},
		{lease: config.Lease{Max: 10, TTL: "1ms"}, err: `lease.ttl: "1ms" is shorter than 10ms`},
		{lease: config.Lease{Max: 2000000}, err: "lease.max: 2000000 is more than 1000000"},
	} {
		got, err := config.CompileLease("lease", tc.lease)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: error %v, want %q", tc.lease, err, tc.err)
			}
			continue
		}
		if err != nil || got.TTL != int64(tc.ttl) || got.Max != tc.lease.Max {
			t.Errorf("%+v: %+v, %v; want ttl %v", tc.lease, got, err, tc.ttl)
		}
	}
}

func TestLeaseOnlyForAHotClient(t *testing.T) {
	addr := redistest.Start(t)
	// A lease of 40 for 100 ms is worth asking for when the pod would
	// spend a quarter of it in its ttl: calls 10 ms apart or closer. A
	// client calling every 30 ms gets none; one calling back to back does.
	h := leased(t, addr, 1000, "1h", 1000, 40, "100ms") // grants need 240 left
	for i := 0; i < 5; i++ {
		if rec := serve(h, "slow"); rec.Header().Get("X-Decision") != "redis" {
			t.Fatalf("a client every 30 ms: request %d decided %q, want redis (no lease)", i+1, rec.Header().Get("X-Decision"))
		}
		time.Sleep(30 * time.Millisecond)
	}
	// Sleeps only lengthen the gaps, so the check above cannot pass by
	// chance; the hot client's 3 calls come within microseconds.
	if _, how := sendAll(h, "hot", 3); how["lease"] != 1 {
		t.Errorf("a client back to back: %v, want a lease from its second call", how)
	}
}

func TestLeaseNotForPairsOfCalls(t *testing.T) {
	addr := redistest.Start(t)
	// The default streak: two short gaps in a row. Calls in close pairs
	// every 30 ms (two connections cycling through the same keys, or two
	// clients sharing a hot slot) have one short gap at a time: no lease.
	h := handlerOn(t, addr, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 1000, "1h", 1000
		c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 3, "0", "X-Decision"
		c.Lease = config.Lease{Max: 40, TTL: "100ms"} // a gap of 10 ms; grants need 240 left
	})
	for i := 0; i < 4; i++ {
		_, how := sendAll(h, "pairs", 2)
		if how["redis"] != 2 {
			t.Fatalf("pair %d: %v, want both by Redis (no lease)", i+1, how)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// Three calls in a row: the third asks, the fourth spends.
	if _, how := sendAll(h, "run", 4); how["lease"] != 1 {
		t.Errorf("4 calls back to back: %v, want a lease from the third", how)
	}
}
