package tollgate

// Review of the admin endpoint (admin.go): faults on the request path,
// resets that do not reach a pod, keys the endpoint does not reset, replies
// the endpoint computes otherwise than the script, and writes Redis
// refused that the endpoint reports as done.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// reviewAdmin is an admin endpoint for class (it also turns the class's
// sync on in this process).
func reviewAdmin(t *testing.T, class string) http.Handler {
	t.Helper()
	cfg := CreateConfig()
	cfg.ServeAdmin = true
	cfg.AdminClasses = []string{class}
	adm, err := New(nil, nil, cfg, class+"-admin")
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

// redisTimeMS is Redis's TIME at addr, Unix ms.
func redisTimeMS(t *testing.T, addr string) int64 {
	t.Helper()
	r := redistest.Do(t, addr, "TIME")
	if len(r) != 2 {
		t.Fatalf("TIME: %q", r)
	}
	s, _ := strconv.ParseInt(r[0], 10, 64)
	us, _ := strconv.ParseInt(r[1], 10, 64)
	return s*1000 + us/1000
}

// A request of a class whose state is over adminStale old waits for the
// running sync, at most twice the Redis timeout (refresh), with a select
// on the sync's channel and a timer: the select the style guide keeps off
// the request path (under Yaegi, concurrent selects lose wakeups). Many
// requests wait at once here, Redis paused for 200 ms: each must be done
// when the sync is (about 200 ms), none waiting out its timer (a lost
// wakeup) or for ever (both lost).
func TestReviewAdminWaitersWakeWithTheSync(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-wake")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 1000, "1s", 1000
		c.Redis.Timeout = "1s" // a waiter's timer: 2 s
	})
	reviewAdmin(t, class)
	if rec := serve(lim, "k"); rec.Code != 200 {
		t.Fatalf("warm-up: %d", rec.Code)
	}
	a := lim.adm
	old := lim.be.now() - int64(2*time.Second) // the class was idle for 2 s
	atomic.StoreInt64(&a.fresh, old)
	atomic.StoreInt64(&a.started, old)
	redistest.Do(t, addr, "CLIENT", "PAUSE", "200", "ALL")
	const n = 20
	var done int64
	took := make([]int64, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			start := time.Now()
			serve(lim, "k"+strconv.Itoa(i))
			atomic.StoreInt64(&took[i], int64(time.Since(start)))
			atomic.AddInt64(&done, 1)
		}(i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for atomic.LoadInt64(&done) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d := atomic.LoadInt64(&done); d < n {
		t.Fatalf("%d of %d requests still waiting 5 s after Redis was paused for 200 ms (a wakeup lost for ever)", n-d, n)
	}
	for i := range took {
		if d := time.Duration(atomic.LoadInt64(&took[i])); d > 1500*time.Millisecond {
			t.Errorf("request %d took %v: it waited out its timer (2 s), not the sync (200 ms)", i, d)
		}
	}
}

// A reset made on another pod while this one was idle: its first request
// syncs (in its own time) and must drop the key's refusal from its deny
// cache. sync applies a reset it had not seen before only when it is
// under 1.6 s old (resetFresh), so a pod idle a little longer keeps
// refusing the key until its refusal runs out (here 6 s; with 10 an
// hour, 6 minutes).
func TestReviewAdminResetReachesIdlePod(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-idle")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
	})
	reviewAdmin(t, class)
	for i := 0; i < 10; i++ {
		serve(lim, "k")
	}
	if rec := serve(lim, "k"); rec.Code != 429 {
		t.Fatalf("the 11th request: %d, want 429", rec.Code)
	}
	// Another pod's DELETE ?class=C&key=k (reset, then adminMark), as
	// its admin endpoint writes it.
	key := bucket.ClientKey(class, "h:k")
	redistest.Do(t, addr, "DEL", key, key+"}d")
	redistest.Do(t, addr, "ZADD", resetsKey(class), strconv.FormatInt(redisTimeMS(t, addr), 10), key)
	time.Sleep(2 * time.Second) // this pod serves nothing of the class for 2 s
	if rec := serve(lim, "k"); rec.Code != 200 {
		t.Fatalf("after another pod's reset and a 2 s idle spell: %d, want 200 (the bucket is full; the reset must drop the cached refusal)", rec.Code)
	}
}

