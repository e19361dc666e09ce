package tollgate

// Cost from the response (Config.ResponseCost): what a request really
// cost, known once the backend has answered (an LLM's tokens), charged to
// the buckets and quotas that admitted it.
//
// On a route that reads a response cost, and there only, next gets a
// usage.Writer in front of the client's ResponseWriter (serveNext): it
// takes the cost header out of the response (unless keepHeader) and reads
// the body as it goes to the client (JSON paths of a JSON body or of an
// event stream's events, internal/usage). After next returns (chargeResponse, answer.go), the cost
// (the header when it came, else the body's) less the cost the check
// already charged is queued on the backend's charge queue; a goroutine
// of the queue's, running while it holds charges, sends them in batches:
// one script call for up to maxChargeBatch charges (one per charge and
// bucket in a Cluster, whose calls' keys share a slot). A bucket may go
// into debt (ChargeScript): its TAT past a full refill by the whole
// amount charged, so that later requests wait until it is back above
// zero; the check reads the debt mark (K}d) before it would take such a
// TAT for a clock stepped back. A malformed value, a body that names no
// cost, a compressed body: counted, nothing more charged; a full queue
// drops the charge and counts it; a failed call counts its charges.

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// charge is one response's charge: each charged key, its triple as the
// scripts read them (the amount as its cost), the amount, and the
// policy's counters.
type charge struct {
	keys    []string
	args    []string // 3 per key
	amounts []int64
	ms      []*metrics.Policy
	// A concurrency slots' give-back (caps.go) is its set's
	// prepared call (give) for call, sent alone; its failures counted
	// under held.
	give *redis.Command
	call string
	held *metrics.Policy
	// A give-back Redis did not take is tried again (again) until it
	// does or until, its slot's deadline past, there is nothing to give
	// back: monotonic ns.
	until int64
	next  int64 // when to try it again
	tries int
}

// maxCharges bounds a backend's queue; maxChargeBatch a call's charges.
const (
	maxCharges     = 10000
	maxChargeBatch = 64
	chargeTimeout  = time.Second
)

// chargeQueue is a backend's charges waiting for Redis. Safe for
// concurrent use.
type chargeQueue struct {
	rc      *redis.Client
	br      *breaker // its backend's: a give-back waiting is tried once it closes
	mu      sync.Mutex
	queue   []*charge
	retry   []*charge // give-backs to try again, at their next (at most maxCharges)
	running bool      // send runs
	wasOpen bool      // br was open at send's last look (send only)
}

// add queues c, or drops it (counted) when the queue is full, and starts
// the sender when it is not running.
func (q *chargeQueue) add(c *charge) {
	q.mu.Lock()
	if len(q.queue) >= maxCharges {
		q.mu.Unlock()
		countCharge(c, 2)
		return
	}
	q.queue = append(q.queue, c)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.send()
	}
}

// send sends the queued charges, a batch at a time, and the give-backs
// to try again as they fall due, until both are empty; then it ends (a
// give-back is kept no longer than its slot's deadline, at most 24 h).
func (q *chargeQueue) send() {
	for {
		q.mu.Lock()
		n := len(q.queue)
		if n == 0 && len(q.retry) > 0 {
			q.mu.Unlock()
			q.due()
			continue
		}
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		if n > maxChargeBatch {
			n = maxChargeBatch
		}
		batch := append([]*charge(nil), q.queue[:n]...)
		q.queue = append(q.queue[:0], q.queue[n:]...)
		q.mu.Unlock()
		q.sendBatch(batch)
	}
}

// sendBatch charges batch in one call, or in a Cluster one call per
// charged key; each charge is counted charged or failed.
func (q *chargeQueue) sendBatch(batch []*charge) {
	d := make([]int64, 1)
	var costs []*charge
	for _, c := range batch {
		if c.give == nil {
			costs = append(costs, c)
			continue
		}
		if q.rc.Check(c.give, c.call, d, chargeTimeout) != nil {
			q.again(c)
			continue
		}
		countCharge(c, 0)
	}
	if batch = costs; len(batch) == 0 {
		return
	}
	if q.rc.Mode() != modeCluster {
		res := 0
		if q.rc.Check(chargeCommand(batch, -1), "", d, chargeTimeout) != nil {
			res = 1
		}
		for _, c := range batch {
			countCharge(c, res)
		}
		return
	}
	// Every charge at once: the calls of one node share its connections'
	// pipelines, so that the queue drains at the pace of many calls, not
	// of one round trip each (a concurrency cap gives back a slot per
	// request).
	var wg sync.WaitGroup
	for _, c := range batch {
		wg.Add(1)
		go func(c *charge) {
			defer wg.Done()
			cd := make([]int64, 1)
			res := 0
			for i, k := range c.keys {
				if q.rc.Check(chargeCommand([]*charge{c}, i), k, cd, chargeTimeout) != nil {
					res = 1
				}
			}
			countCharge(c, res)
		}(c)
	}
	wg.Wait()
}

