package e2e

// The fleet suite: three real Traefik v3.6.12 processes (scripts/traefik.sh)
// loading the plugin in local mode, one real redis-server, one backend, all
// on loopback. Traffic goes through Traefik's entrypoints.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type fleetEnv struct {
	t     *testing.T
	redis *Redis
	fleet *Fleet
}

// fleetRedis skips the test without a Traefik binary (fails under CI), and
// starts a redis-server in a fresh directory, killed at the test's end.
func fleetRedis(t *testing.T) (string, *Redis) {
	t.Helper()
	if _, err := TraefikBinary(); err != nil {
		if NeedTraefik(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := StartRedis(dir)
	if err != nil {
		if NeedTraefik(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return dir, r
}

// startFleet starts a redis-server and n replicas serving conf(redisAddr).
func startFleet(t *testing.T, n int, conf func(redisAddr string) map[string]interface{}, routers ...string) *fleetEnv {
	t.Helper()
	dir, r := fleetRedis(t)
	fe := fleetIn(t, dir, n, conf(r.Addr), routers...)
	fe.redis = r
	return fe
}

// fleetIn starts n replicas serving conf in dir, stopped at the test's
// end (their logs shown when it failed), once routers are enabled.
func fleetIn(t *testing.T, dir string, n int, conf map[string]interface{}, routers ...string) *fleetEnv {
	t.Helper()
	f, err := StartFleet(dir, n, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			for _, tr := range f.Replicas {
				if tr != nil {
					t.Logf("%s log:\n%s", tr.Name, tr.Log())
				}
			}
		}
	})
	if err := f.WaitRouters("enabled", routers...); err != nil {
		t.Fatal(err)
	}
	return &fleetEnv{t: t, fleet: f}
}

// route is one router and, when opts is set, its own Tollgate middleware
// (named name+"-limit", so its default class is that name).
type route struct {
	name, rule string
	opts       map[string]interface{}
}

func dynamicConf(routes ...route) map[string]interface{} {
	routers, mws := map[string]interface{}{}, map[string]interface{}{}
	for _, r := range routes {
		rt := map[string]interface{}{"rule": r.rule, "service": "backend", "entryPoints": []interface{}{"web"}}
		if r.opts != nil {
			mws[r.name+"-limit"] = map[string]interface{}{"plugin": map[string]interface{}{"tollgate": r.opts}}
			rt["middlewares"] = []interface{}{r.name + "-limit"}
		}
		routers[r.name] = rt
	}
	h := map[string]interface{}{"routers": routers}
	if len(mws) > 0 {
		h["middlewares"] = mws
	}
	return map[string]interface{}{"http": h}
}

// limitOpts is a Tollgate configuration on redisAddr keyed by X-API-Key,
// with kv overriding (string keys, any values).
func limitOpts(redisAddr string, kv ...interface{}) map[string]interface{} {
	return withOptions(map[string]interface{}{
		"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
		"redis":           map[string]interface{}{"endpoints": []interface{}{redisAddr}},
	}, kv...)
}

var fleetClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
}

type reply struct {
	status  int
	header  http.Header
	body    string
	latency time.Duration
	replica int
	at      time.Time
	err     error
}

// send makes one request to replica i.
func (fe *fleetEnv) send(i int, method, path, key string) reply {
	req, _ := http.NewRequest(method, fe.fleet.Replicas[i%len(fe.fleet.Replicas)].URL(path), nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	start := time.Now()
	resp, err := fleetClient.Do(req)
	r := reply{replica: i % len(fe.fleet.Replicas), at: start, err: err}
	if err != nil {
		return r
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.latency = time.Since(start)
	r.status, r.header, r.body = resp.StatusCode, resp.Header, string(b)
	return r
}

// mustSend is send that fails the test on a transport error.
func (fe *fleetEnv) mustSend(i int, method, path, key string) reply {
	fe.t.Helper()
	r := fe.send(i, method, path, key)
	if r.err != nil {
		fe.t.Fatalf("%s %s on replica %d: %v", method, path, i, r.err)
	}
	return r
}

// burstOf sends n concurrent requests for key, spread round-robin over the
// replicas, and returns the replies.
func (fe *fleetEnv) burstOf(n int, method, path, key string) []reply {
	out := make([]reply, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = fe.send(i, method, path, key)
		}(i)
	}
	wg.Wait()
	return out
}

func statuses(rs []reply) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		if r.err != nil {
			m[-1]++
			continue
		}
		m[r.status]++
	}
	return m
}

