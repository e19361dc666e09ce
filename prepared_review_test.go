package tollgate

import (
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// generalAnswer is the general path's answer to h's request with API key
// k over set at the cache's instant (lookup and answer), and the policy it
// counted the refusal under (the count is undone).
func generalAnswer(t *testing.T, h *Tollgate, set *policySet, k string) (*httptest.ResponseRecorder, int) {
	t.Helper()
	d := make([]int64, set.decisionLen)
	if !set.denied.lookup(clientKeyOf(h, k), d) {
		t.Fatal("the refusal is no longer cached")
	}
	before := make([]int64, len(set.ps))
	for i, p := range set.ps {
		before[i] = atomic.LoadInt64(&p.Metrics.N[decidedCache*metrics.NResults+metrics.Limited])
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", k)
	h.answer(rec, req, set, d, decidedCache)
	counted := -1
	for i, p := range set.ps {
		if atomic.LoadInt64(&p.Metrics.N[decidedCache*metrics.NResults+metrics.Limited]) != before[i] {
			counted = i
			atomic.AddInt64(&p.Metrics.N[decidedCache*metrics.NResults+metrics.Limited], -1)
		}
	}
	return rec, counted
}

// sameAnswer reports whether two responses are the same, byte for byte.
func sameAnswer(a, b *httptest.ResponseRecorder) bool {
	return a.Code == b.Code && reflect.DeepEqual(a.Header(), b.Header()) && a.Body.String() == b.Body.String()
}

// With several policies, the one a refusal is counted under (decider) and
// the one the legacy headers describe change when the longest wait, counted
// down, reaches countDown's floor (1 ms) and equals a shorter one already
// there: the prepared answer must not outlive that instant either.
func TestPreparedRefusalWaitsAtTheirFloor(t *testing.T) {
	for _, headers := range []string{"ietf", "legacy", "both"} {
		t.Run(headers, func(t *testing.T) { testWaitsAtTheirFloor(t, headers) })
	}
}

func testWaitsAtTheirFloor(t *testing.T, headers string) {
	// The top level (first) waits 1.1 s, the rule 1.2 s: at 1199 ms both
	// read 1 ms, and the first of equal waits decides.
	f := redistest.StartFake(t, "+0 0 1100 1100 0 1200 1200\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) {
		c.Headers = headers
		c.Rules = []config.Rule{{Name: "search", Average: 2, Burst: 2}}
	})
	set := h.policiesFor(httptest.NewRequest("GET", "/", nil))
	now := 10 * time.Second
	set.denied.now = func() int64 { return int64(now) }
	if rec := serve(h, "k"); rec.Code != 429 {
		t.Fatalf("first request: %d, want a refusal from Redis", rec.Code)
	}
	for _, at := range []time.Duration{200, 1000, 1100, 1198, 1199} {
		now = 10*time.Second + at*time.Millisecond
		before := [2]int64{}
		for i, p := range set.ps {
			before[i] = atomic.LoadInt64(&p.Metrics.N[decidedCache*metrics.NResults+metrics.Limited])
		}
		got := serve(h, "k")
		counted := -1
		for i, p := range set.ps {
			if atomic.LoadInt64(&p.Metrics.N[decidedCache*metrics.NResults+metrics.Limited]) != before[i] {
				counted = i
			}
		}
		want, wantCounted := generalAnswer(t, h, set, "k")
		if !sameAnswer(got, want) {
			t.Fatalf("at %d ms: answered\n%d %v %s\nthe general path:\n%d %v %s", at, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
		if counted != wantCounted {
			t.Fatalf("at %d ms: counted under policy %d, the general path under %d", at, counted, wantCounted)
		}
	}
	if n := atomic.LoadInt64(&f.Evals); n != 1 {
		t.Fatalf("%d Redis calls, want 1", n)
	}
}