// giveBackRetry is the first wait before a give-back Redis did not take
// is tried again, doubled at each try up to giveBackRetryMax; retryStep
// bounds send's sleeps, so that a breaker that closes flushes the
// give-backs waiting within it.
const (
	giveBackRetry    = 100 * time.Millisecond
	giveBackRetryMax = 2 * time.Second
	retryStep        = 100 * time.Millisecond
)

// again keeps give-back c, which Redis did not take (down, slow, cut
// off), to try again with backoff; past its slot's deadline, or beyond
// maxCharges waiting, it is dropped and counted (the slot is then held
// until its deadline).
func (q *chargeQueue) again(c *charge) {
	now := clock.Mono()
	q.mu.Lock()
	if now >= c.until || len(q.retry) >= maxCharges {
		q.mu.Unlock()
		countCharge(c, 1)
		return
	}
	wait := giveBackRetry << uint(c.tries)
	if c.tries >= 6 || wait > giveBackRetryMax {
		wait = giveBackRetryMax
	}
	c.tries++
	c.next = now + int64(wait)
	q.retry = append(q.retry, c)
	q.mu.Unlock()
}

// due waits (at most retryStep) for the give-backs to try again, then
// queues those due: all of them once the breaker has closed since the
// last look. send only.
func (q *chargeQueue) due() {
	now := clock.Mono()
	open := q.br != nil && q.br.isOpen()
	flush := q.wasOpen && !open
	q.wasOpen = open
	q.mu.Lock()
	earliest := int64(-1)
	keep := q.retry[:0]
	for _, c := range q.retry {
		if flush || c.next <= now {
			q.queue = append(q.queue, c)
			continue
		}
		if earliest < 0 || c.next < earliest {
			earliest = c.next
		}
		keep = append(keep, c)
	}
	for i := len(keep); i < len(q.retry); i++ {
		q.retry[i] = nil
	}
	q.retry = keep
	queued := len(q.queue) > 0
	q.mu.Unlock()
	if queued {
		return
	}
	if wait := time.Duration(earliest - now); wait < retryStep {
		time.Sleep(wait)
	} else {
		time.Sleep(retryStep)
	}
}

// countCharge counts c under each policy it charges: 0 charged, 1 failed,
// 2 dropped.
func countCharge(c *charge, res int) {
	if c.held != nil && res != 0 {
		atomic.AddInt64(&c.held.HeldLost, 1)
	}
	for i, m := range c.ms {
		switch res {
		case 0:
			atomic.AddInt64(&m.CostCharged, c.amounts[i])
		case 1:
			atomic.AddInt64(&m.CostFailed, 1)
		default:
			atomic.AddInt64(&m.CostDropped, 1)
		}
	}
}

// chargeCommand is ChargeScript's call for batch: every key written
// whole, or (only >= 0) key "only" of the batch's one charge alone, the
// call's routing key, written before an empty suffix.
func chargeCommand(batch []*charge, only int) *redis.Command {
	var lens []int
	var keys, args []string
	for _, c := range batch {
		if only >= 0 {
			return redis.NewCommand(chargeScr, []int{len(c.keys[only])}, []string{""}, append([]string{"1"}, c.args[3*only:3*only+3]...), nil)
		}
		args = append(args, strconv.Itoa(len(c.keys)))
		args = append(args, c.args...)
		for _, k := range c.keys {
			lens, keys = append(lens, 0), append(keys, k)
		}
	}
	return redis.NewCommand(chargeScr, lens, keys, args, nil)
}

// returnSlots queues the give-back of set's slots named by the take's
// call (capCall) on the backend's charge queue, sent off the request's
// path.
func returnSlots(t *Tollgate, set *policySet, call string) {
	var dur int64 // the longest maxDuration of set's caps, µs: past it no slot of the call is held
	var held *metrics.Policy
	for _, p := range set.ps {
		if p.Cap != nil {
			if held == nil {
				held = p.Metrics
			}
			if p.Cap.DurUS > dur {
				dur = p.Cap.DurUS
			}
		}
	}
	if held != nil {
		chargesOf(t.be).add(&charge{give: set.give, call: call, held: held, until: clock.Mono() + dur*1000})
	}
}