// checkHeaders fails unless every reply carries both IETF headers, and
// every 429 carries Retry-After equal to the RateLimit t= and a
// problem+json body.
func checkHeaders(t *testing.T, rs []reply) {
	t.Helper()
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("transport error: %v", r.err)
		}
		if r.header.Get("RateLimit-Policy") == "" || r.header.Get("RateLimit") == "" {
			t.Fatalf("status %d without RateLimit-Policy/RateLimit: %v", r.status, r.header)
		}
		if r.status != http.StatusTooManyRequests {
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("429 Content-Type %q", ct)
		}
		var p struct {
			Type   string
			Status int
		}
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != 429 || p.Type == "" {
			t.Fatalf("429 body %q: %v", r.body, err)
		}
		if ra, tt := r.header.Get("Retry-After"), rateLimitT(r.header); ra == "" || ra != tt {
			t.Fatalf("429 Retry-After %q, RateLimit t=%q (%s)", ra, tt, r.header.Get("RateLimit"))
		}
	}
}

// rateLimitT returns the largest t= of the RateLimit header's items: the
// wait until every policy the request is charged to allows it.
func rateLimitT(h http.Header) string {
	best := ""
	for _, item := range strings.Split(h.Get("RateLimit"), ",") {
		for _, p := range strings.Split(item, ";") {
			v, ok := strings.CutPrefix(strings.TrimSpace(p), "t=")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(v)
			if b, _ := strconv.Atoi(best); err == nil && (best == "" || n > b) {
				best = v
			}
		}
	}
	return best
}

func fleetKey(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s-%s-%d", t.Name(), suffix, time.Now().UnixNano())
}

func TestFleetOneBudget(t *testing.T) {
	// 60 an hour refills one token a minute: exactly burst requests pass.
	// failureMode closed turns any Redis failure into a visible 503; the
	// 1 s timeout lets 90 simultaneous first requests dial their
	// connections on a 2-core machine (this test is about exactness).
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		login := map[string]interface{}{"name": "login", "pathPrefix": "/login", "methods": []interface{}{"POST"},
			"average": 5, "period": "1h", "burst": 5}
		return dynamicConf(
			route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 60, "period", "1h", "burst", 20, "failureMode", "closed",
				"redis.timeout", "1s", "rules", []interface{}{login})},
			route{"other", "PathPrefix(`/other`)", limitOpts(addr, "average", "60", "period", "3600", "burst", "20", "failureMode", "closed", "redis.timeout", "1")},
		)
	}, "api@file", "other@file")

	var all []reply // every reply, for the backend's count
	key := fleetKey(t, "a")
	rs := fe.burstOf(90, "GET", "/", key)
	all = append(all, rs...)
	checkHeaders(t, rs)
	perReplica := map[int]int{}
	for _, r := range rs {
		if r.status == 200 {
			perReplica[r.replica]++
		}
	}
	if s := statuses(rs); s[200] != 20 || s[429] != 70 {
		t.Fatalf("90 concurrent requests over 3 replicas: %v, want 20 x 200, 70 x 429", s)
	}
	// Which replica got the tokens of a concurrent burst is the
	// scheduler's choice (on a loaded machine one replica may answer all
	// its 30 before the others' first check reaches Redis): logged, not
	// checked. That every replica admits from the one budget is checked
	// in order instead: 30 requests one after another, round-robin, the
	// first 20 (on every replica) pass and the rest (on every replica,
	// though none has admitted 20 itself) are refused.
	t.Logf("90 concurrent: admitted per replica %v", perReplica)
	k0 := fleetKey(t, "seq")
	for i := 0; i < 30; i++ {
		r := fe.mustSend(i, "GET", "/", k0)
		all = append(all, r)
		want := 200
		if i >= 20 {
			want = 429
		}
		if r.status != want {
			t.Fatalf("request %d of 30 in order, on replica %d: status %d, want %d (20 admitted over the replicas, one budget)", i, r.replica, r.status, want)
		}
	}
	// Another key, and the same key in another class, have their own budgets.
	rs = fe.burstOf(30, "GET", "/", fleetKey(t, "b"))
	all = append(all, rs...)
	if s := statuses(rs); s[200] != 20 || s[429] != 10 {
		t.Fatalf("second key: %v, want 20 x 200, 10 x 429", s)
	}
	rs = fe.burstOf(30, "GET", "/other", key)
	all = append(all, rs...)
	if s := statuses(rs); s[200] != 20 || s[429] != 10 {
		t.Fatalf("same key, other class: %v, want 20 x 200, 10 x 429", s)
	}
	// POST /login is charged to the login rule and the top-level limit
	// together, all or nothing: 5 logins pass, 3 more are refused without
	// taking top-level tokens, leaving exactly 15 for GET /.
	k := fleetKey(t, "login")
	var seq []reply
	for i := 0; i < 8; i++ {
		seq = append(seq, fe.mustSend(i, "POST", "/login", k))
	}
	all = append(all, seq...)
	checkHeaders(t, seq)
	for i, r := range seq {
		want := 200
		if i >= 5 {
			want = 429
		}
		if r.status != want {
			t.Fatalf("login %d: status %d, want %d", i, r.status, want)
		}
	}
	if !strings.Contains(seq[7].header.Get("RateLimit-Policy"), `"login"`) {
		t.Fatalf("login RateLimit-Policy %q does not name the rule", seq[7].header.Get("RateLimit-Policy"))
	}
	rs = fe.burstOf(20, "GET", "/", k)
	all = append(all, rs...)
	if s := statuses(rs); s[200] != 15 || s[429] != 5 {
		t.Fatalf("GET / after 5 logins: %v, want 15 x 200, 5 x 429", s)
	}
	checkBackendHits(t, fe, all)
}

