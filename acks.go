package tollgate

// What this region published, kept for what its peers acknowledge: a
// peer's report says which of our reports it last read (its ack), and an
// honest peer holds nothing of what that report reserved for us (shares.go:
// reserved). An ack of a report this exchange did not publish (nor take
// over, restore) is no ack.

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
func (x *exchanger) remember(rs *regionSettings, body []byte) {
	rep, err := parseReport(body)
	if err != nil {
		return
	}
	sr := sentReport{seq: rep.seq, reserved: make(map[string]int64, len(rep.keys))}
	for k, v := range rep.keys {
		r := guarantee(v.demand, v.rate, rs.floor, rs.static) // as a peer computes it
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
func (x *exchanger) sentAt(seq int64) *sentReport {
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
func (x *exchanger) reservedFor(rs *regionSettings, k string) int64 {
	least := int64(-1)
	for i := range rs.peers {
		v := x.views[i].rep
		if v == nil {
			return 0
		}
		a, ok := v.acks[rs.name]
		if !ok {
			return 0
		}
		sr := x.sentAt(a)
		if sr == nil {
			return 0
		}
		r, listed := sr.reserved[k]
		if !listed {
			r = rs.static
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
