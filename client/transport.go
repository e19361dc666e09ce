package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the options.
const (
	DefaultMaxWait     = 30 * time.Second // MaxWait
	DefaultMaxRetries  = 3                // MaxRetries
	DefaultMaxPolicies = 1024             // MaxPolicies
)

const (
	maxHosts  = 1024     // hosts whose policies are tracked
	maxDrain  = 64 << 10 // bytes of a refusal's body read before it is closed, to keep the connection
	maxBooked = 4096     // retries a policy keeps a token for
)

// golden is 2^64 divided by the golden ratio: the stride of the jitter's
// sequence (see jitter).
const golden = 0x9E3779B97F4A7C15

// An Option sets up a transport made by NewTransport.
type Option func(*transport)

// MaxWait bounds the time one request may wait in all, pacing and
// retries together (default DefaultMaxWait). A request whose turn would
// come later is sent at once, and a refusal whose Retry-After would end
// later is returned. Zero or less: the transport never waits (no pacing,
// no retries).
func MaxWait(d time.Duration) Option { return func(t *transport) { t.maxWait = d } }

// MaxRetries bounds the retries of one request after refusals (default
// DefaultMaxRetries). Zero or less: refusals are returned as they come.
func MaxRetries(n int) Option { return func(t *transport) { t.maxRetries = n } }

// RetryAll retries refusals of every method. Without it, only
// idempotent requests are retried: GET, HEAD, OPTIONS, TRACE, PUT and
// DELETE, and a request with an Idempotency-Key or X-Idempotency-Key
// header (as net/http's own retries decide).
func RetryAll() Option { return func(t *transport) { t.retryAll = true } }

// MaxPolicies bounds the policies tracked (default DefaultMaxPolicies;
// each policy of each partition key of each host is one); past it the
// least recently used is forgotten. Less than 1 means 1.
func MaxPolicies(n int) Option {
	return func(t *transport) {
		if n < 1 {
			n = 1
		}
		t.maxPolicies = n
	}
}

// Record has the transport count what it does into s (see Stats).
func Record(s *Stats) Option { return func(t *transport) { t.stats = s } }

// transport is the RoundTripper NewTransport returns.
type transport struct {
	base        http.RoundTripper
	maxWait     time.Duration
	maxRetries  int
	retryAll    bool
	maxPolicies int
	stats       *Stats
	now         func() time.Time // set to time.Now by NewTransport
	start       time.Time        // instants are durations since start (mono)
	seq         uint64           // the jitter's sequence, atomic

	mu  sync.Mutex // guards reg and every policy in it
	reg *registry
}

// NewTransport returns an http.RoundTripper that sends requests through
// base (http.DefaultTransport when nil), paced to the rate limits the
// responses state, and retries refusals (429, 503) that carry
// Retry-After. See the package documentation for the model. It is safe
// for concurrent use; use one per process (per base), shared by every
// goroutine and client that calls the same APIs, so that it sees all
// their traffic.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{base: base, maxWait: DefaultMaxWait, maxRetries: DefaultMaxRetries, maxPolicies: DefaultMaxPolicies,
		stats: &Stats{}, now: time.Now, seq: rand.Uint64()}
	for _, o := range opts {
		o(t)
	}
	t.start = t.now()
	t.reg = newRegistry(t.maxPolicies, maxHosts)
	return t
}

// mono is now, as an instant of the mirrors.
func (t *transport) mono(now time.Time) time.Duration { return now.Sub(t.start) }

