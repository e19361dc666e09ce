package e2e

// Concurrency caps through the fleet: every route goes to a HeldBackend,
// which holds each admitted request until the test releases it, so what
// a cap lets through is counted where it applies (requests held at once)
// and every request of a round is decided before any ends.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const decisionHdr = "X-Tollgate-Decision"

// heldFleet starts a redis-server (with redisArgs), a HeldBackend and n
// replicas serving conf, every router's service the held backend.
func heldFleet(t *testing.T, n int, redisArgs []string, conf func(addr string, hb *HeldBackend) map[string]interface{}, routers ...string) (*fleetEnv, *HeldBackend) {
	t.Helper()
	hb, err := StartHeldBackend()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hb.Close)
	dir, r := fleetRedis(t)
	if len(redisArgs) > 0 {
		r.Kill()
		if r, err = StartRedisWith(dir, nil, redisArgs...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Kill)
	}
	fe := fleetIn(t, dir, n, conf(r.Addr, hb), routers...)
	fe.redis = r
	t.Cleanup(func() { // before the replicas stop, which wait for their connections
		hb.Close()
		heldClient.CloseIdleConnections()
	})
	return fe, hb
}

// heldConf is dynamicConf with the service "backend" at hb.
func heldConf(hb *HeldBackend, routes ...route) map[string]interface{} {
	conf := dynamicConf(routes...)
	conf["http"].(map[string]interface{})["services"] = map[string]interface{}{"backend": map[string]interface{}{
		"loadBalancer": map[string]interface{}{"servers": []interface{}{map[string]interface{}{"url": "http://" + hb.Addr}}}}}
	return conf
}

// capOpts is limitOpts for class api with a cap alone (named api), max
// requests in flight for the class as a whole, kv added.
func capOpts(addr string, max int, kv ...interface{}) map[string]interface{} {
	return limitOpts(addr, append([]interface{}{"class", "api", "decisionHeader", decisionHdr, "redis.timeout", "1s",
		"concurrency", map[string]interface{}{"max": max, "key": "class"}}, kv...)...)
}

