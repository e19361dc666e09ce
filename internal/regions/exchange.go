package regions

// The exchange that moves regions' shares (the model: region.go). Nothing
// here is on a request's path: requests only note the keys that pressed
// against their share (note), in memory.
//
// Every pod of a region runs one loop per region configuration
// (Exchanger.loop), on the interval's boundaries of the wall clock:
//
//  0. (on the requests' path, Notes.note) the keys that pressed are
//     noted in memory;
//
//  1. flush: the keys this pod saw pressing, with the tokens its deny cache
//     refused, are added to the region's hash tg{rg:<region>}:hot in its
//     own Redis;
//  2. lead: the pods agree through their own Redis on one leader
//     (tg{rg:<region>}:lead, held for 2 intervals and renewed by its
//     holder), so one exchange runs per region per interval however many
//     pods there are, and another pod takes over within 3 if it dies;
//  3. exchange (the leader, at its region's offset in the interval, so
//     that regions alternate): read each peer's report from the peer's
//     Redis (one GET), take the hot hash and the demand counted beside
//     each tracked bucket, compute the shares (nextShare), apply those
//     that shrink, write this region's report to its own Redis, apply
//     those that grow.
//
// The parts: the peers' reports and acks (peers.go), the keys decided
// (exchangekeys.go), the share model (shares.go), the reads and writes
// beside the buckets (sharewrites.go).
//
// Per interval a region sends each peer one GET, and each peer's report
// is at most maxReportBytes: cross-region traffic grows with the keys that
// press, never with requests.
//
// The loop ends when its configuration is gone: Traefik builds every
// middleware on each reload, so an Exchanger that no New has bound while
// other middlewares were built since (exchangerStale) belongs to a
// configuration that was dropped. It runs while a region is idle: an idle
// region must still give up its share of a key hot elsewhere.

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// NewExchanger returns the exchange of rs with this region's Redis (own)
// and its peers' (in rs.Peers' order); id names it in the leader's lease.
// lastNew reads when the process last built a middleware (see stale). Its
// loop starts with Bind.
func NewExchanger(rs *Settings, own *redis.Client, peers []*redis.Client, id string, lastNew func() int64) *Exchanger {
	return &Exchanger{key: rs.Key, own: own, peers: peers, id: id, rs: rs, lastNew: lastNew, peerUp: make([]int32, len(peers))}
}

// Bind marks x bound by a New at now with the latest settings rs, and
// starts its loop unless it runs.
func (x *Exchanger) Bind(rs *Settings, now int64) {
	x.mu.Lock()
	x.rs = rs
	x.mu.Unlock()
	atomic.StoreInt64(&x.bound, now)
	if atomic.CompareAndSwapInt32(&x.running, 0, 1) {
		go x.loop()
	}
}

// loop runs the pod's part of the exchange every interval until stale. A
// panic ends it; the next New starts another.
func (x *Exchanger) loop() {
	defer func() {
		_ = recover()
		atomic.StoreInt32(&x.leading, 0)
		atomic.StoreInt32(&x.running, 0)
	}()
	x.leadSlot = 0 // a loop started again starts as a new leader would
	for !x.Stale() {
		rs := x.Settings()
		iv := int64(rs.Interval)
		slot := time.Now().UnixNano()/iv + 1
		sleepUntil(slot*iv, iv)
		x.flush(rs)
		if !x.lead(rs) {
			x.leadSlot = 0
			atomic.StoreInt32(&x.leading, 0)
			continue
		}
		atomic.StoreInt32(&x.leading, 1)
		sleepUntil(slot*iv+iv*int64(25+50*rs.Order/rs.Regions)/100, iv)
		if x.exchange(rs, slot, clock.Mono()) {
			atomic.AddInt64(&x.exchangesOK, 1)
		} else {
			atomic.AddInt64(&x.exchangesKO, 1)
		}
	}
}

// sleepUntil sleeps until the wall clock reads ns (Unix ns), at most two
// intervals iv (the clock may have been stepped back since ns was set).
func sleepUntil(ns, iv int64) {
	d := ns - time.Now().UnixNano()
	if d > 2*iv {
		d = 2 * iv
	}
	if d > 0 {
		time.Sleep(time.Duration(d))
	}
}

// flush adds the pod's notes to the region's hot hash.
func (x *Exchanger) flush(rs *Settings) {
	notes := x.notes.take()
	if len(notes) == 0 {
		return
	}
	hk := hotKey(rs.Name)
	var b []byte
	for k, n := range notes {
		b = redis.AppendCommand(b, "HINCRBY", hk, k, strconv.FormatInt(n, 10))
	}
	b = redis.AppendCommand(b, "PEXPIRE", hk, strconv.FormatInt(int64(2*rs.Interval/time.Millisecond), 10))
	_, _ = x.own.SideDo(hk, b, len(notes)+1)
}

