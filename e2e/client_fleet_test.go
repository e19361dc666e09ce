package e2e

// The Go client (client/) against the fleet: 200 goroutines share one key
// and send as fast as they can for 20 s, round-robin over three real
// Traefik replicas with Tollgate, through client.NewTransport, then, as
// the baseline, through a plain http.Transport. Every attempt is recorded
// under the client (clientLog): what Tollgate admitted, what it refused,
// and when each retry left after the refusal it follows.

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/client"
)

// The load: 200 goroutines on a bucket of 200/s, burst 20. The bucket
// admits of the transport's first 200 requests (sent before any answer
// told the limit) its 20 tokens and what it refills while the fleet
// answers them, and refuses the rest, 100 to 180, all with Retry-After:
// 1. One Retry-After window of the bucket (200 tokens) holds all their
// retries, so where they land shows the jitter, not a queue (at 100/s a
// correct client must push a third of them past the window). Two cores
// serve 200/s with room to spare.
const (
	clientAverage = 200 // tokens per second
	clientBurst   = 20
	clientWorkers = 200
	clientRun     = 20 * time.Second
	spreadSlot    = 10 * time.Millisecond
)

func TestFleetClientPaces(t *testing.T) {
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", clientAverage, "period", "1s", "burst", clientBurst)})
	}, "api@file")

	paced := newClientLog(t, fe.fleet.Replicas)
	stats := &client.Stats{}
	p := clientLoad(t, "with the transport", client.NewTransport(paced, client.Record(stats)), paced, fleetKey(t, "paced"), true)
	p.logf(t)
	t.Logf("with the transport: client.Stats %+v", stats.Snapshot())

	plain := newClientLog(t, fe.fleet.Replicas)
	b := clientLoad(t, "without it (baseline)", plain, plain, fleetKey(t, "plain"), false)
	b.logf(t)

	// The application sees almost no refusal.
	if n, total := p.app[http.StatusTooManyRequests], p.answers(); total == 0 || 100*n > total {
		t.Errorf("with the transport the application saw %d 429s of %d answers; want at most 1%%", n, total)
	}
	if p.app[0] > 0 {
		t.Errorf("with the transport the application saw %d errors: %v", p.app[0], p.appErrs)
	}
	// The budget is used.
	if 100*float64(p.admitted) < 95*p.limit {
		t.Errorf("with the transport %d admitted in %v; want at least 95%% of the %.0f the bucket admits", p.admitted, clientRun, p.limit)
	}
	// Retries wait out Retry-After, then spread over its window: 80% of
	// its 10 ms slots hold one, no slot more than 3 times the mean. (Fewer
	// retries than slots cannot fill 80% of them: then 80% of them must
	// have a slot of their own. Fewer than 67 make 3 times the mean less
	// than 2: then no slot holds more than 2.)
	s := p.spread
	if s.early > 0 {
		t.Errorf("with the transport %d of %d retries left before Retry-After ran out", s.early, s.retries)
	}
	if s.inWindow == 0 {
		t.Fatalf("with the transport no retry within the Retry-After window (%d retries, %d later); the first burst was not refused?", s.retries, s.late)
	}
	if want := 0.8 * float64(min(s.slots, s.inWindow)); float64(s.covered) < want {
		t.Errorf("with the transport the %d retries within the window hold %d of its %d slots; want at least %.0f", s.inWindow, s.covered, s.slots, want)
	}
	if limit := max(3*s.mean, 2); float64(s.peak) > limit {
		t.Errorf("with the transport a %v slot of the window holds %d retries: more than %.1f (3 times the mean %.2f)", spreadSlot, s.peak, limit, s.mean)
	}
	if 10*s.late > s.retries {
		t.Errorf("with the transport %d of %d retries left after their window: the bucket had no token kept for them", s.late, s.retries)
	}
}

// clientTraceKey is the context key of a clientTrace.
type clientTraceKey struct{}

// clientTrace follows one application request (the paced run) or one
// goroutine's requests (the baseline) across attempts: its last refusal,
// of which the next attempt is the retry.
type clientTrace struct {
	refusedAt  time.Time
	retryAfter time.Duration
}