// RoundTrip sends req after its turn has come in each policy its host's
// last response named, and again after a refusal's Retry-After plus
// jitter while the request may be retried (see RetryAll, MaxRetries,
// MaxWait). A wait ends at once when req's context is done, with the
// context's error.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	host := strings.ToLower(req.URL.Hostname())
	atomic.AddInt64(&t.stats.Requests, 1)
	retryable := t.maxWait > 0 && t.maxRetries > 0 && (t.retryAll || idempotent(req)) &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	var waited time.Duration
	var booked []booking
	r := req
	for attempt := 0; ; attempt++ {
		held, w, err := t.acquire(ctx, host, attempt > 0, booked, t.maxWait-waited)
		waited += w
		if err != nil {
			closeBody(r)
			return nil, err
		}
		resp, err := t.base.RoundTrip(r)
		now := t.now()
		t.observe(host, held, resp, now)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		atomic.AddInt64(&t.stats.Refusals, 1)
		ra, ok := retryAfter(resp.Header, now)
		if !ok || !retryable || attempt >= t.maxRetries {
			atomic.AddInt64(&t.stats.Returned, 1)
			return resp, nil
		}
		wait := ra + t.jitter(ra)
		if waited+wait > t.maxWait {
			atomic.AddInt64(&t.stats.Returned, 1)
			return resp, nil
		}
		next, err := replay(ctx, req)
		if err != nil {
			atomic.AddInt64(&t.stats.Returned, 1)
			return resp, nil // the body cannot be sent again: the refusal is the answer
		}
		drainClose(resp)
		until := now.Add(wait) // Retry-After counts from the answer
		booked = t.book(host, until)
		slept, err := t.sleepUntil(ctx, until)
		waited += slept
		if err != nil {
			t.unbook(booked)
			closeBody(next)
			return nil, err
		}
		atomic.AddInt64(&t.stats.Retries, 1)
		r = next
	}
}

// acquire takes a token for a request to host from each policy the
// host's last response named: at once when one is free and nobody waits
// before it, else in line (a retry in the retries' line, served first),
// until its turn, the budget's end (then it goes unpaced) or ctx's end
// (then it takes nothing and returns ctx's error). It returns the tokens
// it took, for observe, and the time it waited.
func (t *transport) acquire(ctx context.Context, host string, retry bool, booked []booking, budget time.Duration) ([]hold, time.Duration, error) {
	t.mu.Lock()
	for _, b := range booked {
		b.p.unbook(b.at) // the token kept for this retry is taken below, or its place in line
	}
	keys := t.reg.keysOf(host)
	if len(keys) == 0 {
		t.mu.Unlock()
		return nil, 0, nil
	}
	held := make([]hold, 0, len(keys))
	began := t.now()
	var waited time.Duration
	for _, k := range keys {
		p := t.reg.policy(k)
		if p == nil {
			continue
		}
		now := t.mono(t.now())
		if p.ahead(retry) == 0 && (retry && p.m.take(now) || !retry && p.takeFresh(now)) {
			p.took()
			held = append(held, hold{p: p, seq: p.taken})
			continue
		}
		left := budget - waited
		if left <= 0 || p.m.after(now, p.ahead(retry))-now > left {
			p.m.force(now) // its turn would come too late: sent now, the server decides
			p.took()
			held = append(held, hold{p: p, seq: p.taken})
			continue
		}
		w := &waiter{ch: make(chan struct{})}
		p.enqueue(w, retry)
		p.dispatch(now)
		t.arm(p, now)
		t.mu.Unlock()
		err := t.wait(ctx, w, left)
		t.mu.Lock()
		waited = t.now().Sub(began)
		switch {
		case !w.done:
			p.remove(w)
			if err == nil { // out of budget: sent now
				p.m.force(t.mono(t.now()))
				p.took()
				w.seq = p.taken
			}
		case err != nil:
			p.done(w.seq) // its token is spent; the request is not sent
		}
		if err != nil {
			t.release(held)
			t.mu.Unlock()
			t.addWait(waited, true)
			return nil, waited, err
		}
		held = append(held, hold{p: p, seq: w.seq})
	}
	sent := t.mono(t.now())
	for i := range held {
		held[i].at = sent
	}
	t.mu.Unlock()
	t.addWait(waited, waited > 0)
	return held, waited, nil
}

// A booking is the token a policy keeps for a retry coming back at at.
type booking struct {
	p  *policy
	at time.Duration
}

// book has each policy host's last response named keep a token for a
// retry coming back at until.
func (t *transport) book(host string, until time.Time) []booking {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.mono(until)
	var bs []booking
	for _, k := range t.reg.keysOf(host) {
		if p := t.reg.policy(k); p != nil && p.m.interval > 0 && p.book(at) {
			bs = append(bs, booking{p, at})
		}
	}
	return bs
}