// checkBackendHits fails unless the fleet's backend served exactly the
// 200s of rs, every reply the fleet gave: a refusal (429 or 503) is
// answered by the middleware and never reaches the backend. Caught: a
// middleware that calls the next handler before refusing, its response
// discarded (the client still sees the 429).
func checkBackendHits(t *testing.T, fe *fleetEnv, rs []reply) {
	t.Helper()
	s := statuses(rs)
	if hits := fe.fleet.Backend.Hits(); hits != int64(s[200]) {
		t.Fatalf("the backend served %d requests; the fleet answered %v: want exactly the 200s (refusals never reach the backend)", hits, s)
	}
}

func TestFleetRetryAfter(t *testing.T) {
	// 120 a minute: one token every 0.5 s; Retry-After rounds up to 1 s.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 120, "period", "1m", "burst", 3)})
	}, "api@file")
	key := fleetKey(t, "k")
	var rs []reply
	for i := 0; i < 4; i++ {
		rs = append(rs, fe.mustSend(i, "GET", "/", key))
	}
	checkHeaders(t, rs)
	if s := statuses(rs); s[200] != 3 || s[429] != 1 {
		t.Fatalf("4 requests, burst 3: %v", s)
	}
	ra, err := strconv.Atoi(rs[3].header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 1 {
		t.Fatalf("Retry-After %q, want 1", rs[3].header.Get("Retry-After"))
	}
	if rs[0].header.Get("RateLimit-Policy") != `"api-limit@file";q=120;w=60` {
		t.Fatalf("RateLimit-Policy %q", rs[0].header.Get("RateLimit-Policy"))
	}
	time.Sleep(time.Duration(ra) * time.Second)
	if r := fe.mustSend(1, "GET", "/", key); r.status != 200 {
		t.Fatalf("after waiting Retry-After: status %d", r.status)
	}
}

// flow is one client sending the same request at a steady pace, round-robin
// over the replicas.
type flow struct {
	key, method, path string
	every             time.Duration
}

type sample struct {
	flow
	reply
}