// DELETE refills the key's bucket: with leases, the bucket's lease hash
// (K}l) still holds the pods' leases after the reset (and this pod forgot
// its own without giving it back), so the script keeps their tokens out
// of the "refilled" bucket.
func TestReviewAdminResetRefillsLeasedBucket(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-lease")
	lim := hotSecond(handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Replicas = 3
		c.Redis.Heartbeat = "0"
		c.DecisionHeader = "X-Decision"
		c.Lease = config.Lease{Max: 10, TTL: "10s"}
	}))
	adm := reviewAdmin(t, class)
	sendAll(lim, "k", 2) // the second asks for a lease of 10: granted
	key := bucket.ClientKey(class, "h:k")
	if n := redistest.Do(t, addr, "HLEN", key+"}l"); len(n) != 1 || n[0] != "1" {
		t.Fatalf("no lease granted: HLEN %s}l = %q", key, n)
	}
	if rec := adminReq(t, adm, "DELETE", "class="+class+"&key=k", ""); rec.Code != 204 {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	v := adminState(t, adm, class, "k")
	passed, how := sendAll(lim, "k", 100)
	if passed != 100 {
		t.Fatalf("after DELETE (GET said %d left): %d of 100 requests passed (%v), want 100: the bucket refilled", v.Policies[0].Remaining, passed, how)
	}
}

// forget drops a lease entry that is an ask still out: the ask's answer
// (granted) then finds no entry and never closes the channel that a
// refused request of the same client waits on (leaseRefused: <-ch), so
// that request waits for ever, its goroutine with it.
func TestReviewAdminForgetWakesLeaseWaiters(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-ask")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Redis.Heartbeat = "0"
		c.Lease = config.Lease{Max: 10, TTL: "10s"}
	})
	reviewAdmin(t, class)
	ls := lim.top.lease
	key := bucket.ClientKey(class, "h:k")
	k := ls.tag + key
	if !ls.table.ask(k) { // request A's call, asking for a lease, is out
		t.Fatal("ask refused")
	}
	ch := ls.table.pending(k) // request B, refused, waits for A's answer
	if ch == nil {
		t.Fatal("no ask pending")
	}
	lim.adm.forget(key) // an operator resets the key meanwhile
	d := make([]int64, lim.top.decisionLen)
	ls.table.granted(k, ls, key, 0, 0, "0", d) // A's answer: no lease
	closed := false
	select {
	case <-ch:
		closed = true
	default:
	}
	if !closed {
		t.Fatal("a reset during a lease ask: the waiters' channel is never closed (request B waits for ever)")
	}
}