// sendHeld is send of GET path to replica i, held at the backend in group
// (none: answered at once) once admitted.
func (fe *fleetEnv) sendHeld(ctx context.Context, i int, path, key, group string) reply {
	req, _ := http.NewRequestWithContext(ctx, "GET", fe.fleet.Replicas[i].URL(path), nil)
	req.Header.Set("X-API-Key", key)
	if group != "" {
		req.Header.Set(HoldHeader, group)
	}
	r := reply{replica: i, at: time.Now()}
	resp, err := heldClient.Do(req)
	if r.err = err; err != nil {
		return r
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.status, r.header, r.body, r.err = resp.StatusCode, resp.Header, string(b), err
	return r
}

// capRound is n concurrent requests of one hold group.
type capRound struct {
	t        *testing.T
	hb       *HeldBackend
	group    string
	n        int
	ch       chan reply
	refused  []reply   // the replies before the release: every refusal
	admitted int       // held at the backend once every request was decided
	decided  time.Time // when every request was seen decided
}

// holdRound sends n concurrent requests of group, request i for key(i)
// to replica at(i), and returns once each is answered (refused) or held
// at the backend (admitted).
func (fe *fleetEnv) holdRound(hb *HeldBackend, group string, n int, path string, key func(i int) string, at func(i int) int) *capRound {
	fe.t.Helper()
	c := &capRound{t: fe.t, hb: hb, group: group, n: n, ch: make(chan reply, n)}
	for i := 0; i < n; i++ {
		go func(i int) { c.ch <- fe.sendHeld(context.Background(), at(i), path, key(i), group) }(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for len(c.ch) > 0 {
			c.refused = append(c.refused, <-c.ch)
		}
		if held := hb.Held(group); len(c.refused)+int(held) == n {
			c.admitted, c.decided = int(held), time.Now()
			return c
		}
		if time.Now().After(deadline) {
			fe.t.Fatalf("round %s: %d of %d answered and %d held after 30 s", group, len(c.refused), n, hb.Held(group))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// release lets the round's held requests go and returns their replies.
func (c *capRound) release() []reply {
	c.t.Helper()
	c.hb.Release(c.group)
	var out []reply
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for len(c.refused)+len(out) < c.n {
		select {
		case r := <-c.ch:
			out = append(out, r)
		case <-timer.C:
			c.t.Fatalf("round %s: %d of %d released requests answered within 30 s", c.group, len(out), c.admitted)
		}
	}
	return out
}

func overAll(fe *fleetEnv) func(i int) int {
	return func(i int) int { return i % len(fe.fleet.Replicas) }
}

// untilCap sends rounds of n requests (released and answered before the
// next) until one admits exactly want, and returns it; it fails when a
// round admits more, or none admits want within d (slots not given back).
func (fe *fleetEnv) untilCap(hb *HeldBackend, name string, want, n int, d time.Duration, path string, at func(i int) int) *capRound {
	fe.t.Helper()
	deadline := time.Now().Add(d)
	for try := 0; ; try++ {
		c := fe.holdRound(hb, fmt.Sprintf("%s-%d", name, try), n, path, perRequest(name), at)
		rs := c.release()
		if c.admitted > want || hb.Peak(c.group) > int64(want) {
			fe.t.Fatalf("round %s: %d admitted (at most %d held at once), want at most %d", c.group, c.admitted, hb.Peak(c.group), want)
		}
		if s := statuses(rs); s[200] != c.admitted {
			fe.t.Fatalf("round %s: the %d admitted answered %v", c.group, c.admitted, s)
		}
		if c.admitted == want {
			fe.t.Logf("round %s: %d of %d admitted, try %d", c.group, want, n, try+1)
			return c
		}
		if time.Now().After(deadline) {
			fe.t.Fatalf("%d concurrent requests: %d admitted, want %d, for %v (slots not given back)", n, c.admitted, want, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eachUntil sends GET / to each replica (answered at once when
// admitted) until its reply is what, and returns those replies.
func (fe *fleetEnv) eachUntil(what string, ok func(r reply) bool) []reply {
	fe.t.Helper()
	var out []reply
	for i := range fe.fleet.Replicas {
		deadline := time.Now().Add(10 * time.Second)
		r := fe.sendHeld(context.Background(), i, "/", "probe", "")
		for ; !ok(r); r = fe.sendHeld(context.Background(), i, "/", "probe", "") {
			if time.Now().After(deadline) {
				fe.t.Fatalf("replica %d: not %s within 10 s: %d %v", i, what, r.status, r.header)
			}
			time.Sleep(20 * time.Millisecond)
		}
		out = append(out, r)
	}
	return out
}

// checkCapRefused fails unless every reply of rs is cap name's refusal
// (max), decided by how.
func checkCapRefused(t *testing.T, rs []reply, name string, max int, how string) {
	t.Helper()
	for _, r := range rs {
		if r.err != nil || r.status != http.StatusTooManyRequests {
			t.Fatalf("replica %d: %d %v, want 429 (the cap is full)", r.replica, r.status, r.err)
		}
		var p struct {
			Detail   string
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || !strings.Contains(p.Detail, "concurrency limit") ||
			len(p.Violated) != 1 || p.Violated[0] != name || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("replica %d: 429 %s %q (%v), want a problem naming the concurrency limit %q", r.replica, r.header.Get("Content-Type"), r.body, err, name)
		}
		if left, tt, ok := capItem(r.header, name, max); !ok || left != 0 || tt != 1 || r.header.Get("Retry-After") != "1" {
			t.Fatalf("replica %d: 429 Retry-After %q, RateLimit-Policy %q, RateLimit %q, want %q's item with r=0;t=1 and Retry-After 1",
				r.replica, r.header.Get("Retry-After"), r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), name)
		}
		if d := r.header.Get(decisionHdr); d != how {
			t.Fatalf("replica %d: 429 decided by %q, want %q", r.replica, d, how)
		}
	}
}

// checkCapAdmitted fails unless every reply of rs is a 200 with cap
// name's item (max), decided by how; it returns the slots left each saw.
func checkCapAdmitted(t *testing.T, rs []reply, name string, max int, how string) map[int]int {
	t.Helper()
	left := map[int]int{}
	for _, r := range rs {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("replica %d: %d %v, want 200 (admitted)", r.replica, r.status, r.err)
		}
		n, tt, ok := capItem(r.header, name, max)
		if !ok || tt != 0 || n < 0 || n >= max {
			t.Fatalf("replica %d: 200 with RateLimit-Policy %q, RateLimit %q, want %q's item with r below %d and t=0",
				r.replica, r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), name, max)
		}
		if d := r.header.Get(decisionHdr); d != how {
			t.Fatalf("replica %d: 200 decided by %q, want %q", r.replica, d, how)
		}
		left[n]++
	}
	return left
}

func TestFleetConcurrencyClassCap(t *testing.T) {
	// At most 5 in flight for the class, a cap alone: 30 concurrent
	// requests of 30 clients over 3 replicas reach the backend 5 times,
	// the 25 others refused by Redis; once the 5 end, 5 pass again.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 5, "failureMode", "closed")})
	}, "api@file")
	c := fe.holdRound(hb, "first", 30, "/", perRequest(fleetKey(t, "c")), overAll(fe))
	if c.admitted != 5 || hb.Peak("first") != 5 || len(c.refused) != 25 {
		t.Fatalf("30 concurrent: %d held at the backend (at most %d at once), %d refused %v; want 5 and 25",
			c.admitted, hb.Peak("first"), len(c.refused), statuses(c.refused))
	}
	checkCapRefused(t, c.refused, "api", 5, "redis")
	// Each admitted request took the next slot: 4, 3, 2, 1 and 0 left.
	if left := checkCapAdmitted(t, c.release(), "api", 5, "redis"); len(left) != 5 {
		t.Fatalf("slots left after each admitted request: %v, want 0 to 4 once each", left)
	}
	if hits := hb.Hits("first"); hits != 5 {
		t.Fatalf("the backend served %d requests of 30, want 5", hits)
	}
	fe.untilCap(hb, "again", 5, 6, 5*time.Second, "/", overAll(fe))
}

func TestFleetConcurrencyColdBurst(t *testing.T) {
	// 300 concurrent requests of 300 clients at freshly started replicas
	// (no connection dialled yet), at most 20 in flight for the class:
	// exactly 20 reach the backend, every decision Redis's.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 20, "failureMode", "closed")})
	}, "api@file")
	c := fe.holdRound(hb, "cold", 300, "/", perRequest(fleetKey(t, "c")), overAll(fe))
	if c.admitted != 20 || hb.Peak("cold") != 20 {
		t.Fatalf("300 concurrent at cold replicas: %d held at the backend (at most %d at once), want 20; refused %v",
			c.admitted, hb.Peak("cold"), statuses(c.refused))
	}
	checkCapRefused(t, c.refused, "api", 20, "redis")
	if left := checkCapAdmitted(t, c.release(), "api", 20, "redis"); len(left) != 20 {
		t.Fatalf("slots left after each admitted request: %v, want 0 to 19 once each", left)
	}
	if hits := hb.Hits("cold"); hits != 20 {
		t.Fatalf("the backend served %d requests, want 20", hits)
	}
}

func TestFleetConcurrencyPerClient(t *testing.T) {
	// key client (the default), beside a rate, values as strings: each
	// client holds at most 3 requests in flight, its own 3.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", limitOpts(addr, "class", "api", "average", "1000", "period", "1m",
			"burst", "1000", "decisionHeader", decisionHdr, "redis.timeout", "1s", "concurrency", map[string]interface{}{"max": "3", "maxDuration": "60"})})
	}, "api@file")
	a, b := fleetKey(t, "a"), fleetKey(t, "b")
	one := func(k string) func(int) string { return func(int) string { return k } }
	ca := fe.holdRound(hb, "a", 8, "/", one(a), overAll(fe))
	cb := fe.holdRound(hb, "b", 8, "/", one(b), overAll(fe)) // a's 3 still held
	again := fe.holdRound(hb, "a-again", 2, "/", one(a), overAll(fe))
	if ca.admitted != 3 || cb.admitted != 3 || again.admitted != 0 {
		t.Fatalf("8 concurrent for a, then 8 for b, then 2 more for a: %d, %d and %d held, want 3, 3 and 0",
			ca.admitted, cb.admitted, again.admitted)
	}
	for _, c := range []*capRound{ca, cb, again} {
		checkCapRefused(t, c.refused, "api-concurrency", 3, "redis")
		checkCapAdmitted(t, c.release(), "api-concurrency", 3, "redis")
	}
	if p := ca.refused[0].header.Get("RateLimit-Policy"); p != `"api";q=1000;w=60, "api-concurrency";q=3;qu="concurrent-requests"` {
		t.Fatalf("RateLimit-Policy %q", p)
	}
}