// clientLog is the RoundTripper under the client: it sends each attempt
// to the next replica, round-robin, and records it.
type clientLog struct {
	next     *http.Transport
	replicas []string // host:port of each replica's web entrypoint
	rr       uint64

	mu       sync.Mutex
	admitted []time.Time // when each admitted attempt left
	refused  int
	other    map[string]int // any other answer: status or error
	retries  []clientRetry
}

// clientRetry is when a retry left after its refusal's Retry-After ran
// out (negative: before).
type clientRetry struct {
	after, retryAfter time.Duration
}

func newClientLog(t *testing.T, replicas []*Traefik) *clientLog {
	a := &clientLog{
		next:  &http.Transport{MaxIdleConnsPerHost: clientWorkers, DisableCompression: true},
		other: map[string]int{},
	}
	for _, r := range replicas {
		a.replicas = append(a.replicas, r.Web)
	}
	t.Cleanup(a.next.CloseIdleConnections)
	return a
}

func (a *clientLog) RoundTrip(req *http.Request) (*http.Response, error) {
	out := *req // the caller's request is not ours to change
	u := *req.URL
	u.Host = a.replicas[atomic.AddUint64(&a.rr, 1)%uint64(len(a.replicas))]
	out.URL = &u
	tr, _ := req.Context().Value(clientTraceKey{}).(*clientTrace)
	sent := time.Now()
	resp, err := a.next.RoundTrip(&out)
	a.mu.Lock()
	if tr != nil && !tr.refusedAt.IsZero() {
		a.retries = append(a.retries, clientRetry{sent.Sub(tr.refusedAt) - tr.retryAfter, tr.retryAfter})
		tr.refusedAt = time.Time{}
	}
	refused := false
	switch {
	case err != nil:
		a.other[err.Error()]++
	case resp.StatusCode == http.StatusOK:
		a.admitted = append(a.admitted, sent)
	case resp.StatusCode == http.StatusTooManyRequests:
		a.refused++
		refused = true
	default:
		a.other[strconv.Itoa(resp.StatusCode)]++
	}
	a.mu.Unlock()
	if refused && tr != nil {
		// The last thing before the client reads the answer: a retry's
		// offset is the client's wait, not this log's lock.
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		tr.refusedAt, tr.retryAfter = time.Now(), time.Duration(ra)*time.Second
	}
	return resp, err
}

