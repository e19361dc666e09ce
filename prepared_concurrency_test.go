package tollgate

import (
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// preparedPair is h, refused once by Redis at 10 s on its deny cache's
// clock (*clk, read atomically), and ref, an instance alike with a clock of
// its own (*refClk), refused at the same instant: the general path's
// answers at any instant, without moving h's cache's time.
func preparedPair(t *testing.T, f *redistest.Fake, mutate func(*config.Config)) (h, ref *Tollgate, clk, refClk *int64) {
	t.Helper()
	h, ref = handlerOn(t, f.Addr(), mutate), handlerOn(t, f.Addr(), mutate)
	clk, refClk = new(int64), new(int64)
	*clk, *refClk = int64(10*time.Second), int64(10*time.Second)
	h.top.denied.now = func() int64 { return atomic.LoadInt64(clk) }
	ref.top.denied.now = func() int64 { return atomic.LoadInt64(refClk) }
	for _, x := range []*Tollgate{h, ref} {
		if rec := serve(x, "k"); rec.Code != 429 {
			t.Fatalf("first request: %d, want a refusal from Redis", rec.Code)
		}
	}
	return h, ref, clk, refClk
}

// expectedAt is the general path's answer on ref at each instant of ats
// (ms after the refusal), in order.
func expectedAt(t *testing.T, ref *Tollgate, refClk *int64, ats []int64) map[int64]*httptest.ResponseRecorder {
	t.Helper()
	want := make(map[int64]*httptest.ResponseRecorder)
	for _, at := range ats {
		atomic.StoreInt64(refClk, int64(10*time.Second)+at*int64(time.Millisecond))
		rec, _ := generalAnswer(t, ref, ref.top, "k") // (want[at], _ = ...: Yaegi assigns no map element)
		want[at] = rec
	}
	return want
}

// The ticks of a refusal of 5.5 s (until full 9.2 s), and the instants
// either side.
var tickInstants = []int64{0, 1, 499, 500, 501, 999, 1000, 1499, 1500, 2699, 2700, 4499, 4500, 5000, 5498, 5499}

// Many clients refused at once from the cache, step by step across the
// seconds their refusal names: every answer is the general path's at
// that instant, each counted once, and none goes to Redis.
func TestPreparedRefusalsConcurrentAtEachInstant(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		mutate func(*config.Config)
	}{
		{"IETF headers (ServeHTTP's own path)", nil},
		{"every header and a decision header (serveAny)", func(c *config.Config) {
			c.Headers = "both"
			c.DecisionHeader = "X-Decision"
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := redistest.StartFake(t, "+0 0 5500 9200\r\n")
			h, ref, clk, refClk := preparedPair(t, f, tc.mutate)
			want := expectedAt(t, ref, refClk, tickInstants)
			limited := &h.top.ps[0].Metrics.N[decidedCache*metrics.NResults+metrics.Limited]
			before := atomic.LoadInt64(limited)
			const workers, each = 8, 10
			for _, at := range tickInstants {
				atomic.StoreInt64(clk, int64(10*time.Second)+at*int64(time.Millisecond))
				got := make([]*httptest.ResponseRecorder, workers*each)
				var wg sync.WaitGroup
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := 0; i < each; i++ {
							got[w*each+i] = serve(h, "k")
						}
					}(w)
				}
				wg.Wait()
				for i, rec := range got {
					if !sameAnswer(rec, want[at]) {
						t.Fatalf("at %d ms, request %d: answered\n%d %v %s\nthe general path:\n%d %v %s", at, i,
							rec.Code, rec.Header(), rec.Body, want[at].Code, want[at].Header(), want[at].Body)
					}
				}
			}
			countedFromCache(t, limited, before, int64(workers*each*len(tickInstants)), f)
		})
	}
}

