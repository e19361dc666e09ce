package client

// The transport's copy of each server bucket (mirror: pure arithmetic on
// instants passed in), the line of requests waiting for its tokens
// (policy), and the bounded table of policies and hosts (registry). The
// model is stated in the package documentation (doc.go).

import (
	"container/list"
	"math"
	"sort"
	"time"
)

// mirror is the transport's copy of one policy's bucket, a GCRA: one
// token comes back every interval, and the bucket holds at most burst.
// Its state is one instant, zero: the copy holds (now-zero)/interval
// tokens, so the next token is free at zero+interval; taking one moves
// zero one interval on. Instants are durations since the transport's
// start on the monotonic clock. The zero value is an unpaced bucket
// (interval 0: every token is free) that no response has set yet.
//
// Invariant: once a response has set it, zero only moves later: by a
// take, by the burst's cap after an idle time (to now-burst*interval),
// or by a response showing less than the copy counts. The copy so never
// counts on more than both its own accounts and the server's last word
// allow.
type mirror struct {
	zero     time.Duration // the instant the copy holds no whole token
	interval time.Duration // time per token (w/q); 0: unpaced
	burst    float64       // tokens the bucket holds: said (draft07) or the most a response has shown (r+1)
	known    bool          // a response has set zero (before, it counts for nothing)
}

// settle applies the burst's cap at now: an idle bucket holds no more than
// burst tokens.
func (m *mirror) settle(now time.Duration) {
	if m.interval <= 0 {
		return
	}
	b := m.burst
	if b < 1 {
		b = 1
	}
	if floor := now - span(b*float64(m.interval)); m.zero < floor {
		m.zero = floor
	}
}

// due returns the instant the next token is free (now or earlier when one
// is free now).
func (m *mirror) due(now time.Duration) time.Duration {
	if m.interval <= 0 {
		return now
	}
	m.settle(now)
	return m.zero + m.interval
}

// take takes a token at now if one is free, and reports whether it did.
func (m *mirror) take(now time.Duration) bool {
	if m.interval <= 0 {
		return true
	}
	if m.due(now) > now {
		return false
	}
	m.zero += m.interval
	return true
}

// force takes a token at now whether or not one is free (a request sent
// without waiting for it).
func (m *mirror) force(now time.Duration) {
	if m.interval > 0 {
		m.settle(now)
		m.zero += m.interval
	}
}

// after returns the instant the token after ahead more takes is free.
func (m *mirror) after(now time.Duration, ahead int) time.Duration {
	if m.interval <= 0 {
		return now
	}
	return m.due(now) + span(float64(ahead)*float64(m.interval))
}

// observe moves the copy to what limit l implies, when that is later than
// the copy's own count: l was decided at about now (when the request
// left), and after is the number of tokens this transport has taken
// since that the server had not decided then (which l's r does not
// count).
//
// r tokens left, none renewed for t: zero = now + t - r*interval. When r
// is 0 and t is within a second of one interval, t is read as a rounding
// up (Tollgate rounds a wait up to whole seconds) and the next token is
// taken to be due in min(interval, t). A draft 07 reset (toFull) is the
// time until the bucket is full, rounded up to whole seconds: zero =
// now + (t-1s) - burst*interval, or now - r*interval when that is later.
func (m *mirror) observe(now time.Duration, l limit, after int) {
	if l.interval > 0 {
		m.interval = l.interval
	}
	if m.interval <= 0 {
		return
	}
	if l.burst > 0 {
		m.burst = float64(l.burst)
	} else if b := float64(l.remaining) + 1; b > m.burst {
		m.burst = b
	}
	iv := float64(m.interval)
	var z float64
	switch {
	case l.toFull:
		full := l.reset - time.Second // t is rounded up: the bucket is full no sooner
		if full < 0 {
			full = 0
		}
		z = math.Max(float64(now)-float64(l.remaining)*iv, float64(now+full)-m.burst*iv)
	case l.remaining == 0 && l.reset > 0 && m.interval > l.reset-time.Second:
		first := l.reset
		if m.interval < first {
			first = m.interval
		}
		z = float64(now+first) - iv
	default:
		r := float64(l.remaining)
		if r < 1 {
			r = 1 // none left: the first comes at the reset
		}
		z = float64(now+l.reset) - r*iv
	}
	z += float64(after) * iv
	if zz := now + span(z-float64(now)); zz > m.zero || !m.known {
		m.zero, m.known = zz, true
	}
}