// unbook gives up the tokens kept by bs, and lets the fresh requests
// waiting for them have them.
func (t *transport) unbook(bs []booking) {
	if len(bs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.mono(t.now())
	for _, b := range bs {
		b.p.unbook(b.at)
		b.p.dispatch(now)
		t.arm(b.p, now)
	}
}

// wait waits for w's turn, at most d; it returns ctx's error when ctx
// ends first.
func (t *transport) wait(ctx context.Context, w *waiter, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// arm sets p's timer to dispatch p's lines when its next token is due,
// when someone waits. Requires t.mu held.
func (t *transport) arm(p *policy, now time.Duration) {
	if len(p.retries)+len(p.fresh) == 0 {
		return
	}
	due := p.m.due(now)
	if len(p.retries) == 0 && !p.spare(due) {
		// The fresh requests leave the next tokens to booked retries:
		// look again when the first is due (its retry, taking its token,
		// looks at once), or an interval on when it is late.
		if due = p.booked[0]; due <= now {
			due = now + p.m.interval
		}
	}
	if p.armed && p.at <= due {
		return
	}
	d := due - now
	if d < 0 {
		d = 0
	}
	p.armed, p.at = true, due
	if p.timer == nil {
		p.timer = time.AfterFunc(d, func() { t.fire(p) })
		return
	}
	p.timer.Reset(d)
}

// fire is p's timer: the tokens due go to the waiters, and the timer is
// set for the next.
func (t *transport) fire(p *policy) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.armed = false
	now := t.mono(t.now())
	p.dispatch(now)
	t.arm(p, now)
}

// release ends the holds of a request answered, failed or not sent.
// Requires t.mu held.
func (t *transport) release(held []hold) {
	for _, h := range held {
		h.p.done(h.seq)
	}
}

// observe takes in what resp (nil on a transport error) says of the
// policies of host, the request having taken the tokens held.
func (t *transport) observe(host string, held []hold, resp *http.Response, now time.Time) {
	var ls []limit
	if resp != nil {
		ls = readLimits(resp.Header, now, make([]limit, 0, 2))
	}
	if len(held) == 0 && len(ls) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release(held)
	if len(ls) == 0 {
		return
	}
	at := t.mono(now)
	keys := make([]string, 0, len(ls))
	for _, l := range ls {
		k := host + partSep + l.name
		p := t.reg.policyFor(k)
		decided, after := at, len(p.pending) // a policy the request took nothing from: its answer is as of now
		for _, h := range held {
			if h.p == p {
				decided, after = h.at, p.later(h.seq)
			}
		}
		p.m.observe(decided, l, after)
		t.arm(p, at) // a new interval may bring the next token nearer
		keys = append(keys, k)
	}
	t.reg.setKeys(host, keys)
}

// jitter returns a wait in [0, d): d times the next number of an additive
// sequence of stride 1/golden ratio from a random start. Each number is
// uniform in [0, 1) (full jitter), and any n consecutive ones fall about
// 1/n apart: the retries of refusals that came together spread evenly
// over the window, without the clumps of independent draws. Other
// processes start elsewhere in the sequence.
func (t *transport) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	u := float64(atomic.AddUint64(&t.seq, golden)>>11) / (1 << 53)
	return time.Duration(u * float64(d))
}

// sleepUntil waits until the instant until unless ctx ends first; it
// returns the time it waited and ctx's error, if any.
func (t *transport) sleepUntil(ctx context.Context, until time.Time) (time.Duration, error) {
	began := t.now()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	timer := time.NewTimer(until.Sub(began))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		w := t.now().Sub(began)
		t.addWait(w, false)
		return w, ctx.Err()
	case <-timer.C:
		w := t.now().Sub(began)
		t.addWait(w, false)
		return w, nil
	}
}

// addWait counts a wait of d; paced is whether it was the pacer's.
func (t *transport) addWait(d time.Duration, paced bool) {
	if d <= 0 {
		return
	}
	if paced {
		atomic.AddInt64(&t.stats.Waits, 1)
	}
	atomic.AddInt64((*int64)(&t.stats.WaitTime), int64(d))
}

// idempotent reports whether req may be sent twice (RFC 9110 9.2.2; a
// request with an idempotency key, as net/http decides).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// replay returns a copy of req to send again, its body from GetBody.
func replay(ctx context.Context, req *http.Request) (*http.Request, error) {
	next := req.Clone(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// drainClose reads a little of a refusal's body, so that its connection
// can be used again, and closes it.
func drainClose(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}

// closeBody closes the body of a request that will not be sent, as a
// RoundTripper must.
func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}