func TestFleetConcurrencyReplicaKilled(t *testing.T) {
	// A replica killed (SIGKILL) while holding 3 of 5 slots: the others
	// admit 2 until the slots' maxDuration (5 s) has passed, then 5.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", limitOpts(addr, "class", "api", "decisionHeader", decisionHdr,
			"redis.timeout", "1s", "concurrency", map[string]interface{}{"max": 5, "key": "class", "maxDuration": "5s"})})
	}, "api@file")
	taking := time.Now()
	long := fe.holdRound(hb, "long", 3, "/", perRequest("long"), func(int) int { return 0 })
	taken := time.Now()
	if long.admitted != 3 {
		t.Fatalf("3 requests on replica 0: %d held, refused %v", long.admitted, statuses(long.refused))
	}
	tr := fe.fleet.Replicas[0]
	_ = tr.process.cmd.Process.Kill()
	<-tr.process.done
	others := func(i int) int { return 1 + i%2 }
	first := fe.holdRound(hb, "after-kill", 6, "/", perRequest("after"), others)
	first.release()
	if first.admitted != 2 {
		t.Fatalf("6 concurrent on the other replicas after the kill: %d admitted, want 2 (3 of 5 slots held by the dead replica)", first.admitted)
	}
	checkCapRefused(t, first.refused, "api", 5, "redis")
	for try := 0; ; try++ {
		c := fe.holdRound(hb, fmt.Sprintf("poll-%d", try), 6, "/", perRequest("poll"), others)
		c.release()
		if c.admitted > 2 && c.decided.Before(taking.Add(4*time.Second)) {
			t.Fatalf("%d admitted %v after the dead replica's slots were taken, before their maxDuration (5 s)", c.admitted, c.decided.Sub(taking))
		}
		if c.admitted > 5 {
			t.Fatalf("%d admitted, want at most 5", c.admitted)
		}
		if c.admitted == 5 {
			t.Logf("all 5 slots free %v to %v after they were taken", c.decided.Sub(taken).Round(time.Millisecond), c.decided.Sub(taking).Round(time.Millisecond))
			break
		}
		if time.Since(taken) > 10*time.Second {
			t.Fatalf("the dead replica's slots still held 10 s after they were taken (maxDuration 5 s): %d admitted", c.admitted)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestFleetConcurrencyClientCancel(t *testing.T) {
	// At most 1 in flight: a client that goes away while the backend holds
	// its request gives its slot back.
	fe, hb := heldFleet(t, 2, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 1)})
	}, "api@file")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan reply, 1)
	go func() { done <- fe.sendHeld(ctx, 0, "/", "gone", "gone") }()
	if err := hb.WaitHeld("gone", 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := fe.sendHeld(context.Background(), 1, "/", "other", ""); r.status != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first is held: %d %v, want 429", r.status, r.err)
	}
	cancel()
	if r := <-done; r.err == nil {
		t.Fatalf("the cancelled request was answered: %d", r.status)
	}
	if err := hb.WaitHeld("gone", 0, 10*time.Second); err != nil {
		t.Fatal(err) // Traefik did not end the backend's request
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := fe.sendHeld(context.Background(), 1, "/", "other", "")
		if r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the client went away its slot is still held: %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fe.untilCap(hb, "after", 1, 3, 5*time.Second, "/", overAll(fe))
}