// The class's overrides are one hash, read by every pod when their
// version changes and by every PUT (sweepOverrides). 33,000 overrides
// written past PUT's bound (maxOverrides) by hand: the reads stay within
// the reply reader's bounds (HRANDFIELD past maxAdminFields), every pod's
// sync goes on, and PUT answers 400 naming the bound, not 503.
func TestReviewAdminManyOverridesWedgeTheClass(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-many")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
		c.MaxOverrides = 30000
	})
	adm := reviewAdmin(t, class)
	now := redisTimeMS(t, addr)
	redistest.Do(t, addr, "EVAL", `
for i = 1, 33000 do redis.call('HSET', KEYS[1], 'o:tg{o' .. i .. '}', '100 100 1000000000 ' .. ARGV[1]) end
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1`, "1", adminKey(class), strconv.FormatInt(now+7200000, 10))
	rec := adminReq(t, adm, "PUT", "class="+class+"&key=k", `{"average":50,"burst":50}`)
	var p adminProblem
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	if rec.Code != 400 || p.Field != "key" || !strings.Contains(p.Detail, "maxOverrides") {
		t.Errorf("PUT with 33,000 overrides in the class's hash: %d %s, want 400 naming maxOverrides", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	before := atomic.LoadInt64(&lim.adm.syncs)
	set := time.Now()
	for time.Since(set) < 3*time.Second && atomic.LoadInt64(&lim.adm.syncs) < before+2 {
		serve(lim, "other")
		time.Sleep(50 * time.Millisecond)
	}
	if n := atomic.LoadInt64(&lim.adm.n); atomic.LoadInt64(&lim.adm.syncs) < before+2 || n != 30000 {
		t.Errorf("33,000 overrides: syncs %d then %d (last failed: %d), %d kept; want syncs going on and 30,000 kept (maxOverrides)",
			before, atomic.LoadInt64(&lim.adm.syncs), atomic.LoadInt32(&lim.adm.failed), n)
	}
}

// A class with plans: a client is charged on its plan's bucket (key
// suffix ":<plan>"), not the top level's. GET shows the top-level bucket
// it never uses, and DELETE refills that one alone: the client stays
// refused.
func TestReviewAdminResetPlanClient(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-plans")
	lim := handlerOn(t, addr, plansConfig(class))
	adm := reviewAdmin(t, class)
	if n := admitted(lim, 5, "GET", "/", "X-API-Key", "k", "X-Plan", "pro"); n != 4 {
		t.Fatalf("pro (burst 4): %d of 5 admitted", n)
	}
	v := adminState(t, adm, class, "k")
	if rec := adminReq(t, adm, "DELETE", "class="+class+"&key=k", ""); rec.Code != 204 {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	if n := admitted(lim, 1, "GET", "/", "X-API-Key", "k", "X-Plan", "pro"); n != 1 {
		t.Fatalf("a pro client with its bucket spent (GET showed %+v), after DELETE: refused, want admitted (its buckets refilled)", v.Policies)
	}
}

// GET computes reset from the stored TAT without the script's clamp
// (a TAT more than a full bucket ahead is read as now + burst x interval):
// after a reload that lowered the limit, or an override that ended, or a
// value that is not a finite number, it reports waits the script never
// makes the client wait.
func TestReviewAdminResetIsTheScripts(t *testing.T) {
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc  string
		value func(nowMS int64) string
	}{
		{desc: "a TAT 50 h ahead (a limit of 1 an hour, burst 50, spent, then lowered by a reload)", value: func(nowMS int64) string {
			return strconv.FormatInt(((nowMS*1000-bucket.EpochUS)+50*3600*1000000)*64, 10)
		}},
		{desc: "inf", value: func(int64) string { return "inf" }},
		{desc: "1e30", value: func(int64) string { return "1e30" }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			class := uniqueName("review-adm-clamp")
			lim := handlerOn(t, addr, func(c *config.Config) {
				c.Class = class
				c.Average, c.Period, c.Burst = 10, "1m", 10
			})
			adm := reviewAdmin(t, class)
			key := bucket.ClientKey(class, "h:k")
			redistest.Do(t, addr, "SET", key, tc.value(redisTimeMS(t, addr)), "PX", "600000")
			v := adminState(t, adm, class, "k")
			p := v.Policies[0]
			rec := serve(lim, "k") // the script: the TAT clamped to a full bucket ahead
			if p.Reset < 55 || p.Reset > 60 || p.Remaining != 0 {
				t.Fatalf("GET: remaining %d, reset %d s; want 0 and 60, a full bucket ahead (burst 10 at 6 s: the script clamps; it answered the next request %d, %s)",
					p.Remaining, p.Reset, rec.Code, rec.Header().Get("RateLimit"))
			}
		})
	}
}

// DELETE ?override=0 (or =false) removes the override: any value of the
// parameter does.
func TestReviewAdminOverrideZeroKeepsOverride(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-over0")
	handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
	})
	adm := reviewAdmin(t, class)
	if rec := adminReq(t, adm, "PUT", "class="+class+"&key=k", `{"average":50,"burst":50}`); rec.Code != 200 {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	for _, q := range []string{"override=0", "override=false"} {
		rec := adminReq(t, adm, "DELETE", "class="+class+"&key=k&"+q, "")
		if v := adminState(t, adm, class, "k"); rec.Code == 204 && v.Policies[0].Override == nil {
			t.Fatalf("DELETE ?%s: %d and the override is gone; want it kept (a reset) or a 400", q, rec.Code)
		}
	}
}