// warm opens the connections a run uses (clientWorkers to each replica,
// and Traefik's own to the backend and Redis) with requests for another
// key, unrecorded: the run starts as an application already up would.
func (a *clientLog) warm(t *testing.T, key string) {
	t.Helper()
	var wg sync.WaitGroup
	for i := 0; i < clientWorkers*len(a.replicas); i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://"+a.replicas[i%len(a.replicas)]+"/", nil)
			req.Header.Set("X-API-Key", key)
			resp, err := a.next.RoundTrip(req)
			if err != nil {
				t.Errorf("warming up: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}(i)
	}
	wg.Wait()
}

// clientResult is one run's figures.
type clientResult struct {
	name     string
	app      map[int]int // the answers the application saw, by status (0: an error, the run's end aside)
	appErrs  map[string]int
	admitted int     // attempts admitted that left while the run lasted
	limit    float64 // what the bucket admits meanwhile: burst + rate x duration
	refused  int     // attempts refused
	perSec   []int   // admitted attempts in each second of the run
	spread   clientSpread
}

func (r clientResult) answers() int {
	n := 0
	for _, c := range r.app {
		n += c
	}
	return n
}

// clientSpread is when the retries left, against their Retry-After
// window: the next Retry-After after it ran out, in 10 ms slots.
type clientSpread struct {
	retries, early, inWindow, late int
	slots, covered, peak           int
	mean                           float64       // retries within the window per slot
	earlyMedian                    time.Duration // how long after its refusal an early retry left, median
}

// clientLoad runs clientWorkers goroutines sending GET / for key through
// rt as fast as they can for clientRun, on connections warmed first. With
// perRequest each request has its own trace (the transport's retries are
// its attempts); without, each goroutine's requests share one (its next
// request after a refusal is its retry).
func clientLoad(t *testing.T, name string, rt http.RoundTripper, log *clientLog, key string, perRequest bool) clientResult {
	t.Helper()
	log.warm(t, fleetKey(t, "warm"))
	c := &http.Client{Transport: rt}
	res := clientResult{name: name, app: map[int]int{}, appErrs: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(clientRun))
	defer cancel()
	for w := 0; w < clientWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shared := &clientTrace{}
			for ctx.Err() == nil {
				tr := shared
				if perRequest {
					tr = &clientTrace{}
				}
				req, _ := http.NewRequestWithContext(context.WithValue(ctx, clientTraceKey{}, tr), "GET", "http://tollgate.fleet/", nil)
				req.Header.Set("X-API-Key", key)
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						res.app[0]++
						res.appErrs[err.Error()]++
						mu.Unlock()
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				res.app[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	end := start.Add(clientRun)
	log.mu.Lock()
	defer log.mu.Unlock()
	res.perSec = make([]int, int(clientRun/time.Second))
	for _, at := range log.admitted {
		if !at.Before(start) && at.Before(end) {
			res.admitted++
			res.perSec[int(at.Sub(start)/time.Second)]++
		}
	}
	res.refused = log.refused
	res.limit = clientBurst + clientAverage*clientRun.Seconds()
	res.spread = clientSpreadOf(log.retries)
	return res
}

// spreadOf measures retries against their Retry-After window.
func clientSpreadOf(rs []clientRetry) clientSpread {
	s := clientSpread{retries: len(rs)}
	var early []time.Duration
	var counts []int
	for _, r := range rs {
		if r.retryAfter <= 0 {
			continue
		}
		if counts == nil {
			s.slots = int(r.retryAfter / spreadSlot)
			counts = make([]int, s.slots)
		}
		switch {
		case r.after < 0:
			s.early++
			early = append(early, r.after+r.retryAfter)
		case r.after >= r.retryAfter:
			s.late++
		default:
			s.inWindow++
			counts[int(float64(r.after)/float64(r.retryAfter)*float64(s.slots))]++
		}
	}
	for _, n := range counts {
		if n > 0 {
			s.covered++
		}
		if n > s.peak {
			s.peak = n
		}
	}
	if s.slots > 0 {
		s.mean = float64(s.inWindow) / float64(s.slots)
	}
	if len(early) > 0 {
		sort.Slice(early, func(i, j int) bool { return early[i] < early[j] })
		s.earlyMedian = early[len(early)/2]
	}
	return s
}

func (r clientResult) logf(t *testing.T) {
	t.Helper()
	total := r.answers()
	lo, hi := r.perSec[0], r.perSec[0]
	for _, n := range r.perSec[1:] { // the first second holds the first burst
		lo, hi = min(lo, n), max(hi, n)
	}
	t.Logf("%s: the application saw %d answers %v: %.2f%% 429s", r.name, total, r.app, 100*float64(r.app[http.StatusTooManyRequests])/float64(max(total, 1)))
	if len(r.appErrs) > 0 {
		t.Logf("%s: errors: %v", r.name, r.appErrs)
	}
	t.Logf("%s: %d admitted in %v: %.1f/s, %.1f%% of the %.0f the bucket admits (burst %d + %d/s); per second %d in the first, then %d to %d; %d attempts refused",
		r.name, r.admitted, clientRun, float64(r.admitted)/clientRun.Seconds(), 100*float64(r.admitted)/r.limit, r.limit, clientBurst, clientAverage, r.perSec[0], lo, hi, r.refused)
	s := r.spread
	early := ""
	if s.early > 0 {
		early = " (median " + s.earlyMedian.Round(time.Microsecond).String() + " after the refusal)"
	}
	t.Logf("%s: %d retries after a refusal: %d left before Retry-After ran out%s, %d within the window after it, %d later; "+
		"within the window %d of %d slots of %v hold one (%.0f%%), the fullest %d (%.1fx the mean %.2f)",
		r.name, s.retries, s.early, early, s.inWindow, s.late, s.covered, s.slots, spreadSlot,
		100*float64(s.covered)/float64(max(s.slots, 1)), s.peak, float64(s.peak)/max(s.mean, 1e-9), s.mean)
}
