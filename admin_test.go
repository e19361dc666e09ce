package tollgate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// adminPair is a limiter of class (burst 10 a minute, keyed by X-API-Key)
// and an admin endpoint for it, on the real redis-server at addr.
func adminPair(t *testing.T, addr, class string, mutate func(*config.Config)) (*Tollgate, http.Handler) {
	t.Helper()
	lim := handlerOn(t, addr, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 10, "1m", 10
		if mutate != nil {
			mutate(c)
		}
	})
	cfg := CreateConfig()
	cfg.ServeAdmin = true
	cfg.AdminClasses = []string{class}
	adm, err := New(nil, nil, cfg, class+"-admin")
	if err != nil {
		t.Fatal(err)
	}
	return lim, adm
}

func adminReq(t *testing.T, h http.Handler, method, query, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, "/admin?"+query, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func adminState(t *testing.T, h http.Handler, class, key string) adminView {
	t.Helper()
	rec := adminReq(t, h, "GET", "class="+url.QueryEscape(class)+"&key="+url.QueryEscape(key), "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %s %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var v adminView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET: %v: %s", err, rec.Body)
	}
	return v
}

// waitSync waits for the class's next sync to have run (the admin
// endpoint's changes reach the pod's limiters through it).
func waitSync(t *testing.T, lim *Tollgate, key string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	start := atomic.LoadInt64(&lim.adm.syncs)
	for time.Now().Before(deadline) {
		serve(lim, "nobody-"+key) // a request of the class starts a sync when due
		time.Sleep(50 * time.Millisecond)
		if atomic.LoadInt64(&lim.adm.syncs) > start+1 { // one begun after the change
			return
		}
	}
	t.Fatal("no sync within 3 s")
}