// driver runs flows until Stop and records every reply.
type driver struct {
	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (fe *fleetEnv) drive(flows ...flow) *driver {
	d := &driver{stop: make(chan struct{})}
	for fi, f := range flows {
		d.wg.Add(1)
		go func(fi int, f flow) {
			defer d.wg.Done()
			tick := time.NewTicker(f.every)
			defer tick.Stop()
			for i := fi; ; i++ {
				r := fe.send(i, f.method, f.path, f.key)
				d.mu.Lock()
				d.samples = append(d.samples, sample{f, r})
				d.mu.Unlock()
				select {
				case <-d.stop:
					return
				case <-tick.C:
				}
			}
		}(fi, f)
	}
	return d
}

// Stop ends the flows and waits for them.
func (d *driver) Stop() {
	close(d.stop)
	d.wg.Wait()
}

// window returns the samples of key sent in [from, to).
func (d *driver) window(key string, from, to time.Time) []sample {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sample
	for _, s := range d.samples {
		if s.key == key && !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// failures returns the samples of key, from any time, that are neither 200
// nor 429.
func (d *driver) failures(key string) []sample {
	var out []sample
	for _, s := range d.window(key, time.Time{}, time.Now().Add(time.Hour)) {
		if s.err != nil || (s.status != 200 && s.status != 429) {
			out = append(out, s)
		}
	}
	return out
}

func (s sample) String() string {
	if s.err != nil {
		return fmt.Sprintf("%s %s %s at %s: %v", s.key, s.method, s.path, s.at.Format("15:04:05.000"), s.err)
	}
	return fmt.Sprintf("%s %s %s at %s on replica %d: %d %s", s.key, s.method, s.path, s.at.Format("15:04:05.000"), s.replica, s.status, s.body)
}

func admitted(ss []sample) (n int, perReplica map[int]int) {
	perReplica = map[int]int{}
	for _, s := range ss {
		if s.err == nil && s.status == 200 {
			n++
			perReplica[s.replica]++
		}
	}
	return n, perReplica
}

// waitScriptCalls waits until Redis has run a script and returns when.
func waitScriptCalls(t *testing.T, r *Redis, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if n, err := r.ScriptCalls(); err == nil && n > 0 {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Redis ran no script within %v", within)
	return time.Time{}
}

func TestFleetRedisKilled(t *testing.T) {
	// 600 a minute, burst 20, 3 replicas: while Redis is down each replica
	// allows 200 a minute (3.33/s) and bursts of 6. POST /login fails closed.
	// No replicas setting: the pods count each other by heartbeat (with
	// replicas at its default, 1, each would allow the whole limit).
	const probe = time.Second
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		login := map[string]interface{}{"name": "login", "pathPrefix": "/login", "methods": []interface{}{"POST"},
			"average": 60, "period": "1m", "burst": 10, "failureMode": "closed"}
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 600, "period", "1m", "burst", 20,
			"redis.heartbeat", "500ms", "rules", []interface{}{login}, "redis.probeInterval", "1s", "decisionHeader", "X-Tollgate-Decision")})
	}, "api@file")
	steady := []string{fleetKey(t, "steady1"), fleetKey(t, "steady2")}
	runaway, login := fleetKey(t, "runaway"), fleetKey(t, "login")
	d := fe.drive(
		flow{steady[0], "GET", "/", 300 * time.Millisecond},
		flow{steady[1], "GET", "/", 300 * time.Millisecond},
		flow{runaway, "GET", "/", 10 * time.Millisecond},
		flow{login, "POST", "/login", 200 * time.Millisecond},
	)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	fe.redis.Kill()
	const down = 4 * time.Second
	time.Sleep(down)
	// Requests sent while Restart runs may meet the new Redis: the checks
	// of "Redis down" end when it starts.
	restarting := time.Now()
	if err := fe.redis.Restart(); err != nil {
		d.Stop()
		t.Fatal(err)
	}
	restarted := time.Now()
	recovered := waitScriptCalls(t, fe.redis, probe+time.Second)
	time.Sleep(2 * time.Second)
	before, _ := fe.redis.ScriptCalls()
	from := time.Now()
	time.Sleep(2 * time.Second)
	to := time.Now()
	after, _ := fe.redis.ScriptCalls()
	d.Stop()

	// Fail-open: nothing on GET failed, before, during or after.
	for _, k := range append(steady, runaway) {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d failed requests on a fail-open route, first: %v", len(f), f[0])
		}
	}
	for _, k := range steady {
		ss := d.window(k, time.Time{}, to)
		if n, _ := admitted(ss); n != len(ss) {
			t.Fatalf("steady key %s: %d of %d admitted", k, n, len(ss))
		}
	}
	// Who decided: Redis before the kill, the local buckets during the
	// outage (the decision header, as an access log would record it).
	// (A check that misses its 5 ms budget falls back by design; on a
	// shared 2-core machine a few do, so up to 2% may be local.)
	var local int
	preKill := d.window(runaway, time.Time{}, killed.Add(-50*time.Millisecond)) // not in flight at the kill
	for _, s := range preKill {
		switch got := s.header.Get("X-Tollgate-Decision"); got {
		case "redis", "cache":
		case "local":
			local++
		default:
			t.Fatalf("before the kill: %v decided by %q", s, got)
		}
	}
	if local*50 > len(preKill) {
		t.Fatalf("before the kill: %d of %d requests decided locally", local, len(preKill))
	}
	// (From 200 ms after the kill: a refusal cached just before it is in
	// force for at most one token's refill, 100 ms.)
	for _, s := range d.window(runaway, killed.Add(200*time.Millisecond), restarting) {
		if got := s.header.Get("X-Tollgate-Decision"); got != "local" {
			t.Fatalf("Redis down: %v decided by %q", s, got)
		}
	}
	// The runaway key is held near each replica's local share.
	ss := d.window(runaway, killed, restarted)
	n, per := admitted(ss)
	secs := restarted.Sub(killed).Seconds()
	share := 6 + 200.0/60*secs // one replica's local bucket over the outage
	if float64(n) > 3*share+3 || float64(n) < share {
		t.Fatalf("runaway key admitted %d of %d while Redis was down (%.1f s), want about 3 x %.0f", n, len(ss), secs, share)
	}
	for rep, c := range per {
		if float64(c) > share+2 {
			t.Fatalf("replica %d admitted %d for the runaway key while Redis was down, local share %.0f", rep, c, share)
		}
	}
	// The login rule fails closed: 503 problem+json with Retry-After.
	var closed int
	for _, s := range d.window(login, killed.Add(100*time.Millisecond), restarting) {
		if s.err != nil || s.status != 503 {
			t.Fatalf("POST /login while Redis was down: %v, want 503", s)
		}
		if s.header.Get("Retry-After") != "1" || s.header.Get("Content-Type") != "application/problem+json" || s.header.Get("RateLimit") == "" {
			t.Fatalf("503 headers %v", s.header)
		}
		closed++
	}
	if closed < 5 {
		t.Fatalf("only %d POST /login answered while Redis was down", closed)
	}
	// Recovery: Redis sees checks again within probeInterval + 1 s, and
	// then every request is checked there.
	t.Logf("Redis down %.1f s; runaway admitted %d (%v) of %d; scripts again %v after restart; %d script calls for the last 2 s",
		secs, n, per, len(ss), recovered.Sub(restarted).Round(time.Millisecond), after-before)
	// (Refusals Redis made and that are still in force are repeated by
	// each replica's deny cache without a call: "cache".)
	var sent, cached int
	for _, k := range append(steady, runaway, login) {
		for _, s := range d.window(k, from, to) {
			switch s.header.Get("X-Tollgate-Decision") {
			case "cache":
				cached++
			case "redis":
				sent++
			default:
				t.Fatalf("after recovery: %v decided by %q", s, s.header.Get("X-Tollgate-Decision"))
			}
		}
	}
	t.Logf("after recovery: %d requests decided by Redis, %d by the deny cache", sent, cached)
	// The 429s (from Redis, the deny cache and the local buckets) and the
	// 503s of the closed rule never reached the backend.
	var every []reply
	d.mu.Lock()
	for _, s := range d.samples {
		every = append(every, s.reply)
	}
	d.mu.Unlock()
	checkBackendHits(t, fe, every)
	if after-before < int64(sent)*9/10 || sent < len(d.window(steady[0], from, to)) {
		t.Fatalf("after recovery Redis ran %d scripts for %d requests", after-before, sent)
	}
}