// span converts ns to a Duration, cut at plus or minus maxSpan.
func span(ns float64) time.Duration {
	switch {
	case ns >= float64(maxSpan):
		return maxSpan
	case ns <= -float64(maxSpan):
		return -maxSpan
	case ns != ns: // NaN
		return 0
	}
	return time.Duration(ns)
}

// waiter is a request waiting in line for a policy's token; done (under
// the transport's lock) when a token was taken for it, and ch closed.
type waiter struct {
	ch   chan struct{}
	done bool
	seq  uint64 // its hold's seq, once done
}

// A hold is a token a request took from a policy: seq is the policy's
// count of tokens taken, this one included, and at when the request left.
type hold struct {
	p   *policy
	seq uint64
	at  time.Duration
}

// policy is one policy of one host as the transport tracks it: its
// mirror, the requests out on it, and two lines of waiters: retries (a
// request refused once has waited its Retry-After and goes first) and
// fresh ones. Every field is guarded by the transport's lock.
type policy struct {
	key     string
	m       mirror
	taken   uint64    // tokens taken since the policy was made
	pending []uint64  // the seq of each token taken for a request not answered yet, in order
	retries []*waiter // first served
	fresh   []*waiter
	booked  []time.Duration // when refused requests come back (Retry-After plus jitter), in order: a token kept for each
	timer   *time.Timer     // wakes the lines when the next token is due
	armed   bool
	at      time.Duration // when the armed timer fires
}

// ahead returns how many waiters a new one (a retry or not) would queue
// behind.
func (p *policy) ahead(retry bool) int {
	if retry {
		return len(p.retries)
	}
	return len(p.retries) + len(p.fresh)
}

func (p *policy) enqueue(w *waiter, retry bool) {
	if retry {
		p.retries = append(p.retries, w)
	} else {
		p.fresh = append(p.fresh, w)
	}
}

// remove takes w out of its line (it gave up).
func (p *policy) remove(w *waiter) {
	p.retries = without(p.retries, w)
	p.fresh = without(p.fresh, w)
}

func without(ws []*waiter, w *waiter) []*waiter {
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			return ws[:len(ws)-1]
		}
	}
	return ws
}

// took counts a token taken from p's mirror for a request, pending until
// done.
func (p *policy) took() {
	p.taken++
	p.pending = append(p.pending, p.taken)
}

// done ends the pending token seq (its request was answered, failed or
// not sent).
func (p *policy) done(seq uint64) {
	i := sort.Search(len(p.pending), func(i int) bool { return p.pending[i] >= seq })
	if i < len(p.pending) && p.pending[i] == seq {
		p.pending = append(p.pending[:i], p.pending[i+1:]...)
	}
	if len(p.pending) == 0 {
		p.pending = nil
	}
}

// later returns the number of tokens taken after seq and still pending:
// the requests that left after seq's and that the server has most likely
// not decided yet when it answered seq's (the answers of requests decided
// first come first; those already in are taken to be counted in its r).
func (p *policy) later(seq uint64) int {
	return len(p.pending) - sort.Search(len(p.pending), func(i int) bool { return p.pending[i] > seq })
}

// book keeps a token for a retry coming back at at; false when
// maxBooked are kept already.
func (p *policy) book(at time.Duration) bool {
	if len(p.booked) >= maxBooked {
		return false
	}
	i := sort.Search(len(p.booked), func(i int) bool { return p.booked[i] > at })
	p.booked = append(p.booked, 0)
	copy(p.booked[i+1:], p.booked[i:])
	p.booked[i] = at
	return true
}

// unbook gives up the token kept for the retry coming back at at.
func (p *policy) unbook(at time.Duration) {
	i := sort.Search(len(p.booked), func(i int) bool { return p.booked[i] >= at })
	if i < len(p.booked) && p.booked[i] == at {
		p.booked = append(p.booked[:i], p.booked[i+1:]...)
	}
	if len(p.booked) == 0 {
		p.booked = nil
	}
}

