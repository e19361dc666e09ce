package tollgate

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Concurrent requests each charge their whole response: the debt is kept,
// never cut at a burst past empty. Seen before: 100 tokens a second,
// burst 100, 100 concurrent requests of 50 tokens each; every charge but
// the first was cut to nothing, and the client used 20 times its limit.
func TestResponseCostOfConcurrentRequestsIsKeptWhole(t *testing.T) {
	addr := redistest.Start(t)
	// Every request is checked before any response ends (the backend holds
	// them all), as when 100 arrive at once and each takes a while.
	g := newGate()
	next := http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("X-Usage-Tokens", "50")
		g.ServeHTTP(rw, req)
	})
	h := handlerWith(t, addr, next, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1s", 100
		c.Class = fmt.Sprintf("cost-%d", atomic.AddInt64(&backendSeq, 1))
		c.ResponseCost = &config.ResponseCost{Header: "X-Usage-Tokens", Max: 1000}
	})
	var wg sync.WaitGroup
	var admitted int64
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := serve(h, "k"); rec.Code == http.StatusOK {
				atomic.AddInt64(&admitted, 1)
			}
		}()
	}
	waitArrived(t, g, 100) // the burst: each of the 100 admitted
	close(g.open)
	wg.Wait()
	settle(t, h)
	if admitted != 100 {
		t.Fatalf("%d of 100 concurrent requests admitted, want the burst, 100", admitted)
	}
	// 100 x 50 tokens used, 100 held: 4,900 tokens of debt and 1 to take,
	// 49 s at 100 a second.
	rec := serve(h, "k")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("after 5,000 tokens used of 100: %d, want 429", rec.Code)
	}
	if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra < 48 || ra > 50 {
		t.Errorf("Retry-After %q, want 49 s: the whole debt of 4,900 tokens", rec.Header().Get("Retry-After"))
	}
	if got := atomic.LoadInt64(&h.top.ps[0].Metrics.CostCharged); got != 100*49 {
		t.Errorf("tollgate_response_cost_tokens_total counted %d, want %d", got, 100*49)
	}
}