// percentile returns the p-th percentile (0-100) of the latencies.
func percentile(ss []sample, p float64) time.Duration {
	var ls []time.Duration
	for _, s := range ss {
		ls = append(ls, s.latency)
	}
	if len(ls) == 0 {
		return 0
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return ls[int(float64(len(ls)-1)*p/100)]
}

func TestFleetRedisFrozen(t *testing.T) {
	// SIGSTOP: connections stay open and nothing answers. Each check gives
	// up after the timeout (5 ms); the breaker then stops trying.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100,
			"replicas", 3, "redis.timeout", "5ms", "redis.probeInterval", "1s")})
	}, "api@file")
	var flows []flow
	var keys []string
	for i := 0; i < 3; i++ {
		keys = append(keys, fleetKey(t, strconv.Itoa(i)))
		flows = append(flows, flow{keys[i], "GET", "/", 20 * time.Millisecond})
	}
	d := fe.drive(flows...)
	time.Sleep(500 * time.Millisecond) // connections dialled
	started := time.Now()
	time.Sleep(3 * time.Second)
	paused := time.Now()
	if err := fe.redis.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	resumed := time.Now()
	_ = fe.redis.Resume()
	time.Sleep(time.Second)
	d.Stop()
	var base, stall []sample
	for _, k := range keys {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d failed requests, first: %v", len(f), f[0])
		}
		base = append(base, d.window(k, started, paused)...)
		stall = append(stall, d.window(k, paused, resumed)...)
	}
	p99b, p99s := percentile(base, 99), percentile(stall, 99)
	t.Logf("p50/p99 latency: %v/%v with Redis, %v/%v while frozen (%d, %d requests)",
		percentile(base, 50), p99b, percentile(stall, 50), p99s, len(base), len(stall))
	// A check waits at most its timeout for Redis, renewed once when the
	// reply before it on its connection arrives (a burst pipelined ahead
	// of it): the checks in flight at the freeze may wait two timeouts.
	if p99s-p99b > 11*time.Millisecond {
		t.Fatalf("frozen Redis added %v at p99, want at most two timeouts (5 ms) + 1 ms", p99s-p99b)
	}
}

