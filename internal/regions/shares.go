package regions

// The share model: the target of a key's share in this region and the
// bounds it moves within (the exchange that applies them: exchange.go).
//
// A region's demand for a key (tokens per second asked, refusals
// included) needs a part of the limit, demand over the limit's rate; its
// guarantee is that need, at least its floor and at most its static
// share. Targets give every region its guarantee first, then what the
// guarantees leave (the spare) to the regions whose need exceeds their
// guarantee, in proportion to the excess; once every need is met, the
// rest goes in proportion to the needs (by static weight when nobody
// asks). All traffic in one of two regions: 0.95 there; 70/30 of the
// limit: 0.7/0.3; both regions asking at least their static share: each
// holds its static share, whatever the other asks.
//
// A peer's report is trusted to say what the peer asks and holds, never
// to take what this region's own demand needs up to its static share: a
// region's share shrinks below its guarantee only if it was below it
// already; it grows back to what its last reports that every peer
// acknowledged reserved (their share and guarantee), whatever a peer's
// report claims; and what a peer claims above its static share comes out
// of the others' unused part only. So a peer whose report lies (a share
// of 1 and a demand without end for every key it reads in ours) gets the
// spare of this region's keys, never their part below static that this
// region's clients ask for. The report still names this region's tracked
// keys: a peer with no traffic for a key must learn of it to give up its
// static share, the exchange's whole purpose.

import (
	"math"
)

// keyShares is what the exchange knows of one key: this region's demand
// (tokens per second, averaged) and share, and each peer's, from its
// report (share 0: the peer does not list it, so it holds its static).
type keyShares struct {
	demand  float64
	share   int64 // ppm; 0: untracked (static)
	peerD   []float64
	peerPub []int64
	rate    float64 // the limit's, tokens per second; 0: not known yet
	ownRate bool    // rate is the script's here, not a peer's
	pressed int64   // the slot it last pressed here (or was first seen)
	// unmeasured: first seen in a peer's report, its demand here not
	// counted yet (the script counts a key once its hash is written):
	// nothing says it is below static, so it holds static meanwhile.
	unmeasured bool
	// reserved is the least, over the peers, of what the report of ours
	// that each last acknowledged reserved for this region (its share and
	// guarantee as published), ppm: no honest peer holds a part of it, so
	// no report keeps this region from growing back to it. 0: unknown.
	reserved int64
}

// guarantee is the guarantee of a region with demand d (tokens per
// second) of a key whose limit's rate is rate (0: unknown, and any demand
// then needs the region's static share), ppm.
func guarantee(d, rate float64, floor, static int64) int64 {
	g := int64(needOf(d, rate))
	if g > static {
		g = static
	}
	if g < floor {
		g = floor
	}
	return g
}

// needOf is the part of the limit demand d needs, ppm, at most the limit.
func needOf(d, rate float64) float64 {
	switch {
	case d <= 0:
		return 0
	case rate <= 0:
		return ppm
	}
	if n := d / rate * ppm; n < ppm {
		return n
	}
	return ppm
}

// ownGuarantee is this region's guarantee of k: by the limit's rate as
// its own script wrote it (a rate only a peer gave cuts nothing: any
// demand then holds the static share), static while its demand here is
// not counted yet.
func ownGuarantee(rs *Settings, k *keyShares) int64 {
	if k.unmeasured {
		return rs.Static
	}
	rate := k.rate
	if !k.ownRate {
		rate = 0
	}
	return guarantee(k.demand, rate, rs.Floor, rs.Static)
}

// targetShare is this region's target share of k, ppm (the model above).
func targetShare(rs *Settings, k *keyShares) int64 {
	n := 1 + len(rs.Peers)
	// One assignment a line: in a tuple assignment Yaegi loses the value
	// of a conversion of a call (float64(f())).
	need, g, static := make([]float64, n), make([]float64, n), make([]float64, n)
	need[0] = needOf(k.demand, ownRate(k))
	g[0] = float64(ownGuarantee(rs, k))
	static[0] = float64(rs.Static)
	for i, p := range rs.Peers {
		need[i+1] = needOf(k.peerD[i], k.rate)
		g[i+1] = float64(guarantee(k.peerD[i], k.rate, p.Floor, p.Static))
		static[i+1] = float64(p.Static)
	}
	spare := float64(ppm)
	var excess, needs, statics float64
	for i := range g {
		spare -= g[i]
		if need[i] > g[i] {
			excess += need[i] - g[i]
		}
		needs += need[i]
		statics += static[i]
	}
	mine := 0.0
	if need[0] > g[0] {
		mine = need[0] - g[0]
	}
	t := g[0]
	switch {
	case spare <= 0:
	case excess >= spare:
		t += spare * mine / excess
	case needs > 0:
		t += mine + (spare-excess)*need[0]/needs
	default:
		t += spare * static[0] / statics
	}
	return int64(math.Floor(t))
}

// ownRate is k's rate if this region's script wrote it, else 0.
func ownRate(k *keyShares) float64 {
	if k.ownRate {
		return k.rate
	}
	return 0
}

// nextShare is a key's share after this exchange (ppm), given the
// exchange's state: silent is the longest silence of a peer, in intervals
// (0 when every peer was heard).
func nextShare(rs *Settings, k *keyShares, silent int) int64 {
	cur := k.share
	if cur == 0 {
		cur = rs.Static
	}
	switch {
	case silent > staticSteps:
		return rs.Static
	case silent > holdSteps:
		if cur > rs.Static {
			return rs.Static
		}
		return cur
	}
	return bounded(rs, k, targetShare(rs, k), cur, silent)
}

// retireShare is nextShare for a key that no longer needs tracking: its
// target is static.
func retireShare(rs *Settings, k *keyShares, cur int64, silent int) int64 {
	return bounded(rs, k, rs.Static, cur, silent)
}

// bounded is the share a key moves to from cur towards target: at most
// the room the peers' claims leave (but what they acknowledged as
// reserved for this region is its own), at least the floor, never below
// this region's guarantee unless cur is (a peer's claim cuts nothing this
// region's demand needs), and no higher than cur while a peer is unheard.
func bounded(rs *Settings, k *keyShares, target, cur int64, silent int) int64 {
	next := target
	room := roomFor(rs, k)
	if room < k.reserved {
		room = k.reserved
	}
	if next > room {
		next = room
	}
	if next < rs.Floor {
		next = rs.Floor
	}
	if g := ownGuarantee(rs, k); next < g && next < cur {
		next = g
		if cur < g {
			next = cur
		}
	}
	if next > cur && silent > healthySteps {
		next = cur // a peer unheard: no share grows
	}
	return next
}

// roomFor is what the peers' claims on k leave, ppm: a peer claims the
// larger of its published share (its static share when it does not list
// k) and its guarantee (what its demand needs, which it may not hold yet).
func roomFor(rs *Settings, k *keyShares) int64 {
	room := int64(ppm)
	for i, p := range rs.Peers {
		claim := k.peerPub[i]
		if claim <= 0 {
			claim = p.Static
		}
		if g := guarantee(k.peerD[i], k.rate, p.Floor, p.Static); g > claim {
			claim = g
		}
		room -= claim
	}
	return room
}
