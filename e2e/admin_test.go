package e2e

// Operators' controls (serveAdmin) on three real Traefik replicas and on
// three in-process pods (the plugin compiled, then interpreted): a key's
// state read on every replica, a reset honoured by every replica within
// a second, an override set, honoured, shown and reverting after its ttl;
// a class the endpoint does not name, and Redis down.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// adminLimitOpts is the limited route's middleware: class "api", 10 a
// minute, burst 10, keyed by X-API-Key.
func adminLimitOpts(redisAddr string) map[string]interface{} {
	return limitOpts(redisAddr, "average", 10, "period", "1m", "burst", 10, "class", "api",
		"decisionHeader", decisionHdr, "redis.timeout", "1s")
}

// adminOpts is the admin endpoint's middleware.
func adminOpts() map[string]interface{} {
	return map[string]interface{}{"serveAdmin": true, "adminClasses": []interface{}{"api"}}
}

// adminPods is how the scenario reaches n pods (or replicas): a limited
// request for key, and a request to the admin endpoint.
type adminPods struct {
	n     int
	send  func(t *testing.T, i int, key string) (status int, policy string)
	admin func(t *testing.T, i int, method, query, body string) (status int, reply []byte)
	stop  func() // Redis down
}

type adminView struct {
	Class    string `json:"class"`
	Policies []struct {
		Name      string           `json:"name"`
		Limit     int64            `json:"limit"`
		Remaining int64            `json:"remaining"`
		Reset     int64            `json:"reset"`
		Override  *json.RawMessage `json:"override"`
	} `json:"policies"`
}

func checkAdmin(t *testing.T, p adminPods) {
	t.Helper()
	expect := func(i int, key string, want int) string {
		t.Helper()
		status, policy := p.send(t, i%p.n, key)
		if status != want {
			t.Fatalf("pod %d, key %s: %d, want %d", i%p.n, key, status, want)
		}
		return policy
	}
	state := func(i int, key string) adminView {
		t.Helper()
		status, reply := p.admin(t, i, "GET", "class=api&key="+key, "")
		var v adminView
		if err := json.Unmarshal(reply, &v); status != 200 || err != nil || len(v.Policies) != 1 {
			t.Fatalf("GET on pod %d: %d %s", i, status, reply)
		}
		return v
	}
	// 7 of a burst of 10, spread over the pods: 3 left, on every pod.
	for i := 0; i < 7; i++ {
		expect(i, "k1", http.StatusOK)
	}
	for i := 0; i < p.n; i++ {
		if v := state(i, "k1"); v.Policies[0].Remaining != 3 || v.Policies[0].Limit != 10 || v.Policies[0].Name != "api" {
			t.Fatalf("pod %d after 7 requests: %+v; want 3 of 10 left", i, v.Policies[0])
		}
	}
	// Refused everywhere, then reset: through on every pod within 1 s.
	for i := 0; i < 3; i++ {
		expect(i, "k1", http.StatusOK)
	}
	for i := 0; i < p.n; i++ {
		expect(i, "k1", http.StatusTooManyRequests)
	}
	if status, reply := p.admin(t, 0, "DELETE", "class=api&key=k1", ""); status != 204 {
		t.Fatalf("DELETE: %d %s", status, reply)
	}
	reset := time.Now()
	for i := 0; i < p.n; i++ {
		for {
			if status, _ := p.send(t, i, "k1"); status == http.StatusOK {
				break
			}
			if time.Since(reset) > time.Second {
				t.Fatalf("pod %d still refuses k1 %s after the reset", i, time.Since(reset))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// An override of burst 50, 50 an hour, for 3 s: honoured and shown
	// by every pod within 1 s (50 requests over the pods, then refused).
	status, reply := p.admin(t, 1%p.n, "PUT", "class=api&key=k2", `{"average":50,"burst":50,"period":"1h","ttl":"3s"}`)
	if status != 200 || !strings.Contains(string(reply), `"limit":50`) {
		t.Fatalf("PUT: %d %s", status, reply)
	}
	set := time.Now()
	time.Sleep(time.Second)
	for i := 0; i < 50; i++ {
		if policy := expect(i, "k2", http.StatusOK); !strings.Contains(policy, "q=50;") {
			t.Fatalf("request %d on pod %d: RateLimit-Policy %q does not show the override", i, i%p.n, policy)
		}
	}
	if time.Since(set) < 3*time.Second {
		expect(50, "k2", http.StatusTooManyRequests)
	}
	if v := state(2%p.n, "k2"); v.Policies[0].Override == nil || v.Policies[0].Limit != 50 {
		t.Fatalf("GET of the overridden key: %+v", v.Policies[0])
	}
	// Its ttl ends: the class's own limit on every pod within 1 s.
	time.Sleep(time.Until(set.Add(4 * time.Second)))
	for i := 0; i < p.n; i++ {
		status, policy := p.send(t, i, "k2")
		if !strings.Contains(policy, "q=10;") {
			t.Fatalf("pod %d after the override's ttl: %d, RateLimit-Policy %q, want the class's q=10", i, status, policy)
		}
	}
	// A class the endpoint does not name; Redis down.
	if status, reply := p.admin(t, 0, "GET", "class=other&key=k1", ""); status != 400 || !strings.Contains(string(reply), `"field":"class"`) {
		t.Fatalf("another class: %d %s, want 400 naming class", status, reply)
	}
	p.stop()
	if status, reply := p.admin(t, 0, "GET", "class=api&key=k1", ""); status != 503 {
		t.Fatalf("Redis down: %d %s, want 503", status, reply)
	}
}

// TestFleetAdmin: three Traefik replicas, the limited route on / and the
// admin endpoint on /tollgate-admin.
func TestFleetAdmin(t *testing.T) {
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", adminLimitOpts(addr)},
			route{"admin", "PathPrefix(`/tollgate-admin`)", adminOpts()})
	}, "api@file", "admin@file")
	n := len(fe.fleet.Replicas)
	checkAdmin(t, adminPods{
		n: n,
		send: func(t *testing.T, i int, key string) (int, string) {
			req, err := http.NewRequest("GET", fe.fleet.Replicas[i].URL("/"), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-API-Key", key)
			resp, err := fleetClient.Do(req)
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
		},
		admin: func(t *testing.T, i int, method, query, body string) (int, []byte) {
			req, err := http.NewRequest(method, fe.fleet.Replicas[i].URL("/tollgate-admin?"+query), strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := fleetClient.Do(req)
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		},
		stop: func() { fe.redis.Kill() },
	})
}

// TestAdminAcrossPods is TestFleetAdmin in-process: three pods on one
// Redis, each with its limiter and its admin endpoint, the plugin
// compiled, then each pod a Yaegi interpreter of its own.
func TestAdminAcrossPods(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		var lims, adms []http.Handler
		for i := 0; i < 3; i++ {
			pod := e.pod()
			lims = append(lims, e.handler(pod, "api@file", adminLimitOpts(e.redis.Addr)))
			adms = append(adms, e.handler(pod, "admin@file", adminOpts()))
		}
		checkAdmin(t, adminPods{
			n: 3,
			send: func(t *testing.T, i int, key string) (int, string) {
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("X-API-Key", key)
				rec := httptest.NewRecorder()
				lims[i].ServeHTTP(rec, req)
				return rec.Code, rec.Header().Get("RateLimit-Policy")
			},
			admin: func(t *testing.T, i int, method, query, body string) (int, []byte) {
				req := httptest.NewRequest(method, "/tollgate-admin?"+query, strings.NewReader(body))
				rec := httptest.NewRecorder()
				adms[i].ServeHTTP(rec, req)
				return rec.Code, rec.Body.Bytes()
			},
			stop: func() { e.redis.Kill() },
		})
	})
}