// spare reports whether a fresh request may take a token at now and
// still leave the k-th booked retry (in order of return) k tokens at its
// instant, and one more: zero + (k+2)*interval <= max(at_k, now). (The
// one more is for an answer that moves zero on by a token meanwhile:
// the retry still goes at its instant, not an interval later.) A booking
// its retry has not claimed a second after its instant is dropped (a
// retry that gave up unbooks; this is the safety net).
func (p *policy) spare(now time.Duration) bool {
	if len(p.booked) == 0 || p.m.interval <= 0 {
		return true
	}
	for len(p.booked) > 0 && p.booked[0] < now-time.Second {
		p.booked = p.booked[1:]
	}
	iv := p.m.interval
	z := p.m.zero
	if floor := now - span(math.Max(p.m.burst, 1)*float64(iv)); z < floor {
		z = floor
	}
	z += 2 * iv // the fresh request's token, and the one more
	for _, at := range p.booked {
		z += iv
		if at < now {
			at = now
		}
		if z > at {
			return false
		}
	}
	return true
}

// takeFresh takes a token at now for a fresh request: one is free, and
// taking it leaves the booked retries theirs (spare).
func (p *policy) takeFresh(now time.Duration) bool {
	return p.spare(now) && p.m.take(now)
}

// dispatch hands the tokens free at now to the waiters, retries first.
func (p *policy) dispatch(now time.Duration) {
	for {
		q := &p.retries
		if len(*q) == 0 {
			q = &p.fresh
		}
		if len(*q) == 0 {
			return
		}
		if q == &p.retries && !p.m.take(now) || q == &p.fresh && !p.takeFresh(now) {
			return
		}
		w := (*q)[0]
		(*q)[0] = nil
		if *q = (*q)[1:]; len(*q) == 0 {
			*q = nil
		}
		p.took()
		w.done, w.seq = true, p.taken
		close(w.ch)
	}
}

// registry is the bounded table of what the transport tracks: policies
// by key (host, form, name, partition key) and, per host, the keys of the
// policies its last response with limits named. Each is a list in order
// of use, the least recently used evicted past its bound. Guarded by the
// transport's lock.
type registry struct {
	policies    map[string]*list.Element // of *policy
	policyUse   *list.List
	hosts       map[string]*list.Element // of *hostPolicies
	hostUse     *list.List
	maxPolicies int
	maxHosts    int
}

type hostPolicies struct {
	host string
	keys []string
}

func newRegistry(maxPolicies, maxHosts int) *registry {
	return &registry{
		policies: map[string]*list.Element{}, policyUse: list.New(),
		hosts: map[string]*list.Element{}, hostUse: list.New(),
		maxPolicies: maxPolicies, maxHosts: maxHosts,
	}
}

// keysOf returns the policy keys host's last response named (nil: none).
func (r *registry) keysOf(host string) []string {
	e := r.hosts[host]
	if e == nil {
		return nil
	}
	r.hostUse.MoveToFront(e)
	return e.Value.(*hostPolicies).keys
}

// setKeys records the policy keys host's last response named.
func (r *registry) setKeys(host string, keys []string) {
	if e := r.hosts[host]; e != nil {
		e.Value.(*hostPolicies).keys = keys
		r.hostUse.MoveToFront(e)
		return
	}
	r.hosts[host] = r.hostUse.PushFront(&hostPolicies{host: host, keys: keys})
	for r.hostUse.Len() > r.maxHosts {
		old := r.hostUse.Back()
		r.hostUse.Remove(old)
		delete(r.hosts, old.Value.(*hostPolicies).host)
	}
}

// policy returns the policy of key, or nil.
func (r *registry) policy(key string) *policy {
	e := r.policies[key]
	if e == nil {
		return nil
	}
	r.policyUse.MoveToFront(e)
	return e.Value.(*policy)
}

// policyFor returns the policy of key, made when missing (evicting the
// least recently used past maxPolicies: its waiters, which hold it, are
// still served; a later response makes it anew).
func (r *registry) policyFor(key string) *policy {
	if p := r.policy(key); p != nil {
		return p
	}
	p := &policy{key: key}
	r.policies[key] = r.policyUse.PushFront(p)
	for r.policyUse.Len() > r.maxPolicies {
		old := r.policyUse.Back()
		r.policyUse.Remove(old)
		delete(r.policies, old.Value.(*policy).key)
	}
	return p
}
