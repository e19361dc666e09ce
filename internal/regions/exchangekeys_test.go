package regions

// Each key's decision (exchangekeys.go: decideKey).

import (
	"testing"
	"time"
)

// Retiring: a key that pressed here in this interval never retires, so a
// bursty client does not flap between its share and static; one that has
// not pressed for retireQuiet intervals retires once every region asks for
// at most its static share.
func TestRegionRetiring(t *testing.T) {
	rs := twoRegions("a", "b", 5*time.Second)
	const k, rate = "tg{retiring}", 20.0
	// b holds its floor of the key, asks nothing.
	x := &Exchanger{tracked: map[string]*keyShares{}, views: []peerView{{rep: &report{keys: map[string]reportKey{k: {share: 50000, rate: rate}}}}}}
	// 1 token a second asked, a twentieth of the rate: under half of the
	// static share (10/s).
	x.tracked[k] = &keyShares{demand: 1, share: 950000, pressed: 100}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 1, rate, true, 101, 0)
	if x.tracked[k] == nil || x.tracked[k].share != 950000 {
		t.Errorf("a key that pressed this interval retired (share %+v)", x.tracked[k])
	}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 1, rate, false, 102, 0)
	if ks := x.tracked[k]; ks == nil || ks.share != rs.Static {
		t.Errorf("a key asking a twentieth of the rate, not pressing: %+v, want its share back to static", ks)
	}
	// 8 a second: under the static share, not under half of it.
	x.tracked[k] = &keyShares{demand: 8, share: 700000, pressed: 100}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 8, rate, false, 101, 0)
	if ks := x.tracked[k]; ks == nil || ks.share == rs.Static {
		t.Errorf("8 a second, pressed an interval ago: %+v, want it still tracked above static", ks)
	}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 8, rate, false, 100+retireQuiet, 0)
	if ks := x.tracked[k]; ks == nil || ks.share != rs.Static {
		t.Errorf("8 a second, not pressed for %d intervals: %+v, want its share back to static", retireQuiet, ks)
	}
}

// A key first seen in a peer's report, whatever that peer asks, holds the
// static share here until this region's demand for it is counted (from
// the next exchange: its hash is written, the script counts it); then it
// falls to what that demand needs. (It fell to the floor at once, before
// anything said this region asks less.)
func TestRegionUnmeasuredKeyHoldsStatic(t *testing.T) {
	rs := twoRegions("a", "b", 5*time.Second)
	const k = "tg{unmeasured}"
	x := &Exchanger{tracked: map[string]*keyShares{}, views: []peerView{{rep: &report{keys: map[string]reportKey{k: {demand: 1e9, share: ppm, rate: 20}}}}}}
	op, _ := x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 0, 0, false, 100, 0)
	if op.share != rs.Static || x.tracked[k] == nil {
		t.Errorf("first seen in a peer's report: share %d (tracked %v), want static (%d), tracked so that its demand is counted", op.share, x.tracked[k] != nil, rs.Static)
	}
	op, _ = x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 0, 20, false, 101, 0)
	if op.share != rs.Floor {
		t.Errorf("counted, no demand here: share %d, want the floor (%d)", op.share, rs.Floor)
	}
}
