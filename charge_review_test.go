package tollgate

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A middleware after Tollgate that strips the client's API key before the
// backend (a common chain) must not move the response's charge to another
// client: the charge goes to the client the request was decided for.
func TestReviewResponseCostChargesTheDecidedClient(t *testing.T) {
	addr := redistest.Start(t)
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst = 100000, "1m", 100000
	cfg.SourceCriterion = &SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	cfg.Redis.Timeout = "500ms"
	cfg.Redis.Username = fmt.Sprintf("test-%d", atomic.AddInt64(&backendSeq, 1))
	cfg.Class = fmt.Sprintf("cost-%d", atomic.AddInt64(&backendSeq, 1))
	cfg.DecisionHeader = "X-Decision"
	cfg.ResponseCost = &ResponseCost{Header: "X-Usage-Tokens", Max: 1000}
	cfg.Quotas = []Quota{{Name: "month", Limit: 100, Window: "month"}}
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
