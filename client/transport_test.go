package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/client"
)

// scripted is a server answering from a script: the i-th request gets
// answer(i, request body); it keeps what it received.
type scripted struct {
	answer func(i int, w http.ResponseWriter)
	mu     sync.Mutex
	bodies []string
	times  []time.Time
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := len(s.bodies)
	s.bodies = append(s.bodies, string(b))
	s.times = append(s.times, time.Now())
	s.mu.Unlock()
	s.answer(i, w)
}

func (s *scripted) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// refuseFirst refuses the first n requests with headers h, then admits.
func refuseFirst(n int, status int, h map[string]string) func(int, http.ResponseWriter) {
	return func(i int, w http.ResponseWriter) {
		if i < n {
			for k, v := range h {
				w.Header().Set(k, v)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"status":429}`)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// do sends method to url with body (nil: none) through rt.
func do(t *testing.T, rt http.RoundTripper, ctx context.Context, method, url string, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func TestRetriesAfterRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc   string
		status int
		h      func() map[string]string
	}{
		{"429, seconds", 429, func() map[string]string { return map[string]string{"Retry-After": "1"} }},
		{"503, seconds", 503, func() map[string]string { return map[string]string{"Retry-After": "1"} }},
		{"429, an HTTP date", 429, func() map[string]string {
			now := time.Now().UTC()
			return map[string]string{"Date": now.Format(http.TimeFormat), "Retry-After": now.Add(time.Second).Format(http.TimeFormat)}
		}},
	} {
		c := c
		t.Run(c.desc, func(t *testing.T) {
			t.Parallel()
			srv := &scripted{}
			srv.answer = func(i int, w http.ResponseWriter) { refuseFirst(1, c.status, c.h())(i, w) }
			url := serve(t, srv).URL
			stats := &client.Stats{}
			start := time.Now()
			resp, err := do(t, client.NewTransport(nil, client.Record(stats)), context.Background(), "GET", url, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v, %v; want 200 after a retry", resp, err)
			}
			// Retry-After plus jitter: between 1 and 2 s (the slack is a
			// slow machine's).
			if d := time.Since(start); d < time.Second || d > 2*time.Second+time.Second {
				t.Fatalf("answered after %v; want Retry-After (1 s) plus a jitter under 1 s", d)
			}
			if n := len(srv.received()); n != 2 {
				t.Fatalf("the server got %d requests, want 2", n)
			}
			if s := stats.Snapshot(); s.Requests != 1 || s.Refusals != 1 || s.Retries != 1 || s.Returned != 0 || s.WaitTime < time.Second {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

func TestReturnsRefusalsItMayNotRetry(t *testing.T) {
	t.Parallel()
	ra := map[string]string{"Retry-After": "0"}
	for _, c := range []struct {
		desc     string
		status   int
		h        map[string]string
		method   string
		header   string // set on the request, with any value
		opts     []client.Option
		requests int // the server gets
		want     int // the status returned
	}{
		{"503 without Retry-After", 503, nil, "GET", "", nil, 1, 503},
		{"429 without Retry-After", 429, nil, "GET", "", nil, 1, 429},
		{"a bad Retry-After", 429, map[string]string{"Retry-After": "soon"}, "GET", "", nil, 1, 429},
		{"POST", 429, ra, "POST", "", nil, 1, 429},
		{"PATCH", 429, ra, "PATCH", "", nil, 1, 429},
		{"POST with RetryAll", 429, ra, "POST", "", []client.Option{client.RetryAll()}, 2, 200},
		{"POST with an Idempotency-Key", 429, ra, "POST", "Idempotency-Key", nil, 2, 200},
		{"PUT", 429, ra, "PUT", "", nil, 2, 200},
		{"DELETE", 429, ra, "DELETE", "", nil, 2, 200},
		{"MaxRetries 0", 429, ra, "GET", "", []client.Option{client.MaxRetries(0)}, 1, 429},
		{"MaxWait 0", 429, ra, "GET", "", []client.Option{client.MaxWait(0)}, 1, 429},
		{"Retry-After past MaxWait", 429, map[string]string{"Retry-After": "10"}, "GET", "", []client.Option{client.MaxWait(2 * time.Second)}, 1, 429},
		{"Retry-After for ever", 429, map[string]string{"Retry-After": "999999999999999"}, "GET", "", nil, 1, 429},
	} {
		c := c
		t.Run(c.desc, func(t *testing.T) {
			t.Parallel()
			srv := &scripted{answer: refuseFirst(1, c.status, c.h)}
			url := serve(t, srv).URL
			stats := &client.Stats{}
			rt := client.NewTransport(nil, append(c.opts, client.Record(stats))...)
			req, _ := http.NewRequest(c.method, url, strings.NewReader("payload"))
			if c.header != "" {
				req.Header[c.header] = []string{"k1"}
			}
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if n := len(srv.received()); n != c.requests {
				t.Fatalf("the server got %d requests, want %d", n, c.requests)
			}
			if d := time.Since(start); c.want != 200 && d > time.Second {
				t.Fatalf("the refusal came back after %v: the transport waited", d)
			}
			if s := stats.Snapshot(); s.Refusals != 1 || (s.Returned == 1) != (c.want != 200) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestReplaysTheBody: a retry sends the body again, from GetBody; a body
// without GetBody is not retried, and is closed.
func TestReplaysTheBody(t *testing.T) {
	t.Parallel()
	srv := &scripted{answer: refuseFirst(1, 429, map[string]string{"Retry-After": "0"})}
	url := serve(t, srv).URL
	rt := client.NewTransport(nil)
	resp, err := do(t, rt, context.Background(), "PUT", url, strings.NewReader("the body"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	if got := srv.received(); len(got) != 2 || got[0] != "the body" || got[1] != "the body" {
		t.Fatalf("the server got %q, want the body twice", got)
	}

	srv2 := &scripted{answer: refuseFirst(1, 429, map[string]string{"Retry-After": "0"})}
	url2 := serve(t, srv2).URL
	body := &closeCounter{Reader: strings.NewReader("once")}
	req, _ := http.NewRequest("PUT", url2, body) // an io.Reader NewRequest cannot rewind: no GetBody
	if req.GetBody != nil {
		t.Fatal("GetBody set")
	}
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 429 || len(srv2.received()) != 1 {
		t.Fatalf("a body without GetBody: status %d after %d requests; want the 429, not retried", resp.StatusCode, len(srv2.received()))
	}
	if atomic.LoadInt32(&body.closed) == 0 {
		t.Fatal("the request's body was not closed")
	}
}

type closeCounter struct {
	io.Reader
	closed int32
}

func (c *closeCounter) Close() error {
	atomic.AddInt32(&c.closed, 1)
	return nil
}

// TestMaxRetries: a server that always refuses gets MaxRetries+1
// requests, and the caller its last refusal.
func TestMaxRetries(t *testing.T) {
	t.Parallel()
	srv := &scripted{answer: refuseFirst(1000, 429, map[string]string{"Retry-After": "0"})}
	url := serve(t, srv).URL
	stats := &client.Stats{}
	resp, err := do(t, client.NewTransport(nil, client.MaxRetries(2), client.Record(stats)), context.Background(), "GET", url, nil)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("%v, %v; want the 429", resp, err)
	}
	if n := len(srv.received()); n != 3 {
		t.Fatalf("the server got %d requests, want 3", n)
	}
	if s := stats.Snapshot(); s.Refusals != 3 || s.Retries != 2 || s.Returned != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestMaxWaitBoundsTheRetries: retries stop when the next wait would
// pass MaxWait.
func TestMaxWaitBoundsTheRetries(t *testing.T) {
	t.Parallel()
	srv := &scripted{answer: refuseFirst(1000, 429, map[string]string{"Retry-After": "1"})}
	url := serve(t, srv).URL
	start := time.Now()
	resp, err := do(t, client.NewTransport(nil, client.MaxRetries(100), client.MaxWait(2500*time.Millisecond)), context.Background(), "GET", url, nil)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("%v, %v; want the 429", resp, err)
	}
	// Each retry waits 1 to 2 s: one or two fit in 2.5 s.
	if n := len(srv.received()); n < 2 || n > 3 {
		t.Fatalf("the server got %d requests, want 2 or 3", n)
	}
	if d := time.Since(start); d > 2500*time.Millisecond+time.Second {
		t.Fatalf("answered after %v; MaxWait is 2.5 s", d)
	}
}

// TestCancelledWaitReturnsAtOnce: a context cancelled during a wait, for
// a Retry-After or for a turn, ends it with the context's error.
func TestCancelledWaitReturnsAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("Retry-After", func(t *testing.T) {
		t.Parallel()
		srv := &scripted{answer: refuseFirst(1000, 429, map[string]string{"Retry-After": "10"})}
		url := serve(t, srv).URL
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := do(t, client.NewTransport(nil), ctx, "GET", url, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("returned %v after the request (cancelled at 100 ms, Retry-After 10 s)", d)
		}
		if n := len(srv.received()); n != 1 {
			t.Fatalf("the server got %d requests, want 1", n)
		}
	})
	t.Run("turn", func(t *testing.T) {
		t.Parallel()
		// One request in 20 s, none left: the next waits 19 s.
		srv := &scripted{answer: func(_ int, w http.ResponseWriter) {
			w.Header().Set("RateLimit-Policy", `"slow";q=1;w=20`)
			w.Header().Set("RateLimit", `"slow";r=0;t=19`)
		}}
		url := serve(t, srv).URL
		stats := &client.Stats{}
		rt := client.NewTransport(nil, client.Record(stats))
		if _, err := do(t, rt, context.Background(), "GET", url, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := do(t, rt, ctx, "GET", url, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("returned %v after the request (its context ended at 100 ms, its turn at 19 s)", d)
		}
		if n := len(srv.received()); n != 1 {
			t.Fatalf("the server got %d requests, want 1: the second waited its turn", n)
		}
		if s := stats.Snapshot(); s.Waits != 1 || s.WaitTime < 50*time.Millisecond {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		t.Parallel()
		srv := &scripted{answer: refuseFirst(0, 200, nil)}
		url := serve(t, srv).URL
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := do(t, client.NewTransport(nil), ctx, "GET", url, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
}

// TestTurnPastMaxWaitIsNotAwaited: a turn further than MaxWait (an hour
// away, or a hostile ten years) is not waited for: the request goes, and
// the server decides.
func TestTurnPastMaxWaitIsNotAwaited(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ policy, limit string }{
		{`"slow";q=1;w=3600`, `"slow";r=0;t=3599`},
		{`"slow";q=1;w=999999999999999`, `"slow";r=0;t=999999999999999`},
	} {
		srv := &scripted{answer: func(_ int, w http.ResponseWriter) {
			w.Header().Set("RateLimit-Policy", c.policy)
			w.Header().Set("RateLimit", c.limit)
		}}
		url := serve(t, srv).URL
		for _, rt := range []http.RoundTripper{client.NewTransport(nil, client.MaxWait(time.Second)), client.NewTransport(nil)} {
			start := time.Now()
			for i := 0; i < 3; i++ {
				if resp, err := do(t, rt, context.Background(), "GET", url, nil); err != nil || resp.StatusCode != 200 {
					t.Fatalf("%v, %v", resp, err)
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("%s: 3 requests took %v: a turn past MaxWait was waited for", c.limit, d)
			}
		}
	}
}

// TestRetriesSpread: 100 requests refused together with Retry-After 1
// come back no sooner than 1 s after their refusal, spread over the next
// second: each tenth of it holds about 10. Checked loosely (no tenth
// holds 40, 7 tenths hold some), as a machine that stalls for 200 ms
// sends what it delayed together; without jitter, all 100 are in the
// first tenth.
func TestRetriesSpread(t *testing.T) {
	t.Parallel()
	const n = 100
	var mu sync.Mutex
	refusedAt := map[string]time.Time{}
	var offsets []time.Duration
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		id := r.Header.Get("X-Id")
		w.Header().Set("RateLimit-Policy", `"api";q=1000;w=1`)
		mu.Lock()
		defer mu.Unlock()
		if at, ok := refusedAt[id]; ok {
			offsets = append(offsets, now.Sub(at)-time.Second)
			w.Header().Set("RateLimit", `"api";r=999;t=0`)
			return
		}
		refusedAt[id] = now
		w.Header().Set("RateLimit", `"api";r=0;t=1`)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	})).URL
	rt := client.NewTransport(nil)
	var wg sync.WaitGroup
	var bad int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("X-Id", strconv.Itoa(i))
			resp, err := rt.RoundTrip(req)
			if err != nil || resp.StatusCode != 200 {
				atomic.AddInt64(&bad, 1)
				return
			}
			_ = resp.Body.Close()
		}(i)
	}
	wg.Wait()
	if bad > 0 || len(offsets) != n {
		t.Fatalf("%d requests not answered 200, %d retries of %d", bad, len(offsets), n)
	}
	tenths := make([]int, 10)
	for _, o := range offsets {
		if o < 0 {
			t.Fatalf("a retry came %v before Retry-After ran out", -o)
		}
		i := int(o / (100 * time.Millisecond))
		if i > 9 {
			i = 9 // late (a slow machine): counted in the last tenth
		}
		tenths[i]++
	}
	some := 0
	for i, c := range tenths {
		if c >= 40 {
			t.Fatalf("tenths of the window hold %v retries: tenth %d has %d", tenths, i, c)
		}
		if c > 0 {
			some++
		}
	}
	if some < 7 {
		t.Fatalf("tenths of the window hold %v retries: %d tenths hold some, want 7", tenths, some)
	}
	t.Logf("tenths of the window hold %v retries", tenths)
}

// TestPacesToTheBucket: goroutines sending as fast as they can through
// one transport, against a Tollgate-like bucket of 100 a second (burst
// 20), in each headers form. The transport learns the policy from a
// first request, then its requests arrive spread: nearly none is refused
// and the bucket is used. (Loose bounds: a ratio of what the bucket
// admits, not a speed.)
func TestPacesToTheBucket(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode   string
		minUse float64 // of the bucket's admissions
	}{
		{"ietf", 0.8},
		{"draft07", 0.8},
		{"both", 0.8},
		// No window in the legacy form: the tokens left spread until the
		// reset, far below a token bucket's rate.
		{"legacy", 0},
	} {
		c := c
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			f := &fakeLimiter{mode: c.mode, interval: 10 * time.Millisecond, burst: 20}
			url := serve(t, f).URL
			stats := &client.Stats{}
			rt := client.NewTransport(nil, client.Record(stats))
			if _, err := do(t, rt, context.Background(), "GET", url, nil); err != nil {
				t.Fatal(err)
			}
			const run = 1500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			start := time.Now()
			var wg sync.WaitGroup
			var answered, refused int64
			for g := 0; g < 30; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						resp, err := do(t, rt, ctx, "GET", url, nil)
						if err == nil {
							atomic.AddInt64(&answered, 1)
							if resp.StatusCode != 200 {
								atomic.AddInt64(&refused, 1)
							}
						}
					}
				}()
			}
			wg.Wait()
			admitted, refusals := f.counts()
			limit := 20 + float64(time.Since(start))/float64(f.interval)
			t.Logf("%s: %d admitted of the %.0f the bucket admits; %d refusals; application saw %d answers, %d refused; %+v",
				c.mode, admitted, limit, refusals, answered, refused, stats.Snapshot())
			// Paced requests are refused only when the machine delays one
			// past the next by more than the burst's 190 ms: rare, and
			// under load alone. (Without pacing, thousands.)
			if 10*refusals > admitted+20 {
				t.Errorf("%s: the server refused %d requests and admitted %d; want at most a tenth", c.mode, refusals, admitted)
			}
			if float64(admitted) < c.minUse*limit || admitted < 2 {
				t.Errorf("%s: %d admitted, want at least %.0f%% of %.0f", c.mode, admitted, 100*c.minUse, limit)
			}
			if refused > 0 {
				t.Errorf("%s: the application saw %d refusals", c.mode, refused)
			}
		})
	}
}

// TestColdStampede: goroutines starting together against a host not yet
// heard from are not paced; the refused come back after Retry-After, and
// the application sees no refusal.
func TestColdStampede(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{mode: "ietf", interval: 10 * time.Millisecond, burst: 5}
	url := serve(t, f).URL
	stats := &client.Stats{}
	rt := client.NewTransport(nil, client.Record(stats))
	var wg sync.WaitGroup
	var bad int64
	for g := 0; g < 40; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := do(t, rt, context.Background(), "GET", url, nil); err != nil || resp.StatusCode != 200 {
				atomic.AddInt64(&bad, 1)
			}
		}()
	}
	wg.Wait()
	s := stats.Snapshot()
	if bad > 0 || s.Returned > 0 || s.Retries != s.Refusals {
		t.Fatalf("%d requests not answered 200; stats %+v", bad, s)
	}
}

// TestConcurrentUse runs goroutines over several hosts whose answers
// change form, policy and partition key from one request to the next,
// hostile ones among them, through one transport tracking at most 4
// policies (go test -race).
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	forms := []map[string]string{
		{"RateLimit-Policy": `"a";q=1000;w=1`, "RateLimit": `"a";r=5;t=0`},
		{"RateLimit-Policy": `"a";q=1000;w=1, "b";q=2000;w=1;pk=:AQ==:`, "RateLimit": `"a";r=0;t=1, "b";r=9;pk=:AQ==:`},
		{"RateLimit-Policy": `1000;w=1;burst=10`, "RateLimit": `limit=1000, remaining=3, reset=1`},
		{"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "50", "X-RateLimit-Reset": "1"},
		{"RateLimit": `"a";r=-1;t=99999999999999`},
		{"RateLimit": strings.Repeat(`"x";r=1, `, 200) + `"x";r=1`},
		{"RateLimit": `"a";r=1;t=1;pk=:` + strings.Repeat("A", 3000) + `:`},
		{"Retry-After": "0"},
	}
	var hosts []string
	for h := 0; h < 3; h++ {
		var n int64
		hosts = append(hosts, serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			i := atomic.AddInt64(&n, 1)
			for k, v := range forms[int(i)%len(forms)] {
				w.Header().Set(k, v)
			}
			if int(i)%len(forms) == len(forms)-1 {
				w.WriteHeader(429)
			}
		})).URL)
	}
	rt := client.NewTransport(nil, client.MaxPolicies(4), client.MaxWait(500*time.Millisecond))
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 40; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Intn(300))*time.Millisecond)
				_, _ = do(t, rt, ctx, "GET", hosts[rng.Intn(len(hosts))]+"/"+strconv.Itoa(i), nil)
				cancel()
			}
		}(g)
	}
	wg.Wait()
}

// fakeLimiter is a server limited as Tollgate limits (its headers.go): one
// GCRA bucket of one token per interval holding burst, answering 200 or
// 429 with Retry-After, and the headers of mode ("ietf", "draft07",
// "legacy", "both"). Its policy is q=1/interval per w=1 second.
type fakeLimiter struct {
	mode     string
	interval time.Duration
	burst    int

	mu       sync.Mutex
	tat      time.Time
	admitted int
	refused  int
}

func (f *fakeLimiter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	now := time.Now()
	iv := f.interval
	capacity := time.Duration(f.burst) * iv
	tat := f.tat
	if tat.Before(now) {
		tat = now
	}
	wait := tat.Add(iv).Sub(now) - capacity // until a request fits
	ok := wait <= 0
	if ok {
		tat = tat.Add(iv)
		f.tat = tat
		f.admitted++
	} else {
		f.refused++
	}
	f.mu.Unlock()
	r := int64(now.Add(capacity).Sub(tat) / iv)
	if r < 0 {
		r = 0
	}
	ceil := func(d time.Duration) string { return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) }
	q := strconv.FormatInt(int64(time.Second/iv), 10)
	t := "0"
	if wait > 0 {
		t = ceil(wait)
	} else if r == 0 {
		t = ceil(iv)
	}
	h := w.Header()
	switch f.mode {
	case "ietf", "both":
		h.Set("RateLimit-Policy", `"api";q=`+q+`;w=1`)
		h.Set("RateLimit", `"api";r=`+strconv.FormatInt(r, 10)+";t="+t)
	case "draft07":
		h.Set("RateLimit-Policy", q+";w=1;burst="+strconv.Itoa(f.burst))
		h.Set("RateLimit", fmt.Sprintf("limit=%s, remaining=%d, reset=%s", q, r, ceil(tat.Sub(now))))
	}
	if f.mode == "legacy" || f.mode == "both" {
		h.Set("X-RateLimit-Limit", q)
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(r, 10))
		h.Set("X-RateLimit-Reset", ceil(tat.Sub(now)))
	}
	if !ok {
		h.Set("Retry-After", ceil(wait))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// counts returns the requests admitted and refused so far.
func (f *fakeLimiter) counts() (admitted, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admitted, f.refused
}
