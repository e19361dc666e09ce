package e2e

// Plans, exemptions and rotation-proof rules through a real Traefik v3.6.12
// with a real forwardAuth in front of Tollgate: an auth server on loopback
// (authserver_test.go) maps "Authorization: Bearer <token>" to X-Plan, and
// forwardAuth copies it onto the request (authResponseHeaders: [X-Plan]);
// Tollgate keys clients by Authorization and limits them by their plan. One
// redis-server decides everything: failureMode closed and a 1 s timeout, so
// no local fallback ever decides on a loaded machine (it would answer 503),
// and every count below is exact.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

type plansEnv struct {
	t       *testing.T
	redis   *Redis
	auth    *authServer
	backend *echoBackend
	traefik *Traefik
	mu      sync.Mutex
	all     []reply // every reply that came through Tollgate's routers
}

const plansDecision = "X-Tollgate-Decision"

// plansConf is the dynamic configuration: one router per scenario.
func plansConf(redisAddr, authURL, backendAddr string) map[string]interface{} {
	redis := map[string]interface{}{"endpoints": []interface{}{redisAddr}, "timeout": "1s"}
	plugin := func(opts map[string]interface{}) map[string]interface{} {
		opts["redis"] = redis
		opts["failureMode"] = "closed"
		opts["decisionHeader"] = plansDecision
		return map[string]interface{}{"plugin": map[string]interface{}{"tollgate": opts}}
	}
	router := func(host string, mws ...string) map[string]interface{} {
		l := make([]interface{}, len(mws))
		for i, m := range mws {
			l[i] = m
		}
		return map[string]interface{}{"rule": "Host(`" + host + "`)", "service": "backend",
			"entryPoints": []interface{}{"web"}, "middlewares": l}
	}
	return map[string]interface{}{"http": map[string]interface{}{
		"routers": map[string]interface{}{
			// forwardAuth alone: what reaches the backend, plugin or not.
			"wiring": router("wiring.test", "auth"),
			"plans":  router("plans.test", "auth", "plans-limit"),
			"exempt": router("exempt.test", "auth", "exempt-limit"),
			"rotate": router("rotate.test", "rotate-limit"),
			"v6":     router("v6.test", "v6-limit"),
		},
		"middlewares": map[string]interface{}{
			"auth": map[string]interface{}{"forwardAuth": map[string]interface{}{
				"address": authURL, "authResponseHeaders": []interface{}{"X-Plan"}}},
			// The top level (1000 an hour, burst 50) is nobody's limit here:
			// every request has a plan, free when it names none or an
			// unknown one. Averages differ from bursts so that q= shows
			// which one the policy names. An hour's period refills a free
			// token every 2 minutes: nothing refills during the test.
			"plans-limit": plugin(map[string]interface{}{
				"class": "api", "average": 1000, "period": "1h", "burst": 50,
				"sourceCriterion": map[string]interface{}{"requestHeaderName": "Authorization"},
				"planHeader":      "X-Plan",
				"defaultPlan":     "free",
				"plans": []interface{}{
					map[string]interface{}{"name": "free", "average": 30, "period": "1h", "burst": 3},
					map[string]interface{}{"name": "pro", "average": 60, "period": "1h", "burst": 8},
					map[string]interface{}{"name": "internal", "unlimited": true},
				},
				"rules": []interface{}{map[string]interface{}{"name": "export", "pathPrefix": "/export",
					"average": 2, "period": "1h", "burst": 2}},
			}),
			// Keyed by Authorization, with the ipStrategy beside it naming
			// the address the exemption looks at.
			"exempt-limit": plugin(map[string]interface{}{
				"class": "exempt", "average": 30, "period": "1h", "burst": 3,
				"sourceCriterion": map[string]interface{}{"requestHeaderName": "Authorization",
					"ipStrategy": map[string]interface{}{"depth": 1}},
				"exemptSourceRange": []interface{}{"10.0.0.0/8", "2001:db8:ffff::/48", "2001:db8:abcd::5/128"},
			}),
			// The top level keys by API key; login keys by address, so
			// fresh API keys from one address share one login budget.
			"rotate-limit": plugin(map[string]interface{}{
				"class": "rotate", "average": 1000, "period": "1h", "burst": 100,
				"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
				"rules": []interface{}{map[string]interface{}{"name": "login", "pathPrefix": "/login",
					"methods": []interface{}{"POST"}, "average": 5, "period": "1m", "burst": 5, "failureMode": "closed",
					"sourceCriterion": map[string]interface{}{"ipStrategy": map[string]interface{}{"depth": 1}}}},
			}),
			// Keyed by address (already on main: IPv6 by /64).
			"v6-limit": plugin(map[string]interface{}{
				"class": "v6", "average": 5, "period": "1h", "burst": 5,
				"sourceCriterion": map[string]interface{}{"ipStrategy": map[string]interface{}{"depth": 1}},
			}),
		},
		"services": map[string]interface{}{"backend": map[string]interface{}{"loadBalancer": map[string]interface{}{
			"servers": []interface{}{map[string]interface{}{"url": "http://" + backendAddr}}}}},
	}}
}