// TestAdminUnderReadmeACL: the limiter of a synced class and its admin
// endpoint, as the README's smallest ACL user: GET, PUT, a request under
// the override, DELETE of the override and a reset, with nothing refused
// by the ACL (ACL LOG), compiled and under Yaegi.
func TestAdminUnderReadmeACL(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		user, acl := readmeACL(t, "s3cret")
		if _, err := e.redis.Do("ACL", append([]interface{}{"SETUSER"}, acl...)...); err != nil {
			t.Fatal(err)
		}
		redisOpts := map[string]interface{}{"endpoints": []interface{}{e.redis.Addr}, "username": user, "password": "s3cret"}
		lim := adminLimitOpts(e.redis.Addr)
		lim["redis"] = redisOpts
		adm := adminOpts()
		pod := e.pod()
		h := e.handler(pod, "api@file", lim)
		a := e.handler(pod, "admin@file", adm)
		call := func(method, query, body string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(method, "/tollgate-admin?"+query, strings.NewReader(body))
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			return rec
		}
		if rec := do(h, "GET", "/", "k1"); rec.Code != 200 {
			t.Fatalf("a request: %d %s", rec.Code, rec.Body)
		}
		if rec := call("GET", "class=api&key=k1", ""); rec.Code != 200 {
			t.Fatalf("GET: %d %s", rec.Code, rec.Body)
		}
		if rec := call("PUT", "class=api&key=k1", `{"average":50,"burst":50,"period":"1h"}`); rec.Code != 200 {
			t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			rec := do(h, "GET", "/", "k1")
			if rec.Code == 200 && strings.Contains(rec.Header().Get("RateLimit-Policy"), "q=50;") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the override not honoured within 2 s: %d %q", rec.Code, rec.Header().Get("RateLimit-Policy"))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if rec := call("DELETE", "class=api&key=k1&override=1", ""); rec.Code != 204 {
			t.Fatalf("DELETE override: %d %s", rec.Code, rec.Body)
		}
		if rec := call("DELETE", "class=api&key=k1", ""); rec.Code != 204 {
			t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(500 * time.Millisecond) // a sync reads the change (adminSync)
		do(h, "GET", "/", "k1")
		if denied, err := e.redis.Do("ACL", "LOG"); err != nil || len(denied.([]interface{})) != 0 {
			t.Fatalf("ACL LOG = %v (%v): the documented ACL refused a command", denied, err)
		}
	})
}