// Redis refusing a write (maxmemory with noeviction: -OOM; a replica
// after a failover: -READONLY) is an error reply, which SideDo returns as
// data: PUT and DELETE report success for writes that never happened
// (and a DELETE whose r: field was refused never reaches the other pods).
func TestReviewAdminRefusedWriteIsNotSuccess(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-oom")
	handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
	})
	adm := reviewAdmin(t, class)
	redistest.Do(t, addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	redistest.Do(t, addr, "CONFIG", "SET", "maxmemory", "1")
	defer redistest.Do(t, addr, "CONFIG", "SET", "maxmemory", "0")
	rec := adminReq(t, adm, "PUT", "class="+class+"&key=k", `{"average":50,"burst":50}`)
	stored := redistest.Do(t, addr, "HGET", adminKey(class), "o:"+bucket.ClientKey(class, "h:k"))
	if rec.Code/100 == 2 && (len(stored) == 0 || stored[0] == "") {
		t.Errorf("PUT, Redis out of memory: %d %s, but no override stored; want 503", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	rec = adminReq(t, adm, "DELETE", "class="+class+"&key=k2", "")
	mark := redistest.Do(t, addr, "ZSCORE", resetsKey(class), bucket.ClientKey(class, "h:k2"))
	if rec.Code/100 == 2 && (len(mark) == 0 || mark[0] == "") {
		t.Errorf("DELETE, Redis out of memory: %d, but no reset recorded for the other pods; want 503", rec.Code)
	}
}

// A pod without an admin middleware naming the class (the endpoint runs
// on other replicas, or on an ops Traefik) syncs once its heartbeat sees
// the class's hashes: within a heartbeat (redis.heartbeat, here 200 ms)
// of the first change, as docs/admin.md says.
func TestReviewAdminOverrideOnPodWithoutAdminMiddleware(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-remote")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
		c.Redis.Heartbeat = "200ms"
	})
	serve(lim, "other") // its first check beats
	redistest.WaitFor(t, func() bool {
		r := redistest.Do(t, addr, "EXISTS", "tg{hb:"+class+"}")
		return len(r) == 1 && r[0] == "1"
	}, "the class's first heartbeat")
	// Another pod's PUT ?class=C&key=k {"average":50,"burst":50,"period":"1h","ttl":"1h"}.
	key := bucket.ClientKey(class, "h:k")
	o := config.Override{Average: 50, Burst: 50, Period: time.Hour, ExpiresMS: redisTimeMS(t, addr) + 3600000}
	redistest.Do(t, addr, "HSET", adminKey(class), "o:"+key, config.EncodeOverride(o))
	redistest.Do(t, addr, "HINCRBY", adminKey(class), "v", "1")
	redistest.Do(t, addr, "ZADD", resetsKey(class), strconv.FormatInt(redisTimeMS(t, addr), 10), key)
	set := time.Now()
	for time.Since(set) < 1500*time.Millisecond {
		if rec := serve(lim, "k"); strings.Contains(rec.Header().Get("RateLimit-Policy"), "q=50;") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("an override set by another pod's admin endpoint: not honoured within 1.5 s (a heartbeat of 200 ms) on a pod without an admin middleware")
}

// PUT checks the override against the class's policy (WithOverride) but
// not against its shards (Split): a burst that leaves less than one
// request per shard is stored and answered 200, and then every pod
// refuses to build it (buildOverride logs and returns nil): the key keeps
// the class's limit while GET shows the override.
func TestReviewAdminShardedOverrideIsChecked(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-shards")
	handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 20, "1m", 20
		c.Shards = 4
	})
	adm := reviewAdmin(t, class)
	rec := adminReq(t, adm, "PUT", "class="+class+"&key=k", `{"average":50,"burst":2}`)
	var p adminProblem
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	if rec.Code != 400 || p.Field != "burst" {
		t.Fatalf("PUT of burst 2 over 4 shards: %d %s; want 400 naming burst (no pod can apply it)", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
}

// New runs on every reload with no close hook: a limiter whose
// configuration was replaced must not stay reachable (with its next, the
// old router's whole chain). The first New of a build (after buildGap)
// drops the limiters of the builds before it (admins.built), whatever
// their class.
func TestReviewAdminRetiredLimiterIsCollected(t *testing.T) {
	class := uniqueName("review-adm-retired")
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst = 60, "1m", 5
	cfg.Class = class
	cfg.Redis.Endpoints = []string{"127.0.0.1:1"}
	if _, err := New(nil, http.NotFoundHandler(), cfg, "api"); err != nil {
		t.Fatal(err)
	}
	a := shared.admins.forClass(class)
	if a.latest() == nil {
		t.Fatal("the limiter did not join its class")
	}
	// The reload (a build after buildGap): the class's middleware is
	// gone, another one is built.
	gap := buildGap
	buildGap = 0
	defer func() { buildGap = gap }()
	handlerOn(t, "127.0.0.1:1", func(c *config.Config) { c.Class = uniqueName("review-adm-other") })
	a.mu.Lock()
	held := len(a.members)
	a.mu.Unlock()
	if held != 0 {
		t.Fatalf("a limiter whose class a reload dropped is still held: its class's members hold %d limiter(s)", held)
	}
}

// A class keyed by the client IP: the endpoint checks the key trimmed
// (parseAdminIP) but hashes it untrimmed (RemoteAddr = keys[0]), so
// " 203.0.113.7" (a space pasted with it, %20 in the URL) is accepted
// and names a key no request has: GET shows a full bucket, DELETE and
// PUT change nothing the client meets.
func TestReviewAdminIPKeyIsTheDataPaths(t *testing.T) {
	class := uniqueName("review-adm-ip")
	lim := handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = class
		c.SourceCriterion = nil
	})
	want := bucket.ClientKey(class, "ip:203.0.113.7")
	for _, k := range []string{"203.0.113.7", " 203.0.113.7", "203.0.113.7 "} {
		got, err := adminClientKey(lim.conf, []string{k})
		if err == nil && got != want {
			t.Errorf("key %q: client key %s, want %s (the data path's for 203.0.113.7) or a 400", k, got, want)
		}
	}
}