var plansRouters = []string{"wiring", "plans", "exempt", "rotate", "v6"}

// startPlans starts redis-server, the auth server, the echo backend and one
// Traefik replica serving plansConf, and returns when Traefik has loaded
// every router (enabled or not: each subtest checks its own).
func startPlans(t *testing.T) *plansEnv {
	t.Helper()
	dir, r := fleetRedis(t)
	pe := &plansEnv{t: t, redis: r}
	var err error
	if pe.auth, err = startAuthServer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pe.auth.Close)
	if pe.backend, err = startEchoBackend(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pe.backend.Close)
	// The web entrypoint trusts X-Forwarded-For from loopback (as a Traefik
	// behind a load balancer trusts the balancer's): else Traefik deletes it
	// before any middleware runs, and an ipStrategy with depth keys every
	// client by 127.0.0.1.
	trust := map[string]interface{}{"entryPoints": map[string]interface{}{"web": map[string]interface{}{
		"forwardedHeaders": map[string]interface{}{"trustedIPs": []interface{}{"127.0.0.1/32", "::1/128"}}}}}
	f, err := StartFleetWith(dir, 1, plansConf(r.Addr, pe.auth.URL, pe.backend.Addr), trust)
	if err != nil {
		t.Fatal(err)
	}
	pe.traefik = f.Replicas[0]
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			t.Logf("traefik log:\n%s", pe.traefik.Log())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range plansRouters {
		for pe.traefik.RouterStatus(name+"@file") == "" && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return pe
}

// needRouter fails the subtest unless Traefik serves the router, with the
// errors Traefik's API gives for it and its middlewares (a configuration
// the plugin refused names its field there).
func (pe *plansEnv) needRouter(t *testing.T, name string) {
	t.Helper()
	if st := pe.traefik.RouterStatus(name + "@file"); st != "enabled" {
		t.Fatalf("router %s is %q, not enabled: %s", name, st, pe.apiErrors(name))
	}
}

func (pe *plansEnv) apiErrors(router string) string {
	var out []string
	for _, path := range []string{"routers/" + router + "@file", "middlewares/" + router + "-limit@file"} {
		resp, err := http.Get("http://" + pe.traefik.API + "/api/http/" + path)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		var v struct {
			Status string
			Error  []string
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(b, &v)
		out = append(out, fmt.Sprintf("%s: %s %q", path, v.Status, v.Error))
	}
	return strings.Join(out, "; ")
}

// send makes one request to host through Traefik; hdr are header name and
// value pairs, added in order (a name twice makes two lines).
func (pe *plansEnv) send(host, method, path string, hdr ...string) reply {
	req, _ := http.NewRequest(method, pe.traefik.URL(path), nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := fleetClient.Do(req)
	r := reply{at: start, err: err}
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.latency = time.Since(start)
		r.status, r.header, r.body = resp.StatusCode, resp.Header, string(b)
	}
	pe.mu.Lock()
	pe.all = append(pe.all, r)
	pe.mu.Unlock()
	return r
}

// seq sends n requests one after the other.
func (pe *plansEnv) seq(t *testing.T, n int, host, method, path string, hdr ...string) []reply {
	t.Helper()
	rs := make([]reply, n)
	for i := range rs {
		if rs[i] = pe.send(host, method, path, hdr...); rs[i].err != nil {
			t.Fatalf("%s %s%s #%d: %v", method, host, path, i, rs[i].err)
		}
	}
	return rs
}

// burst sends n requests at once, the i-th with the headers hdr(i).
func (pe *plansEnv) burst(t *testing.T, n int, host, method, path string, hdr func(i int) []string) []reply {
	t.Helper()
	rs := make([]reply, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rs[i] = pe.send(host, method, path, hdr(i)...)
		}(i)
	}
	wg.Wait()
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("%s %s%s #%d: %v", method, host, path, i, r.err)
		}
	}
	return rs
}