func TestAdminInspectResetOverride(t *testing.T) {
	addr := redistest.Start(t)
	lim, adm := adminPair(t, addr, "adm-a", nil)
	for i := 0; i < 7; i++ {
		if rec := serve(lim, "k1"); rec.Code != 200 {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	v := adminState(t, adm, "adm-a", "k1")
	if len(v.Policies) != 1 || v.Policies[0].Remaining != 3 || v.Policies[0].Limit != 10 || v.Policies[0].Window != 60 || v.Policies[0].Override != nil {
		t.Fatalf("after 7 of 10: %+v; want remaining 3 of 10 a 60 s window, no override", v)
	}
	if r := v.Policies[0].Reset; r < 41 || r > 43 {
		t.Fatalf("reset %d s; want 42 (7 tokens at 6 s each)", r)
	}
	if v2 := adminState(t, adm, "adm-a", "k1"); v2.Policies[0].Remaining != 3 {
		t.Fatalf("a GET took a token: remaining %d", v2.Policies[0].Remaining)
	}
	for i := 0; i < 3; i++ {
		serve(lim, "k1")
	}
	if rec := serve(lim, "k1"); rec.Code != 429 {
		t.Fatalf("the 11th request: %d, want 429", rec.Code)
	}
	if rec := adminReq(t, adm, "DELETE", "class=adm-a&key=k1", ""); rec.Code != 204 {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(lim, "k1"); rec.Code != 200 {
		t.Fatalf("after DELETE: %d, want 200 (the deny cache dropped, the bucket full)", rec.Code)
	}
	if v := adminState(t, adm, "adm-a", "k1"); v.Policies[0].Remaining != 9 {
		t.Fatalf("after DELETE and one request: remaining %d, want 9", v.Policies[0].Remaining)
	}

	// An override of burst 50.
	rec := adminReq(t, adm, "PUT", "class=adm-a&key=k2", `{"average":50,"burst":50,"period":"1h","ttl":"2s"}`)
	if rec.Code != 200 {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	var pv adminView
	if err := json.Unmarshal(rec.Body.Bytes(), &pv); err != nil || pv.Policies[0].Override == nil || pv.Policies[0].Limit != 50 || pv.Policies[0].Override.Burst != 50 {
		t.Fatalf("PUT's answer: %s", rec.Body)
	}
	waitSync(t, lim, "k2")
	for i := 0; i < 50; i++ {
		rec := serve(lim, "k2")
		if rec.Code != 200 {
			t.Fatalf("overridden request %d: %d", i, rec.Code)
		}
		if i == 0 && !strings.Contains(rec.Header().Get("RateLimit-Policy"), "q=50;") {
			t.Fatalf("RateLimit-Policy %q does not show the override (average 50)", rec.Header().Get("RateLimit-Policy"))
		}
	}
	if rec := serve(lim, "k2"); rec.Code != 429 {
		t.Fatalf("the 51st overridden request: %d, want 429", rec.Code)
	}
	// Its ttl ends: the class's limit again.
	time.Sleep(2 * time.Second)
	waitSync(t, lim, "k2")
	if rec := serve(lim, "k2"); !strings.Contains(rec.Header().Get("RateLimit-Policy"), "q=10") {
		t.Fatalf("after the ttl: RateLimit-Policy %q, want the class's q=10", rec.Header().Get("RateLimit-Policy"))
	}
}

func TestAdminRefusesBadRequests(t *testing.T) {
	addr := redistest.Start(t)
	_, adm := adminPair(t, addr, "adm-b", nil)
	for _, tc := range []struct {
		method, query, body string
		status              int
		field               string
	}{
		{"GET", "class=other&key=k", "", 400, "class"},
		{"GET", "key=k", "", 400, "class"},
		{"GET", "class=adm-b", "", 400, "key"},
		{"PUT", "class=adm-b&key=k", `{"burst":5}`, 400, "average"},
		{"PUT", "class=adm-b&key=k", `{"average":5,"burts":5}`, 400, `"burts"`},
		{"PUT", "class=adm-b&key=k", `{"average":5,"ttl":"31d"}`, 400, "ttl"},
		{"PUT", "class=adm-b&key=k", `{"average":5,"ttl":"800h"}`, 400, "ttl"},
		{"PUT", "class=adm-b&key=k", `not json`, 400, "body"},
		{"PUT", "class=adm-b&key=k", `{"average":5,"burst":-1}`, 400, "burst"},
		{"DELETE", "class=adm-b&key=k&policy=nope", "", 400, "policy"},
		{"POST", "class=adm-b&key=k", "", 405, ""},
	} {
		rec := adminReq(t, adm, tc.method, tc.query, tc.body)
		var p adminProblem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != tc.status || p.Field != tc.field || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s ?%s %s: %d field %q (%s); want %d naming %q", tc.method, tc.query, tc.body, rec.Code, p.Field, rec.Body, tc.status, tc.field)
		}
	}
}

func TestAdminRedisDown(t *testing.T) {
	_, adm := adminPair(t, "127.0.0.1:1", "adm-c", nil)
	if rec := adminReq(t, adm, "GET", "class=adm-c&key=k", ""); rec.Code != 503 {
		t.Fatalf("GET with Redis down: %d %s, want 503", rec.Code, rec.Body)
	}
	if rec := adminReq(t, adm, "DELETE", "class=adm-c&key=k", ""); rec.Code != 503 {
		t.Fatalf("DELETE with Redis down: %d %s, want 503", rec.Code, rec.Body)
	}
}

func TestAdminNeedsClasses(t *testing.T) {
	cfg := CreateConfig()
	cfg.ServeAdmin = true
	if _, err := New(nil, nil, cfg, "x"); err == nil || !strings.Contains(err.Error(), "adminClasses") {
		t.Fatalf("serveAdmin without adminClasses: %v", err)
	}
	cfg = CreateConfig()
	cfg.Average = 5
	cfg.AdminClasses = []string{"api"}
	if _, err := New(nil, nil, cfg, "x"); err == nil || !strings.Contains(err.Error(), "serveAdmin") {
		t.Fatalf("adminClasses on a limiter: %v", err)
	}
}