// exemptSourceRange leaves a client untouched (serveAny), but an
// overridden key is served by serveOverridden before the exemption is
// looked at: an exempt client whose key has an override is limited.
func TestReviewAdminOverrideKeepsExemption(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-exempt")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
		c.ExemptSourceRange = []string{"10.0.0.0/8"}
	})
	adm := reviewAdmin(t, class)
	if rec := adminReq(t, adm, "PUT", "class="+class+"&key=k", `{"average":1,"period":"1h","burst":1}`); rec.Code != 200 {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	waitSync(t, lim, "k")
	for i := 0; i < 3; i++ {
		req := request("GET", "/", "X-API-Key", "k")
		req.RemoteAddr = "10.1.2.3:4711"
		rec := httptest.NewRecorder()
		lim.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != "" {
			t.Fatalf("exempt client (10.1.2.3), request %d with an override of its key: %d, RateLimit-Policy %q; want 200 untouched", i, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
	}
}

// (As found: the resets of the last minute were one hash (admr), read whole by every
// pod's sync (every 300 ms) and by every change (adminMark, which alone
// drops the old ones; the hash has no expiry). A bulk reset of 33,000
// keys (a script after an incident) puts it past the reply reader's
// 65,536 elements: every sync fails (overrides and resets frozen), and
// every DELETE and PUT answers 503, including those that would have
// swept it, for good, even once the resets are minutes old. They are a
// sorted set now, read from the last read's time, at most maxResetsRead
// at once.)
func TestReviewAdminManyResetsWedgeTheClass(t *testing.T) {
	addr := redistest.Start(t)
	class := uniqueName("review-adm-resets")
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
	})
	adm := reviewAdmin(t, class)
	old := strconv.FormatInt(redisTimeMS(t, addr)-10*60*1000, 10) // 10 minutes ago: past resetKeep
	redistest.Do(t, addr, "EVAL", `for i = 1, 33000 do redis.call('ZADD', KEYS[1], ARGV[1], 'tg{r' .. i .. '}') end return 1`, "1", resetsKey(class), old)
	if rec := adminReq(t, adm, "DELETE", "class="+class+"&key=k", ""); rec.Code != 204 {
		t.Errorf("DELETE with 33,000 resets 10 minutes old in the class's hash: %d %s, want 204", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	before := atomic.LoadInt64(&lim.adm.syncs)
	waitFor := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(waitFor) && atomic.LoadInt64(&lim.adm.syncs) == before {
		serve(lim, "other")
		time.Sleep(50 * time.Millisecond)
	}
	if atomic.LoadInt64(&lim.adm.syncs) == before {
		t.Errorf("no sync succeeded within 1.5 s (last failed: %d): the class's overrides and resets are frozen", atomic.LoadInt32(&lim.adm.failed))
	}
}