// plansLimited checks sequential replies: the first admitted are 200, the
// rest 429, every one naming policy in RateLimit-Policy and decided by
// Redis (or its deny cache), the first 200 with admitted-1 tokens left.
func plansLimited(t *testing.T, what string, rs []reply, admitted int, policy string) {
	t.Helper()
	for i, r := range rs {
		want := http.StatusOK
		if i >= admitted {
			want = http.StatusTooManyRequests
		}
		if r.status != want {
			t.Fatalf("%s: request %d: status %d, want %d (%v); RateLimit-Policy %q, RateLimit %q",
				what, i, r.status, want, statuses(rs), r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
		}
		if got := r.header.Get("RateLimit-Policy"); got != policy {
			t.Fatalf("%s: request %d: RateLimit-Policy %q, want %q", what, i, got, policy)
		}
		if d := r.header.Get(plansDecision); d != "redis" && !(want == 429 && d == "cache") {
			t.Fatalf("%s: request %d (status %d) decided by %q, want Redis", what, i, r.status, d)
		}
	}
	name := policy[:strings.Index(policy, ";")]
	if want, got := fmt.Sprintf("%s;r=%d;t=0", name, admitted-1), rs[0].header.Get("RateLimit"); admitted > 0 && got != want {
		t.Fatalf("%s: first RateLimit %q, want %q", what, got, want)
	}
	checkHeaders(t, rs)
}

// plansUntouched checks replies that Tollgate let through without a limit:
// 200, no RateLimit header of any kind (the decision header is not
// checked: the contract leaves it open).
func plansUntouched(t *testing.T, what string, rs []reply) {
	t.Helper()
	for i, r := range rs {
		if r.status != http.StatusOK {
			t.Fatalf("%s: request %d: status %d, want 200 (%v); RateLimit %q", what, i, r.status, statuses(rs), r.header.Get("RateLimit"))
		}
		for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit"} {
			if v := r.header.Get(h); v != "" {
				t.Fatalf("%s: request %d carries %s: %q", what, i, h, v)
			}
		}
	}
}

// plansCount checks concurrent replies: exactly admitted 200s, the rest 429.
func plansCount(t *testing.T, what string, rs []reply, admitted int) {
	t.Helper()
	if s := statuses(rs); s[200] != admitted || s[429] != len(rs)-admitted {
		t.Fatalf("%s: %v, want %d x 200, %d x 429", what, s, admitted, len(rs)-admitted)
	}
	checkHeaders(t, rs)
}

func plansSeen(r reply) string { return r.header.Get("X-Seen-Plan") }

func plansBearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func TestPlansBehindForwardAuth(t *testing.T) {
	pe := startPlans(t)

	// What forwardAuth hands the middleware, whatever the plugin does.
	t.Run("forwardAuth", func(t *testing.T) {
		pe.needRouter(t, "wiring")
		for _, c := range []struct {
			desc, tok string
			forged    []string // X-Plan lines the client sends
			status    int
			seen      string // X-Plan lines the backend received
		}{
			{"auth's plan", "tok-pro", nil, 200, "pro"},
			{"auth's plan replaces the client's", "tok-free", []string{"internal"}, 200, "free"},
			{"auth's plan replaces every client line", "tok-free", []string{"internal", "pro"}, 200, "free"},
			{"auth's unknown plan passes as it is", "tok-weird", nil, 200, "platinum"},
			// Traefik deletes each authResponseHeaders header from the
			// request before copying the auth server's: a client's own
			// X-Plan never survives, even when the auth server sends none.
			{"no plan from auth deletes the client's", "tok-none", []string{"internal"}, 200, "<none>"},
			{"unknown token", "tok-bogus", []string{"internal"}, 401, ""},
		} {
			hdr := plansBearer(c.tok)
			for _, p := range c.forged {
				hdr = append(hdr, "X-Plan", p)
			}
			r := pe.send("wiring.test", "GET", "/", hdr...)
			if r.err != nil {
				t.Fatalf("%s: %v", c.desc, r.err)
			}
			if r.status != c.status || plansSeen(r) != c.seen {
				t.Errorf("%s: status %d, backend saw X-Plan %q; want %d, %q", c.desc, r.status, plansSeen(r), c.status, c.seen)
			}
		}
	})

	t.Run("plans", func(t *testing.T) {
		pe.needRouter(t, "plans")
		plansLimited(t, "pro", pe.seq(t, 10, "plans.test", "GET", "/", plansBearer("tok-pro-a")...), 8, `"pro";q=60;w=3600`)
		plansLimited(t, "free", pe.seq(t, 5, "plans.test", "GET", "/", plansBearer("tok-free-a")...), 3, `"free";q=30;w=3600`)

		// Unlimited: no limit, no headers; rules still apply and send theirs.
		rs := pe.seq(t, 30, "plans.test", "GET", "/", plansBearer("tok-internal-a")...)
		plansUntouched(t, "internal", rs)
		if plansSeen(rs[0]) != "internal" {
			t.Fatalf("internal: backend saw X-Plan %q", plansSeen(rs[0]))
		}
		plansLimited(t, "internal on /export", pe.seq(t, 4, "plans.test", "GET", "/export", plansBearer("tok-internal-b")...), 2, `"export";q=2;w=3600`)

		// A plan's bucket is its own: a free client that spent its burst
		// and moves to pro starts with pro's whole burst.
		plansLimited(t, "before the upgrade", pe.seq(t, 4, "plans.test", "GET", "/", plansBearer("tok-free-up")...), 3, `"free";q=30;w=3600`)
		pe.auth.SetPlan("tok-free-up", "pro")
		plansLimited(t, "after the upgrade", pe.seq(t, 9, "plans.test", "GET", "/", plansBearer("tok-free-up")...), 8, `"pro";q=60;w=3600`)

		// An unknown token never reaches Tollgate or the backend.
		r := pe.send("plans.test", "GET", "/", plansBearer("tok-bogus")...)
		if r.status != http.StatusUnauthorized || r.header.Get("RateLimit-Policy") != "" || plansSeen(r) != "" {
			t.Fatalf("unknown token: status %d, RateLimit-Policy %q, backend %q; want 401 from forwardAuth alone",
				r.status, r.header.Get("RateLimit-Policy"), plansSeen(r))
		}
	})

	// A client naming its own plan gains nothing: forwardAuth replaces (or
	// deletes) its X-Plan before Tollgate reads it.
	t.Run("forged plan", func(t *testing.T) {
		pe.needRouter(t, "plans")
		for _, c := range []struct{ desc, tok, forged, seen string }{
			{"free claiming internal", "tok-free-f1", "internal", "free"},
			{"free claiming pro", "tok-free-f2", "pro", "free"},
			{"no plan from auth, claiming internal", "tok-none-f3", "internal", "<none>"},
		} {
			rs := pe.seq(t, 5, "plans.test", "GET", "/", append(plansBearer(c.tok), "X-Plan", c.forged)...)
			if plansSeen(rs[0]) != c.seen {
				t.Fatalf("%s: backend saw X-Plan %q, want %q", c.desc, plansSeen(rs[0]), c.seen)
			}
			plansLimited(t, c.desc, rs, 3, `"free";q=30;w=3600`)
		}
	})

	t.Run("unknown plan", func(t *testing.T) {
		pe.needRouter(t, "plans")
		rs := pe.seq(t, 5, "plans.test", "GET", "/", plansBearer("tok-weird-c")...)
		if plansSeen(rs[0]) != "platinum" {
			t.Fatalf("backend saw X-Plan %q, want platinum", plansSeen(rs[0]))
		}
		plansLimited(t, "platinum", rs, 3, `"free";q=30;w=3600`)
	})

	t.Run("exemptions", func(t *testing.T) {
		pe.needRouter(t, "exempt")
		before, err := pe.redis.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		// depth 1 is the rightmost X-Forwarded-For entry: the address the
		// client's own proxy (here, the test) added last.
		for _, xff := range []string{"10.1.2.3", "192.0.2.50, 10.9.9.9", "2001:db8:ffff:1::7", "2001:db8:abcd::5"} {
			plansUntouched(t, "exempt "+xff, pe.seq(t, 10, "exempt.test", "GET", "/", append(plansBearer("tok-free-d1"), "X-Forwarded-For", xff)...))
		}
		if after, err := pe.redis.ScriptCalls(); err != nil || after != before {
			t.Fatalf("exempt requests ran %d Redis scripts (%v), want none", after-before, err)
		}
		plansLimited(t, "outside", pe.seq(t, 5, "exempt.test", "GET", "/", append(plansBearer("tok-free-d2"), "X-Forwarded-For", "192.0.2.7")...), 3, `"exempt";q=30;w=3600`)
		// An exempt address further left is not the client's.
		plansLimited(t, "exempt address not at depth 1", pe.seq(t, 5, "exempt.test", "GET", "/", append(plansBearer("tok-free-d3"), "X-Forwarded-For", "10.1.2.3, 192.0.2.8")...), 3, `"exempt";q=30;w=3600`)
		// The range holds the client's address, not its /64: a neighbour
		// in the exempt address's /64 is limited.
		plansLimited(t, "exempt address's /64 neighbour", pe.seq(t, 4, "exempt.test", "GET", "/", append(plansBearer("tok-free-d4"), "X-Forwarded-For", "2001:db8:abcd::6")...), 3, `"exempt";q=30;w=3600`)
		// Exempt requests took nothing from the client's bucket.
		plansLimited(t, "exempt client from outside", pe.seq(t, 4, "exempt.test", "GET", "/", append(plansBearer("tok-free-d1"), "X-Forwarded-For", "192.0.2.9")...), 3, `"exempt";q=30;w=3600`)
	})

	t.Run("rotation", func(t *testing.T) {
		pe.needRouter(t, "rotate")
		fresh := func(prefix, xff func(i int) string) func(i int) []string {
			return func(i int) []string {
				return []string{"X-API-Key", fmt.Sprintf("%s-%d-%d", prefix(i), i, time.Now().UnixNano()), "X-Forwarded-For", xff(i)}
			}
		}
		same := func(s string) func(int) string { return func(int) string { return s } }
		v6 := func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i+1) }

		rs := pe.burst(t, 50, "rotate.test", "POST", "/login", fresh(same("a"), same("198.51.100.7")))
		plansCount(t, "50 fresh API keys, one address", rs, 5)
		for _, r := range rs {
			if r.status == 429 && !strings.Contains(r.body, `"violated-policies":["login"]`) {
				t.Fatalf("429 body %q does not name login alone", r.body)
			}
		}
		plansCount(t, "another address", pe.burst(t, 10, "rotate.test", "POST", "/login", fresh(same("b"), same("198.51.100.8"))), 5)
		plansCount(t, "100 fresh API keys, 100 addresses of one /64", pe.burst(t, 100, "rotate.test", "POST", "/login", fresh(same("c"), v6)), 5)
		// The rule is POST /login's: other requests from a spent address pass.
		if rs := pe.seq(t, 3, "rotate.test", "GET", "/login", "X-API-Key", fleetKey(t, "get"), "X-Forwarded-For", "198.51.100.7"); statuses(rs)[200] != 3 {
			t.Fatalf("GET /login from a spent address: %v, want 3 x 200", statuses(rs))
		}
	})

	// Already on main: the top level keyed by address groups IPv6 by /64.
	t.Run("ipv6 /64", func(t *testing.T) {
		pe.needRouter(t, "v6")
		rs := pe.burst(t, 100, "v6.test", "GET", "/", func(i int) []string {
			return []string{"X-Forwarded-For", fmt.Sprintf("2001:db8:1:2::%x", i+1)}
		})
		plansCount(t, "100 addresses of one /64", rs, 5)
		if r := pe.seq(t, 1, "v6.test", "GET", "/", "X-Forwarded-For", "2001:db8:1:3::1")[0]; r.status != 200 || r.header.Get("RateLimit") != `"v6";r=4;t=0` {
			t.Fatalf("another /64: status %d, RateLimit %q; want 200, r=4", r.status, r.header.Get("RateLimit"))
		}
	})

	// Refusals never reach the backend: it served exactly the 200s.
	if !t.Failed() {
		pe.mu.Lock()
		s := statuses(pe.all)
		pe.mu.Unlock()
		if hits := pe.backend.Hits(); hits != int64(s[200]) {
			t.Fatalf("the backend served %d requests; Traefik answered %v", hits, s)
		}
	}
}
