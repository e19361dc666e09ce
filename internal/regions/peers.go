package regions

// The exchange's peers (exchange.go): their reports read at once, at most
// one read of each in flight; how long each has been silent (its report
// unchanged, or no longer acknowledging ours); and what this region
// published, kept for what its peers acknowledge: a peer's report says
// which of our reports it last read (its ack), and an honest peer holds
// nothing of what that report reserved for us (shares.go: reserved). An
// ack of a report this exchange did not publish (nor take over, restore)
// is no ack.

import (
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// hearPeers reads the peers' reports at once, waiting at most half an
// interval (a peer that does not answer by then counts as unread this
// time; its read ends within its own timeout, and until it does no other
// read of that peer starts: the peer counts as unread, so that a silent
// peer holds one goroutine whatever the interval), and returns the longest
// silence among them, in whole intervals: since its report last changed,
// or since it last acknowledged one of ours, measured on the monotonic
// clock (a wall clock stepped back hides no silence).
func (x *Exchanger) hearPeers(rs *Settings, slot, now int64) int {
	reps := make([]*report, len(rs.Peers))
	if len(x.reading) != len(rs.Peers) {
		x.reading = make([]int32, len(rs.Peers))
	}
	read := make(chan peerRead, len(rs.Peers)) // buffered: a late read never blocks
	out := 0
	for i, p := range rs.Peers {
		if atomic.CompareAndSwapInt32(&x.reading[i], 0, 1) {
			go x.readPeerInto(read, &x.reading[i], i, p.Name)
			out++
		}
	}
	wait := time.NewTimer(rs.Interval / 2)
	for got := 0; got < out; got++ {
		select {
		case r := <-read:
			reps[r.i] = r.rep
		case <-wait.C:
			got = out
		}
	}
	wait.Stop()
	silent := 0
	for i := range rs.Peers {
		rep := reps[i]
		v := &x.views[i]
		if rep != nil {
			v.readAt = now
			atomic.StoreInt32(&x.peerUp[i], 1)
			if v.rep != nil && rep.seq != v.rep.seq {
				v.heard = now
			}
			if a, ok := rep.acks[rs.Name]; ok && a >= slot-ackSteps && a <= slot && x.sentAt(a) != nil {
				v.acked = now
			}
			v.rep = rep
		} else {
			atomic.StoreInt32(&x.peerUp[i], 0)
		}
		last := v.heard
		if v.acked < last {
			last = v.acked
		}
		if s := int((now - last) / int64(rs.Interval)); s > silent {
			silent = s
		}
	}
	return silent
}

// peerRead is peer i's report, or nil.
type peerRead struct {
	i   int
	rep *report
}

// readPeerInto sends readPeer's report of peer i on read, then clears
// reading.
func (x *Exchanger) readPeerInto(read chan<- peerRead, reading *int32, i int, name string) {
	var rep *report
	defer func() {
		_ = recover()
		atomic.StoreInt32(reading, 0)
		read <- peerRead{i, rep}
	}()
	rep = x.readPeer(i, name)
}

// readPeer reads peer i's report from its Redis; nil when it cannot be
// read or is malformed.
func (x *Exchanger) readPeer(i int, name string) *report {
	rk := reportKeyOf(name)
	r, err := x.peers[i].SideDo(rk, redis.AppendCommand(nil, "GET", rk), 1)
	if err != nil || len(r[0]) != 1 {
		return nil
	}
	rep, err := parseReport([]byte(r[0][0]))
	if err != nil || rep.region != name {
		return nil
	}
	return rep
}

// sentReport is one report this region published: its seq, and by key
// what it reserved for this region (ppm); a key it does not list was
// reserved its static share.
type sentReport struct {
	seq      int64
	reserved map[string]int64
}

// maxSent bounds the reports kept: every ack counted is within ackSteps.
const maxSent = ackSteps + 2

// remember keeps body, the report published for slot seq, as its peers
// read it (parsed back: truncated numbers, keys left out past its bounds).
func (x *Exchanger) remember(rs *Settings, body []byte) {
	rep, err := parseReport(body)
	if err != nil {
		return
	}
	sr := sentReport{seq: rep.seq, reserved: make(map[string]int64, len(rep.keys))}
	for k, v := range rep.keys {
		r := guarantee(v.demand, v.rate, rs.Floor, rs.Static) // as a peer computes it
		if v.share > r {
			r = v.share
		}
		sr.reserved[k] = r
	}
	x.sent = append(x.sent, sr)
	if len(x.sent) > maxSent {
		x.sent = append([]sentReport(nil), x.sent[len(x.sent)-maxSent:]...)
	}
}

// sentAt is the report published for seq, or nil.
func (x *Exchanger) sentAt(seq int64) *sentReport {
	for i := len(x.sent) - 1; i >= 0; i-- {
		if x.sent[i].seq == seq {
			return &x.sent[i]
		}
	}
	return nil
}

// reservedFor is the least, over the peers, of what the report each last
// acknowledged reserved for this region of k, ppm; 0 when a peer's is not
// known (unread, no ack, or a report no longer kept).
func (x *Exchanger) reservedFor(rs *Settings, k string) int64 {
	least := int64(-1)
	for i := range rs.Peers {
		v := x.views[i].rep
		if v == nil {
			return 0
		}
		a, ok := v.acks[rs.Name]
		if !ok {
			return 0
		}
		sr := x.sentAt(a)
		if sr == nil {
			return 0
		}
		r, listed := sr.reserved[k]
		if !listed {
			r = rs.Static
		}
		if least < 0 || r < least {
			least = r
		}
	}
	if least < 0 {
		return 0
	}
	return least
}