// The clock moves across the seconds while clients are being refused: a
// request during which it did not move is answered as the general path
// answers at that instant; one during which it did, as at one of the
// instants it passed through.
func TestPreparedRefusalsWhileTheClockMoves(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 5500 9200\r\n")
	h, ref, clk, refClk := preparedPair(t, f, nil)
	want := expectedAt(t, ref, refClk, tickInstants)
	limited := &h.top.ps[0].Metrics.N[decidedCache*metrics.NResults+metrics.Limited]
	before := atomic.LoadInt64(limited)
	const workers, each, stride = 8, 40, 20 // the clock moves every stride answers
	type seen struct {
		from, to int64 // the clock's step before and after the request
		rec      *httptest.ResponseRecorder
	}
	got := make([]seen, workers*each)
	var mu sync.Mutex // moves the clock one step at a time, forwards only
	step, done := int64(0), int64(0)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				from := atomic.LoadInt64(&step)
				rec := serve(h, "k")
				got[w*each+i] = seen{from, atomic.LoadInt64(&step), rec}
				if atomic.AddInt64(&done, 1)%stride == 0 {
					mu.Lock()
					if s := step + 1; s < int64(len(tickInstants)) {
						atomic.StoreInt64(clk, int64(10*time.Second)+tickInstants[s]*int64(time.Millisecond))
						atomic.StoreInt64(&step, s)
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	for i, s := range got {
		ok := false
		for k := s.from; k <= s.to && !ok; k++ {
			ok = sameAnswer(s.rec, want[tickInstants[k]])
		}
		if !ok {
			t.Fatalf("request %d, between %d and %d ms: answered\n%d %v %s\nthe general path at %d ms:\n%d %v %s", i,
				tickInstants[s.from], tickInstants[s.to], s.rec.Code, s.rec.Header(), s.rec.Body,
				tickInstants[s.from], want[tickInstants[s.from]].Code, want[tickInstants[s.from]].Header(), want[tickInstants[s.from]].Body)
		}
	}
	countedFromCache(t, limited, before, workers*each, f)
}

// A refusal replaced in the cache (remember: another request's refusal
// from Redis) while clients are refused from it: a request that starts
// after the replacement is answered from the new refusal, never from an
// answer prepared for the one it replaced.
func TestPreparedRefusalReplacedWhileRefusing(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 5500 9200\r\n")
	h, ref, _, _ := preparedPair(t, f, nil)
	key := clientKeyOf(h, "k")
	refusals := [2][]int64{{0, 0, 5500, 9200}, {0, 0, 7500, 9200}} // by generation, even and odd
	var want [2]*httptest.ResponseRecorder
	for g, d := range refusals {
		ref.top.denied.remember(key, d)
		rec, _ := generalAnswer(t, ref, ref.top, "k")
		want[g] = rec
	}
	limited := &h.top.ps[0].Metrics.N[decidedCache*metrics.NResults+metrics.Limited]
	before := atomic.LoadInt64(limited)
	const workers, each, stride = 6, 40, 8 // a replacement every stride answers
	type seen struct {
		done, started int64 // replacements done before the request, started after it
		rec           *httptest.ResponseRecorder
	}
	got := make([]seen, workers*each)
	var started, done, answered int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				d := atomic.LoadInt64(&done)
				rec := serve(h, "k")
				got[w*each+i] = seen{d, atomic.LoadInt64(&started), rec}
				if atomic.AddInt64(&answered, 1)%stride == 0 {
					mu.Lock() // replacements in the order of their generations
					g := atomic.AddInt64(&started, 1)
					h.top.denied.remember(key, refusals[g%2])
					atomic.AddInt64(&done, 1)
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	for i, s := range got {
		if s.done == s.started && !sameAnswer(s.rec, want[s.done%2]) {
			t.Fatalf("request %d, after replacement %d: answered\n%d %v %s\nthe general path:\n%d %v %s", i, s.done,
				s.rec.Code, s.rec.Header(), s.rec.Body, want[s.done%2].Code, want[s.done%2].Header(), want[s.done%2].Body)
		}
		if s.done != s.started && !sameAnswer(s.rec, want[0]) && !sameAnswer(s.rec, want[1]) {
			t.Fatalf("request %d: answered %d %v %s", i, s.rec.Code, s.rec.Header(), s.rec.Body)
		}
	}
	countedFromCache(t, limited, before, workers*each, f)
}

// A prepared answer's header values are shared by every response it
// answers: a later middleware that adds to one of them (Header().Add)
// changes that response alone, neither another it answered nor the next.
func TestPreparedRefusalHeadersAddedToLater(t *testing.T) {
	f := redistest.StartFake(t, "+0 0 5500 9200\r\n")
	h, _, _, _ := preparedPair(t, f, func(c *config.Config) {
		c.Headers = "both"
		c.DecisionHeader = "X-Decision"
	})
	serve(h, "k") // prepares the answer
	if r := refuseCached(h.top.denied, clientKeyOf(h, "k"), httptest.NewRecorder()); r != refused {
		t.Fatalf("refuseCached = %d, want the prepared answer", r)
	}
	recs := []*httptest.ResponseRecorder{serve(h, "k"), serve(h, "k")}
	for i, rec := range recs {
		for k := range rec.Header() {
			rec.Header().Add(k, "added by "+strconv.Itoa(i))
		}
	}
	want, _ := generalAnswer(t, h, h.top, "k")
	for i, rec := range recs {
		for k, v := range want.Header() {
			if got := rec.Header()[k]; len(got) != 2 || got[0] != v[0] || got[1] != "added by "+strconv.Itoa(i) {
				t.Fatalf("response %d: %s: %q, want %q and what it added", i, k, got, v)
			}
		}
	}
	if got := serve(h, "k"); !sameAnswer(got, want) {
		t.Fatalf("answered\n%d %v %s\nthe general path:\n%d %v %s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
	}
}

// countedFromCache checks that all refusals since the count was before
// were counted as the cache's, and that Redis was called twice in all (the
// first refusal of each of the pair's instances).
func countedFromCache(t *testing.T, limited *int64, before, all int64, f *redistest.Fake) {
	t.Helper()
	if n := atomic.LoadInt64(limited) - before; n != all {
		t.Fatalf("%d cache refusals counted, want %d", n, all)
	}
	if n := atomic.LoadInt64(&f.Evals); n != 2 {
		t.Fatalf("%d Redis calls, want 2 (the first refusal of each instance)", n)
	}
}
