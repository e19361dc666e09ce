package regions

// The keys an exchange decides (exchange.go): the notes the pods took
// (takeHot), the candidates among them and the tracked and the peers'
// keys, each key's decision (decideKey), and the tracked keys a new
// leader takes over from its region's report (restore).

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// takeHot takes the region's hot hash: renamed aside, read and deleted,
// while the pods' next notes start a new one. At most maxHotRead fields
// are read (a random sample of a bigger hash: many pods, or a flood of
// client keys, cost some keys an interval, never the exchange). hot holds
// every key noted, with the tokens refused from the pods' memory; fresh
// the tokens Redis decided.
func (x *Exchanger) takeHot(rs *Settings) (hot, fresh map[string]float64, err error) {
	hk := hotKey(rs.Name)
	taking := hk + ":taking"
	b := redis.AppendCommand(nil, "RENAME", hk, taking)
	b = redis.AppendCommand(b, "HRANDFIELD", taking, strconv.Itoa(maxHotRead), "WITHVALUES")
	b = redis.AppendCommand(b, "DEL", taking)
	r, err := x.own.SideDo(hk, b, 3)
	if err != nil {
		return nil, nil, err
	}
	hot, fresh = map[string]float64{}, map[string]float64{}
	pairs := r[1]
	for i := 0; i+1 < len(pairs); i += 2 {
		k, into := pairs[i], hot
		if strings.HasSuffix(k, freshSuffix) {
			k, into = k[:len(k)-len(freshSuffix)], fresh
		}
		if n, err := strconv.ParseFloat(pairs[i+1], 64); err == nil && n >= 0 && n < 1e15 && bucketKeyOK(k) {
			into[k] += n
			if _, ok := hot[k]; !ok {
				hot[k] = 0 // every key noted is a candidate
			}
		}
	}
	return hot, fresh, nil
}

// decideKey moves key k's state with the demand asked here this interval
// (tokens per second) and the limit's rate (0: unknown), adds it to rep
// unless it is no longer tracked, and returns the write of its share and
// whether it grows.
func (x *Exchanger) decideKey(rs *Settings, rep *report, k string, asked, rate float64, hotHere bool, slot int64, silent int) (shareOp, bool) {
	ks := x.tracked[k]
	if ks == nil {
		ks = &keyShares{demand: asked, pressed: slot, unmeasured: !hotHere}
		x.tracked[k] = ks
	} else {
		ks.demand = demandWeight*asked + (1-demandWeight)*ks.demand
		ks.unmeasured = false
	}
	if ks.demand < 1e-3 {
		ks.demand = 0
	}
	ks.peerD = make([]float64, len(rs.Peers))
	ks.peerPub = make([]int64, len(rs.Peers))
	othersStatic := true
	// The limit's rate: as the script here wrote it, else the least a
	// peer says (a region with no traffic for the key has not charged
	// it; a rate only peers gave never cuts this region's guarantee).
	if rate > 0 {
		ks.rate, ks.ownRate = rate, true
	}
	for i := range rs.Peers {
		if v := x.views[i].rep; v != nil && !ks.ownRate {
			if g := v.keys[k].rate; g > 0 && (g < ks.rate || ks.rate == 0) {
				ks.rate = g
			}
		}
	}
	ks.reserved = x.reservedFor(rs, k)
	// Retiring, so that the static split serves the key again: it did
	// not press here in this interval, and every region asks for at most
	// half its static share of the rate; or for at most its static share,
	// when it has not pressed here for retireQuiet intervals.
	if hotHere || ks.pressed == 0 { // pressing, or taken over from the region's report
		ks.pressed = slot
	}
	below := retireBelow
	if slot-ks.pressed >= retireQuiet {
		below = 1
	}
	retiring := !hotHere && ks.rate > 0 && ks.demand <= below*float64(rs.Static)/ppm*ks.rate
	for i, p := range rs.Peers {
		if v := x.views[i].rep; v != nil {
			if pk, ok := v.keys[k]; ok {
				ks.peerD[i], ks.peerPub[i] = pk.demand, pk.share
				othersStatic = othersStatic && pk.share == p.Static
				retiring = retiring && pk.demand <= below*float64(p.Static)/ppm*ks.rate
			}
		}
	}
	was := ks.share
	if was == 0 {
		was = rs.Static
	}
	next := nextShare(rs, ks, silent)
	if retiring && silent <= holdSteps {
		next = retireShare(rs, ks, was, silent)
	}
	op := shareOp{key: shareKey(k), share: next, ttlMS: int64(shrinkTTLSteps * rs.Interval / time.Millisecond), bucket: k, was: was, ks: ks}
	if next > rs.Static {
		op.ttlMS = int64(growTTLSteps * rs.Interval / time.Millisecond)
	}
	if next == rs.Static && othersStatic && !hotHere && !ks.unmeasured && (ks.demand == 0 || retiring) {
		// Untracked (not while its demand here is not counted yet: its
		// hash is written, so that the script counts it). Back to static
		// from above, the hash goes; from below, it says static until it
		// lapses, so that the bucket's next charge sees its share grow and
		// keeps its tokens.
		if was >= rs.Static {
			op.share = 0
		}
		delete(x.tracked, k)
	} else {
		ks.share = next
		rep.keys[k] = reportKey{demand: ks.demand, share: next, rate: ks.rate}
	}
	return op, next > was
}

// restore takes over the region's tracked keys from its own report, when
// this pod becomes the leader.
func (x *Exchanger) restore(rs *Settings) {
	rk := reportKeyOf(rs.Name)
	r, err := x.own.SideDo(rk, redis.AppendCommand(nil, "GET", rk), 1)
	if err != nil || len(r[0]) != 1 {
		return
	}
	rep, err := parseReport([]byte(r[0][0]))
	if err != nil || rep.region != rs.Name {
		return
	}
	for k, v := range rep.keys {
		x.tracked[k] = &keyShares{demand: v.demand, share: v.share, rate: v.rate}
	}
	x.remember(rs, []byte(r[0][0]))
}

// candidates are the keys this exchange decides: those tracked, then those
// that pressed here (most tokens first), then those the peers heard from
// list (most demand first), at most maxTracked. When every share is to be
// static (silent past staticSteps) they are the tracked keys alone.
func (x *Exchanger) candidates(rs *Settings, hot map[string]float64, silent int) []string {
	keys := make([]string, 0, len(x.tracked))
	seen := map[string]bool{}
	for k := range x.tracked {
		keys = append(keys, k)
		seen[k] = true
	}
	sort.Strings(keys)
	if silent > staticSteps {
		return keys
	}
	type weighted struct {
		k string
		w float64
	}
	var more []weighted
	for k, n := range hot {
		if !seen[k] {
			more = append(more, weighted{k, n + 1e12}) // before the peers'
			seen[k] = true
		}
	}
	for i := range rs.Peers {
		if v := x.views[i].rep; v != nil {
			for k, pk := range v.keys {
				if !seen[k] {
					more = append(more, weighted{k, pk.demand})
					seen[k] = true
				}
			}
		}
	}
	sort.Slice(more, func(i, j int) bool {
		if more[i].w != more[j].w {
			return more[i].w > more[j].w
		}
		return more[i].k < more[j].k
	})
	for _, m := range more {
		if len(keys) >= maxTracked {
			break
		}
		keys = append(keys, m.k)
	}
	return keys
}
