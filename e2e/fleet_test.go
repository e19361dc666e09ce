package e2e

// The fleet suite: three real Traefik v3.6.12 processes (scripts/traefik.sh)
// loading the plugin in local mode, one real redis-server, one backend, all
// on loopback. Traffic goes through Traefik's entrypoints.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