func TestFleetConcurrencyRedisKilled(t *testing.T) {
	// Redis down, at most 6 in flight for the class over 3 replicas: each
	// replica admits 2 itself; a cap failing closed answers 503.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 6, "replicas", 3)},
			route{"strict", "PathPrefix(`/strict`)", capOpts(addr, 6, "replicas", 3, "class", "strict", "failureMode", "closed")})
	}, "api@file", "strict@file")
	fe.untilCap(hb, "up", 6, 9, 5*time.Second, "/", overAll(fe))
	fe.redis.Kill()
	c := fe.holdRound(hb, "down", 18, "/", perRequest("down"), overAll(fe))
	refused := map[int]int{}
	for _, r := range c.refused {
		refused[r.replica]++
	}
	if c.admitted != 6 || refused[0] != 4 || refused[1] != 4 || refused[2] != 4 {
		t.Fatalf("Redis down, 6 concurrent on each replica: %d admitted, refused by replica %v; want 2 admitted on each", c.admitted, refused)
	}
	checkCapRefused(t, c.refused, "api", 6, "local")
	checkCapAdmitted(t, c.release(), "api", 6, "local")
	r := fe.sendHeld(context.Background(), 0, "/strict", "k", "")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a cap failing closed, Redis down: %d %v %s, want 503 problem+json with Retry-After", r.status, r.header, r.body)
	}
}