func TestFleetRedisRestartedAndFlushed(t *testing.T) {
	// /strict fails closed, so a check that Redis did not answer shows as a
	// 503: SCRIPT FLUSH must be invisible (NOSCRIPT, then EVAL). / fails
	// open: a restart of Redis, empty, must not fail a request.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(
			route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100, "redis.probeInterval", "1s")},
			route{"strict", "PathPrefix(`/strict`)", limitOpts(addr, "average", 6000, "period", "1m", "burst", 100,
				"failureMode", "closed", "redis.timeout", "1s")})
	}, "api@file", "strict@file")
	open, strict := fleetKey(t, "open"), fleetKey(t, "strict")
	d := fe.drive(flow{open, "GET", "/", 10 * time.Millisecond}, flow{strict, "GET", "/strict", 10 * time.Millisecond})
	time.Sleep(time.Second)
	evals, _ := fe.redis.Calls("eval")
	if _, err := fe.redis.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	evalsAfter, _ := fe.redis.Calls("eval")
	if f := d.failures(strict); len(f) > 0 {
		d.Stop()
		t.Fatalf("after SCRIPT FLUSH %d requests failed, first: %v", len(f), f[0])
	}
	if evalsAfter <= evals {
		d.Stop()
		t.Fatalf("no EVAL after SCRIPT FLUSH (%d before, %d after): the flush was not seen", evals, evalsAfter)
	}
	if err := fe.redis.Restart(); err != nil {
		d.Stop()
		t.Fatal(err)
	}
	restarted := time.Now()
	recovered := waitScriptCalls(t, fe.redis, 2*time.Second)
	time.Sleep(time.Second)
	d.Stop()
	if f := d.failures(open); len(f) > 0 {
		t.Fatalf("Redis restart: %d failed requests on a fail-open route, first: %v", len(f), f[0])
	}
	t.Logf("SCRIPT FLUSH: %d EVAL after; restart: scripts again after %v", evalsAfter-evals, recovered.Sub(restarted).Round(time.Millisecond))
}

