package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// burstPlans is burst with client i's plan plan(i).
func burstPlans(h http.Handler, n int, plan func(i int) string) (recs []*httptest.ResponseRecorder, done *sync.WaitGroup) {
	recs = make([]*httptest.ResponseRecorder, n)
	done = &sync.WaitGroup{}
	for i := 0; i < n; i++ {
		recs[i] = httptest.NewRecorder()
		done.Add(1)
		go func(i int) {
			defer done.Done()
			h.ServeHTTP(recs[i], planRequest(fmt.Sprint("k", i), plan(i)))
		}(i)
	}
	return recs, done
}

func TestConcurrencyOfPlansAndRules(t *testing.T) {
	// The top level's class cap, inherited by a plan, is one pool for
	// every plan's clients; a plan's own cap is its clients' alone.
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 3, Key: "class", Name: "reports"}, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1m", 100
		c.PlanHeader = "X-Plan"
		c.Plans = []config.Plan{{Name: "free", Average: 100, Period: "1m", Burst: 100},
			{Name: "pro", Average: 100, Period: "1m", Burst: 100, Concurrency: &config.Concurrency{Max: 2, Key: "class"}}}
	})
	recs, done := burstPlans(h, 8, func(i int) string { return []string{"free", ""}[i%2] })
	waitArrived(t, g, 3)
	waitRefused(t, recs, 5)
	if n := atomic.LoadInt64(&g.in); n != 3 {
		t.Fatalf("free and top-level clients together: %d in flight, want the one pool of 3", n)
	}
	if m := h.conf.TopQuotas[0].Metrics; atomic.LoadInt64(&m.InFlight) != 3 {
		t.Errorf("in-flight gauge %d, want 3", atomic.LoadInt64(&m.InFlight))
	}
	series := `tollgate_concurrency_in_flight{class="` + h.conf.Class + `",policy="reports"}`
	if got := scrape(t)[series]; got != 3 {
		t.Errorf("%s = %v, want 3", series, got)
	}
	// The pro plan's own cap of 2 is not the pool's.
	pro, proDone := burstPlans(h, 4, func(int) string { return "pro" })
	waitArrived(t, g, 2)
	waitRefused(t, pro, 2)
	for _, r := range pro {
		if r.Code == http.StatusTooManyRequests && !strings.Contains(r.Body.String(), `"violated-policies":["pro-concurrency"]`) {
			t.Errorf("pro refusal %s, want its own cap named", r.Body.String())
		}
	}
	close(g.open)
	done.Wait()
	proDone.Wait()
	settle(t, h)
	if got := scrape(t)[series]; got != 0 {
		t.Errorf("%s = %v after the requests ended, want 0", series, got)
	}
	if got := scrape(t)[requests(h.conf.Class, "reports", "redis", "limited")]; got != 5 {
		t.Errorf("refusals counted under the cap: %v, want 5", got)
	}
}

func TestConcurrencyOfARuleKeyedItsOwnWay(t *testing.T) {
	// A rule keyed by IP caps each address, whatever API key it sends.
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 100}, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1m", 100
		c.Rules = []config.Rule{{Name: "sms", PathPrefix: "/sms", Average: 100, Period: "1m", Burst: 100,
			SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 0}}, Concurrency: &config.Concurrency{Max: 1}}}
	})
	recs := make([]*httptest.ResponseRecorder, 4)
	var done sync.WaitGroup
	for i := range recs {
		recs[i] = httptest.NewRecorder()
		done.Add(1)
		go func(i int) {
			defer done.Done()
			req := httptest.NewRequest("POST", "/sms", nil)
			req.Header.Set("X-API-Key", fmt.Sprint("rotated-", i))
			req.RemoteAddr = "192.0.2.7:1234"
			h.ServeHTTP(recs[i], req)
		}(i)
	}
	waitArrived(t, g, 1)
	waitRefused(t, recs, 3)
	close(g.open)
	done.Wait()
	settle(t, h)
}

func TestConcurrencyInACluster(t *testing.T) {
	// Per-client caps in a Redis Cluster: each client's slots in its own
	// slot's node, given back call by call, many clients at once.
	addr := redistest.StartCluster(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 2}, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 1000, "1m", 1000
		c.Redis.Mode = "cluster"
	})
	h.next = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	redistest.WaitFor(t, func() bool { return serve(h, "warm").Header().Get("X-Decision") == "redis" }, "the cluster's slots known")
	settle(t, h)
	h.next = g
	recs, done := burst(h, g, 40, func(i int) string { return fmt.Sprint("client-", i%10) })
	waitArrived(t, g, 20)
	waitRefused(t, recs, 20)
	if n := atomic.LoadInt64(&g.in); n != 20 {
		t.Errorf("%d in flight, want 2 for each of 10 clients", n)
	}
	close(g.open)
	done.Wait()
	settle(t, h)
	// Every slot came back: each client holds 2 at once again.
	g2 := newGate()
	h.next = g2
	recs, done = burst(h, g2, 40, func(i int) string { return fmt.Sprint("client-", i%10) })
	waitArrived(t, g2, 20)
	waitRefused(t, recs, 20)
	close(g2.open)
	done.Wait()
	for _, r := range recs {
		if d := r.Header().Get("X-Decision"); d != "redis" {
			t.Errorf("decided by %q, want redis", d)
		}
	}
}
