package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A middleware after Tollgate that strips the client's API key before the
// backend (a common chain) must not move the response's charge to another
// client: the charge goes to the client the request was decided for.
func TestReviewResponseCostChargesTheDecidedClient(t *testing.T) {
	addr := redistest.Start(t)
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst = 100000, "1m", 100000
	cfg.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	cfg.Redis.Timeout = "500ms"
	cfg.Redis.Username = fmt.Sprintf("test-%d", atomic.AddInt64(&backendSeq, 1))
	cfg.Class = fmt.Sprintf("cost-%d", atomic.AddInt64(&backendSeq, 1))
	cfg.DecisionHeader = "X-Decision"
	cfg.ResponseCost = &config.ResponseCost{Header: "X-Usage-Tokens", Max: 1000}
	cfg.Quotas = []config.Quota{{Name: "month", Limit: 100, Window: "month"}}
	next := http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		req.Header.Del("X-API-Key") // a headers middleware stripping the key
		rw.Header().Set("X-Usage-Tokens", "40")
		rw.WriteHeader(200)
	})
	hh, err := New(nil, next, cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*Tollgate)
	// 40, 80, 120 (into debt): the 4th is refused.
	for i := 1; i <= 4; i++ {
		rec := serve(h, "k")
		settle(t, h)
		want := 200
		if i == 4 {
			want = 429
		}
		if rec.Code != want {
			t.Fatalf("request %d: %d (RateLimit %q), want %d: the charges went to another client",
				i, rec.Code, rec.Header().Get("RateLimit"), want)
		}
		if i == 4 && !strings.Contains(rec.Header().Get("RateLimit"), `"month";r=0;`) {
			t.Errorf("RateLimit %q, want the quota spent", rec.Header().Get("RateLimit"))
		}
	}
}

// On Redis Cluster, a response's charge reaches a rule keyed its own way
// and its quota (one call per key): the tenant's quota of 100 takes 40 a
// response, whatever API key asks.
func TestReviewResponseCostClusterOwnKeys(t *testing.T) {
	addr := redistest.StartCluster(t)
	h := costHandler(t, addr, func() []string { return []string{"40"} }, func(c *config.Config) {
		c.Average, c.Burst = 100000, 100000
		c.Redis.Mode = "cluster"
		c.Rules = []config.Rule{{Name: "tenant", PathPrefix: "/", Average: 100000, Period: "1m", Burst: 100000,
			SourceCriterion: &config.SourceCriterion{RequestHeaderName: "X-Tenant"},
			ResponseCost:    &config.ResponseCost{Header: "X-Usage-Tokens", Max: 1000},
			Quotas:          []config.Quota{{Name: "tenantmonth", Limit: 100, Window: "month"}}}}
	})
	send := func(key, tenant string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Tenant", tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := 0; i < 500; i++ { // bounded: until the cluster's slots are known
		if send("warm", "warm").Header().Get("X-Decision") == "redis" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	settle(t, h)
	for i := 1; i <= 4; i++ {
		rec := send("k"+strconv.Itoa(i), "t1")
		settle(t, h)
		want := 200
		if i == 4 {
			want = 429
		}
		if rec.Code != want {
			t.Fatalf("request %d: %d by %s (RateLimit %q), want %d", i, rec.Code, rec.Header().Get("X-Decision"), rec.Header().Get("RateLimit"), want)
		}
	}
}