func TestFleetReload(t *testing.T) {
	// 200 rewrites of the dynamic file under traffic, changing limits and
	// adding and removing routers (each with its own Tollgate middleware):
	// Traefik calls New for each, with no close hook.
	var addr string
	conf := func(i int, average int) map[string]interface{} {
		routes := []route{{"api", "PathPrefix(`/`)", limitOpts(addr, "average", average, "period", "1m", "burst", 1000, "redis.poolSize", 4)}}
		for j := 0; j < i%4; j++ {
			routes = append(routes, route{fmt.Sprintf("extra%d", j), fmt.Sprintf("PathPrefix(`/extra%d`)", j),
				limitOpts(addr, "average", 50+i, "period", "1m", "burst", 10, "class", fmt.Sprintf("extra%d", j), "redis.poolSize", 4)})
		}
		return dynamicConf(routes...)
	}
	fe := startFleet(t, 3, func(a string) map[string]interface{} { addr = a; return conf(0, 100000) }, "api@file")
	keys := []string{fleetKey(t, "a"), fleetKey(t, "b"), fleetKey(t, "c")}
	flows := []flow{{keys[0], "GET", "/", 10 * time.Millisecond}, {keys[1], "GET", "/", 10 * time.Millisecond},
		{keys[2], "GET", "/extra0", 10 * time.Millisecond}}
	// The baseline is taken as the end is: after a second of the same
	// traffic, once it has stopped and the keep-alive connections it left
	// (clients to Traefik, Traefik to the backend: goroutines of their
	// own, as many as the traffic's concurrency happened to open) are
	// closed.
	warm := fe.drive(flows...)
	time.Sleep(time.Second)
	warm.Stop()
	fe.closeIdle()
	clients0, err := fe.redis.Clients()
	if err != nil {
		t.Fatal(err)
	}
	var g0, r0 []float64
	for _, tr := range fe.fleet.Replicas {
		g, _, err := goroutineFloor(tr, time.Second, -1)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := tr.Metric("traefik_config_reloads_total")
		g0, r0 = append(g0, float64(g)), append(r0, r)
	}
	d := fe.drive(flows...)
	// Each rewrite is waited for until every replica has applied it
	// (Traefik coalesces rewrites that come faster than it applies them).
	applied := append([]float64(nil), r0...)
	for i := 1; i <= 200; i++ {
		if err := fe.fleet.WriteDynamic(conf(i, 100000+i)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for j, tr := range fe.fleet.Replicas {
			for {
				r, err := tr.Metric("traefik_config_reloads_total")
				if err == nil && r > applied[j] {
					applied[j] = r
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s did not apply rewrite %d", tr.Name, i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// The last configuration: the starting routers, a new limit.
	if err := fe.fleet.WriteDynamic(conf(0, 777)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := range fe.fleet.Replicas {
		for fe.mustSend(i, "GET", "/", "probe").header.Get("RateLimit-Policy") != `"api-limit@file";q=777;w=60` {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: the last configuration is not in force", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := fe.fleet.WaitRouters("", "extra0@file"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let Traefik finish closing the old handlers
	d.Stop()
	fe.closeIdle()
	for _, k := range keys[:2] {
		if f := d.failures(k); len(f) > 0 {
			t.Fatalf("%d requests failed during the reloads, first: %v", len(f), f[0])
		}
	}
	// Every New shares its replica's pool: the connections are bounded by
	// poolSize (4) and the heartbeat's own on each of 3 replicas, plus this
	// query's, whatever the number of reloads (a pool per New would leave
	// hundreds). A connection being replaced (closed as stale under load,
	// its successor dialled) may be counted twice for a moment (once in
	// 10 runs, 17 at the first look): the bound must hold within 5 s.
	var clients1 int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if clients1, err = fe.redis.Clients(); err != nil {
			t.Fatal(err)
		}
		if clients1 <= 3*(4+1)+1 || time.Now().After(end) {
			break
		}
	}
	t.Logf("Redis connected clients: %d before, %d after", clients0, clients1)
	if clients1 > 3*(4+1)+1 {
		t.Fatalf("Redis connected clients: %d before 200 reloads, %d after", clients0, clients1)
	}
	for i, tr := range fe.fleet.Replicas {
		// Short-lived goroutines (a dial, a heartbeat batch, Traefik
		// closing a connection) may be running at any one sample: the
		// floor over 5 s is compared (sampled every 100 ms, it stops as
		// soon as it is within the bound). Measured (2 cores shared with
		// other test runs, 5 runs): 26 before and 26 after on every
		// replica, every sample. (Before the idle connections were
		// closed, the count moved by up to 7 with them.) One goroutine
		// leaked per New (a goroutine started in New that never ends)
		// is hundreds more; 3 leaked in all fail too.
		g, samples, err := goroutineFloor(tr, 5*time.Second, g0[i]+goroutineSlack)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := tr.Metric("traefik_config_reloads_total")
		t.Logf("%s: %d reloads applied; goroutines %v before, %d after (samples %v)", tr.Name, int(r-r0[i]), g0[i], g, samples)
		if float64(g) > g0[i]+goroutineSlack {
			t.Fatalf("%s: %v goroutines before 200 reloads, at least %d after for 5 s (samples %v), want at most %v more:\n%s",
				tr.Name, g0[i], g, samples, goroutineSlack, tr.GoroutineDump())
		}
	}
}

// closeIdle closes the idle keep-alive connections to the replicas and
// from them to the backend.
func (fe *fleetEnv) closeIdle() {
	fleetClient.CloseIdleConnections()
	fe.fleet.Backend.CloseIdle()
}

// goroutineSlack is how many more goroutines than its baseline a replica
// may run after the reload drill (see TestFleetReload): none were seen.
const goroutineSlack = 2

// goroutineFloor samples tr's goroutines every 100 ms for d and returns
// the fewest seen and the samples; it returns early once a sample is at
// most stopAt.
func goroutineFloor(tr *Traefik, d time.Duration, stopAt float64) (int, []int, error) {
	var samples []int
	floor := -1
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		g, err := tr.Goroutines()
		if err != nil {
			return 0, samples, err
		}
		samples = append(samples, g)
		if floor < 0 || g < floor {
			floor = g
		}
		if float64(g) <= stopAt || time.Now().After(end) {
			return floor, samples, nil
		}
	}
}

func TestFleetBadConfig(t *testing.T) {
	// A bad middleware configuration is the plugin's error in Traefik's log,
	// naming the field; its router is not served; the others are.
	fe := startFleet(t, 1, func(addr string) map[string]interface{} {
		return dynamicConf(
			route{"good", "PathPrefix(`/good`)", limitOpts(addr, "average", 100, "burst", 10)},
			route{"negative", "PathPrefix(`/negative`)", limitOpts(addr, "average", 100, "burst", -3)},
			route{"duration", "PathPrefix(`/duration`)", limitOpts(addr, "average", 100, "period", "fortnight")},
		)
	}, "good@file")
	tr := fe.fleet.Replicas[0]
	for _, c := range []struct{ router, path, logged string }{
		{"negative@file", "/negative", "burst: -3 is negative"},
		{"duration@file", "/duration", `period: \"fortnight\" is not a duration`},
	} {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(tr.Log(), c.logged) {
			if time.Now().After(deadline) {
				t.Fatalf("Traefik's log does not carry %q:\n%s", c.logged, tr.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st := tr.RouterStatus(c.router); st == "enabled" {
			t.Fatalf("router %s is %q", c.router, st)
		}
		if r := fe.mustSend(0, "GET", c.path, "k"); r.status == 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("GET %s on a router with a bad middleware: %d %v", c.path, r.status, r.header)
		}
	}
	if r := fe.mustSend(0, "GET", "/good", "k"); r.status != 200 || r.header.Get("RateLimit") == "" {
		t.Fatalf("GET /good on the good router: %d %v", r.status, r.header)
	}
}