func TestFleetConcurrencyRedisRestarted(t *testing.T) {
	// Redis (keeping its data: append-only file, fsync always) killed and
	// started again while 4 of 4 slots are held: once the 4 end, their
	// slots are given back to it, and 4 pass again, no more.
	fe, hb := heldFleet(t, 3, []string{"--appendonly", "yes", "--appendfsync", "always"}, func(addr string, hb *HeldBackend) map[string]interface{} {
		return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 4, "redis.probeInterval", "1s")})
	}, "api@file")
	held := fe.holdRound(hb, "held", 4, "/", perRequest("held"), overAll(fe))
	if held.admitted != 4 {
		t.Fatalf("4 concurrent: %d admitted", held.admitted)
	}
	if err := fe.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	answering(t, fe.redis, 10*time.Second)
	// Each replica decides by Redis again, which kept the 4 slots.
	for _, r := range fe.eachUntil("decided by Redis", func(r reply) bool { return r.header.Get(decisionHdr) == "redis" }) {
		checkCapRefused(t, []reply{r}, "api", 4, "redis")
	}
	held.release()
	c := fe.untilCap(hb, "after", 4, 5, 10*time.Second, "/", overAll(fe))
	checkCapRefused(t, c.refused, "api", 4, "redis")
}

func TestFleetConcurrencyReload(t *testing.T) {
	// 3 requests held while the cap is raised from 3 to 5: they still
	// count under the new configuration, and their slots are given back
	// when they end (by the handler of the old one).
	var conf func(max int) map[string]interface{}
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		conf = func(max int) map[string]interface{} {
			return heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, max)})
		}
		return conf(3)
	}, "api@file")
	held := fe.holdRound(hb, "held", 3, "/", perRequest("held"), overAll(fe))
	if held.admitted != 3 {
		t.Fatalf("3 concurrent: %d admitted", held.admitted)
	}
	if err := fe.fleet.WriteDynamic(conf(5)); err != nil {
		t.Fatal(err)
	}
	fe.eachUntil("max 5 in force", func(r reply) bool { _, _, ok := capItem(r.header, "api", 5); return ok })
	during := fe.holdRound(hb, "during", 4, "/", perRequest("during"), overAll(fe))
	during.release()
	if during.admitted > 2 {
		t.Fatalf("max 5 with 3 held from before the reload: %d more admitted, want at most 2", during.admitted)
	}
	held.release()
	fe.untilCap(hb, "after", 5, 6, 5*time.Second, "/", overAll(fe))
}

func TestFleetConcurrencyMetrics(t *testing.T) {
	// The in-flight gauge of each replica counts the requests it holds,
	// refusals are counted limited, and the gauge is 0 once they end.
	fe, hb := heldFleet(t, 3, nil, func(addr string, hb *HeldBackend) map[string]interface{} {
		return withMetricsRouter(heldConf(hb, route{"api", "PathPrefix(`/`)", capOpts(addr, 6)}))
	}, "api@file", drillMetrics)
	series := func(i int, name string, labels map[string]string) float64 {
		status, _, body, err := getBody(fe.fleet.Replicas[i].URL(metricsPath))
		if err != nil || status != 200 {
			t.Fatalf("replica %d: GET %s: %d %v", i, metricsPath, status, err)
		}
		v, _ := MetricValue(string(body), name, labels)
		return v
	}
	gauge := func(i int) float64 {
		return series(i, "tollgate_concurrency_in_flight", map[string]string{"class": "api", "policy": "api"})
	}
	first := fe.holdRound(hb, "first", 4, "/", perRequest("first"), overAll(fe)) // 2, 1 and 1
	second := fe.holdRound(hb, "second", 4, "/", perRequest("second"), overAll(fe))
	if first.admitted != 4 || second.admitted != 2 {
		t.Fatalf("4 then 4 concurrent, max 6: %d and %d admitted", first.admitted, second.admitted)
	}
	var sum, limited float64
	for i := range fe.fleet.Replicas {
		sum += gauge(i)
		limited += series(i, "tollgate_requests_total", map[string]string{"class": "api", "policy": "api", "result": "limited", "decision": "redis"})
	}
	if sum != 6 || limited != 2 {
		t.Fatalf("6 held: in-flight gauges sum to %v, limited %v; want 6 and 2", sum, limited)
	}
	first.release()
	second.release()
	deadline := time.Now().Add(5 * time.Second)
	for i := range fe.fleet.Replicas {
		for gauge(i) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: in-flight gauge %v 5 s after every request ended", i, gauge(i))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