// lead reports whether this pod leads the region's exchange this
// interval: it takes the lease (SET NX), or renews it when it holds it.
// The holder is the Exchanger (x.id), so that two exchangers of a region
// in one process (its Redis written two ways) contend like two pods.
// Plain commands, not a script (side.go); a lease that lapses between the
// GET and the PEXPIRE at worst lets two pods exchange for an interval:
// each still grows shares only into what the peers published, and the
// demand counted that interval is split between them.
func (x *Exchanger) lead(rs *Settings) bool {
	k := leadKey(rs.Name)
	ttl := strconv.FormatInt(int64(2*rs.Interval/time.Millisecond), 10)
	b := redis.AppendCommand(nil, "SET", k, x.id, "NX", "PX", ttl)
	b = redis.AppendCommand(b, "GET", k)
	r, err := x.own.SideDo(k, b, 2)
	if err != nil || len(r[1]) != 1 || r[1][0] != x.id {
		return false
	}
	if len(r[0]) == 1 && r[0][0] == "OK" {
		return true // taken
	}
	r, err = x.own.SideDo(k, redis.AppendCommand(nil, "PEXPIRE", k, ttl), 1)
	return err == nil && len(r[0]) == 1 && r[0][0] == "1"
}

// exchange runs the leader's exchange of slot at now (monotonic ns); it
// reports success.
func (x *Exchanger) exchange(rs *Settings, slot, now int64) bool {
	iv := int64(rs.Interval)
	elapsed := rs.Interval.Seconds()
	if x.leadSlot == 0 {
		x.tracked = map[string]*keyShares{}
		x.views = make([]peerView, len(rs.Peers))
		for i := range x.views {
			// Unheard until a peer's report changes: no share grows
			// in a new leader's first exchange.
			x.views[i] = peerView{heard: now - (healthySteps+1)*iv, acked: now - (healthySteps+1)*iv}
		}
		x.sent = nil
		x.restore(rs)
	} else if d := now - x.leadAt; d > 0 && d < 10*iv {
		elapsed = float64(d) / 1e9
	}
	x.leadSlot, x.leadAt = slot, now
	silent := x.hearPeers(rs, slot, now)
	hot, fresh, err := x.takeHot(rs)
	if err != nil {
		return false
	}
	keys := x.candidates(rs, hot, silent)
	counted, rates, err := x.readCounts(keys)
	if err != nil {
		return false
	}
	// Acknowledged: the peers read in this exchange only, so that a peer
	// we can no longer read sees its reports go unacknowledged.
	rep := &report{region: rs.Name, seq: slot, acks: map[string]int64{}, keys: map[string]reportKey{}}
	for i, p := range rs.Peers {
		if v := x.views[i]; v.rep != nil && v.readAt == now {
			rep.acks[p.Name] = v.rep.seq
		}
	}
	var shrink, grow []shareOp
	for _, k := range keys {
		asked := float64(counted[k]) // counted by the script since the key was tracked
		if x.tracked[k] == nil {
			asked = fresh[k] // not yet counted by the script
		}
		if asked < 0 {
			asked = 0
		}
		_, hotHere := hot[k]
		op, grows := x.decideKey(rs, rep, k, (asked+hot[k])/elapsed, rates[k], hotHere, slot, silent)
		op.taken = counted[k]
		if grows {
			grow = append(grow, op)
		} else {
			shrink = append(shrink, op)
		}
	}
	// Shrink, publish, grow. A shrink not written is published at the
	// share it still is (unapplied); any write not done fails the
	// exchange (its metric), though the report goes out.
	ok := true
	for i, done := range x.writeShares(shrink) {
		if !done {
			ok = false
			x.unapplied(rs, rep, shrink[i])
		}
	}
	atomic.StoreInt64(&x.trackedN, int64(len(x.tracked)))
	body := encodeReport(rep)
	atomic.StoreInt64(&x.reportBytes, int64(len(body)))
	rk := reportKeyOf(rs.Name)
	r, err := x.own.SideDo(rk, redis.AppendCommand(nil, "SET", rk, string(body), "PX", strconv.FormatInt(int64(shrinkTTLSteps*rs.Interval/time.Millisecond), 10)), 1)
	if err != nil || len(r[0]) != 1 || r[0][0] != "OK" {
		return false // no share grows unpublished
	}
	x.remember(rs, body)
	for _, done := range x.writeShares(grow) {
		ok = ok && done
	}
	return ok
}
