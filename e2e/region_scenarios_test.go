package e2e

// The multi-region suite's core scenarios (region_test.go runs them):
// run compiled, under Yaegi and on Traefik.

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// scenarioOneRegion: all of a client's traffic in the first region (40/s
// offered, twice the limit). After 3 intervals that region admits at least
// 90% of the global limit; its share settles at 1 minus the others' floors.
// Before, the headers of a fresh key: the global quota in RateLimit-Policy,
// this region's bucket (its static share of the burst) in RateLimit.
func scenarioOneRegion(t *testing.T, w *RegionWorld) {
	a, other := w.Regions[0], w.Regions[1]
	fresh := fleetKey(t, "fresh")
	rep := other.Pods()[0].Do("/", fresh)
	if rep.Err != nil || rep.Status != 200 {
		t.Fatalf("first request of a fresh key in %s: %d %v", other.Name, rep.Status, rep.Err)
	}
	pol, rl := rep.Header.Get("RateLimit-Policy"), rep.Header.Get("RateLimit")
	figure(t, "fresh_key_headers", "%q %q", pol, rl)
	if !strings.Contains(pol, fmt.Sprintf(";q=%d;", regionAverage)) {
		t.Errorf("RateLimit-Policy %q: want the global quota q=%d", pol, regionAverage)
	}
	staticBurst := int(math.Ceil(other.Static()*regionBurst - 1e-9))
	if r := rateLimitR(rl); r < 0 || r > staticBurst-1 {
		t.Errorf("RateLimit %q after one request of a fresh key in %s: want r <= %d (its static share of burst %d, less one)",
			rl, other.Name, staticBurst-1, regionBurst)
	}

	key := fleetKey(t, "one")
	bk := bucketKey("api", key)
	const run = 9 * time.Second
	l := w.Drive(run+5*time.Second, RegionFlow{a.Name, "/", []string{key}, 2 * regionAverage})
	time.Sleep(run)
	l.Stop()
	regionTimeline(t, w, l, "one_region", int(run/time.Second))
	noFailures(t, "all traffic in "+a.Name, l.All())
	from, to := 4*regionInterval, run
	win := l.Since(a.Name, from, to)
	rate := rateOf(win, to-from)
	want := allInOneShare(w, a)
	figure(t, "one_region_admitted_per_s", "%.2f", rate)
	figure(t, "one_region_admitted_fraction", "%.3f (expected share %.3f)", rate/regionAverage, want)
	figure(t, "one_region_decisions", "%s", formatTally(Decisions(win)))
	if rate < 0.9*regionAverage {
		t.Errorf("all traffic in %s: %.2f/s admitted over [%v, %v), want at least 90%% of %d/s", a.Name, rate, from, to, regionAverage)
	}
	if rate > 1.05*regionAverage {
		t.Errorf("all traffic in %s: %.2f/s admitted over [%v, %v), more than the global limit %d/s", a.Name, rate, from, to, regionAverage)
	}
	maxR := -1
	for _, s := range win {
		if r := rateLimitR(s.RateLimit); r > maxR {
			maxR = r
		}
	}
	figure(t, "one_region_max_r", "%d", maxR)
	sum := logShares(t, w, "one_region_shares", bk)
	ppm, _, present := mustShare(t, a, bk)
	if !present || abs64(ppm-ppmOf(want)) > 20000 {
		t.Errorf("%s's share of a key with all its traffic there: %s, want %d ppm (1 - the others' floors) ±20000",
			a.Name, shareString(ppm, 0, present), ppmOf(want))
	}
	if sum > 1010000 {
		t.Errorf("shares of one key add up to %d ppm, want at most 1000000", sum)
	}
}

// scenarioSplit: 28/s offered in the first region, 6/s in the second
// (less than its static share): together at most 1.05 x the limit over
// the steady state, shared near 70/30 (the second keeps what it asks,
// the first gets the rest).
func scenarioSplit(t *testing.T, w *RegionWorld) {
	a, b := w.Regions[0], w.Regions[1]
	key := fleetKey(t, "split")
	bk := bucketKey("api", key)
	const run = 12 * time.Second
	l := w.Drive(run+5*time.Second,
		RegionFlow{a.Name, "/", []string{key}, 28},
		RegionFlow{b.Name, "/", []string{key}, 6})
	time.Sleep(run)
	l.Stop()
	regionTimeline(t, w, l, "split", int(run/time.Second))
	noFailures(t, "70/30", l.All())
	from, to := 5*regionInterval, run
	na, _ := CountAdmitted(l.Since(a.Name, from, to))
	nb, _ := CountAdmitted(l.Since(b.Name, from, to))
	secs := (to - from).Seconds()
	total := float64(na+nb) / secs
	fa := float64(na) / float64(max(na+nb, 1))
	wantA := demandShare(w, a, []float64{28, 6})
	figure(t, "split_admitted_per_s", "%s=%.2f,%s=%.2f,total=%.2f", a.Name, float64(na)/secs, b.Name, float64(nb)/secs, total)
	figure(t, "split_admitted_fraction", "%s=%.3f,%s=%.3f (expected %.3f/%.3f)", a.Name, fa, b.Name, 1-fa, wantA, 1-wantA)
	figure(t, "split_total_vs_limit", "%.3f", total/regionAverage)
	if total > 1.05*regionAverage {
		t.Errorf("70/30: the regions admitted %.2f/s together over [%v, %v), want at most 1.05 x %d", total, from, to, regionAverage)
	}
	if total < 0.8*regionAverage {
		t.Errorf("70/30: the regions admitted %.2f/s together over [%v, %v) with 34/s offered, want at least 80%% of %d", total, from, to, regionAverage)
	}
	if math.Abs(fa-wantA) > 0.12 {
		t.Errorf("70/30: %s admitted %.3f of the total, want about %.3f (±0.12)", a.Name, fa, wantA)
	}
	sum := logShares(t, w, "split_shares", bk)
	for _, r := range []*Region{a, b} {
		if _, _, present := mustShare(t, r, bk); !present {
			t.Errorf("70/30: %s keeps no share of a key pressing there (%s}s absent)", r.Name, bk)
		}
	}
	if sum > 1010000 {
		t.Errorf("70/30: shares add up to %d ppm, want at most 1000000", sum)
	}
}

// scenarioFailClosedStatic: a fail-closed class always uses the static
// split, even with all the traffic in one region.
func scenarioFailClosedStatic(t *testing.T, w *RegionWorld) {
	a := w.Regions[0]
	key := fleetKey(t, "strict")
	const run = 8 * time.Second
	l := w.Drive(run+5*time.Second, RegionFlow{a.Name, "/strict", []string{key}, 2 * regionAverage})
	time.Sleep(run)
	l.Stop()
	noFailures(t, "fail-closed, all traffic in "+a.Name, l.All())
	from, to := 4*regionInterval, run
	rate := rateOf(l.Since(a.Name, from, to), to-from)
	static := a.Static() * regionAverage
	figure(t, "fail_closed_admitted_per_s", "%.2f (static %.2f)", rate, static)
	if rate > 1.1*static || rate < 0.8*static {
		t.Errorf("fail-closed class, all traffic in %s: %.2f/s admitted over [%v, %v), want its static share %.2f/s",
			a.Name, rate, from, to, static)
	}
	ppm, n, present := mustShare(t, a, bucketKey("strict", key))
	if !atStatic(a, ppm, present) {
		t.Errorf("fail-closed class: %s's share %s, want static (%d) or none", a.Name, shareString(ppm, n, present), ppmOf(a.Static()))
	}
}

// scenarioClientMoves: a client all in the first region, then all in the
// second. The second reaches 90% of the limit within a few intervals; no
// 5 s window admits more than 5 x limit + burst (+10%).
func scenarioClientMoves(t *testing.T, w *RegionWorld) {
	a, b := w.Regions[0], w.Regions[1]
	key := fleetKey(t, "moves")
	bk := bucketKey("api", key)
	l1 := w.Drive(15*time.Second, RegionFlow{a.Name, "/", []string{key}, 2 * regionAverage})
	time.Sleep(7 * time.Second)
	l1.Stop()
	logShares(t, w, "moves_shares_before", bk)
	const run = 10 * time.Second
	l2 := w.Drive(run+5*time.Second, RegionFlow{b.Name, "/", []string{key}, 2 * regionAverage})
	time.Sleep(run)
	l2.Stop()
	regionTimeline(t, w, l1, "moves_before", 7)
	regionTimeline(t, w, l2, "moves_after", int(run/time.Second))
	all := append(l1.All(), l2.All()...)
	noFailures(t, "moving client", all)
	bins := Bins(l2.Samples(b.Name, l2.Start, l2.Start.Add(run)), l2.Start, time.Second, int(run/time.Second))
	reached := -1
	for i, n := range bins {
		if float64(n) >= 0.9*regionAverage {
			reached = i
			break
		}
	}
	figure(t, "moves_b_reaches_90pct_in_second", "%d", reached)
	from, to := 5*regionInterval, run
	rate := rateOf(l2.Since(b.Name, from, to), to-from)
	figure(t, "moves_b_admitted_per_s", "%.2f over [%v,%v)", rate, from, to)
	if rate < 0.9*regionAverage {
		t.Errorf("client moved to %s: %.2f/s admitted there over [%v, %v) after the move, want at least 90%% of %d", b.Name, rate, from, to, regionAverage)
	}
	worst, at := MaxWindow(all, 5*time.Second)
	bound := 5*regionAverage + regionBurst
	figure(t, "moves_worst_5s_window", "%d (bound %d, %.3f x, at %+.1fs from the move)", worst, bound,
		float64(worst)/float64(bound), at.Sub(l2.Start).Seconds())
	if float64(worst) > 1.1*float64(bound) {
		t.Errorf("moving client: %d admitted within 5 s, want at most 5 x %d + %d (+10%%)", worst, regionAverage, regionBurst)
	}
	logShares(t, w, "moves_shares_after", bk)
}

// splitAboveStatic drives one key at rateA in the first region and rateB
// in the second (for max at most) and, 6 intervals later, requires the
// first's share above static; it returns the load, the key and its
// bucket's key.
func splitAboveStatic(t *testing.T, w *RegionWorld, what string, rateA, rateB float64, max time.Duration) (*RegionLoad, string, string) {
	t.Helper()
	a, b := w.Regions[0], w.Regions[1]
	key := fleetKey(t, what)
	bk := bucketKey("api", key)
	l := w.Drive(max, RegionFlow{a.Name, "/", []string{key}, rateA}, RegionFlow{b.Name, "/", []string{key}, rateB})
	time.Sleep(6 * regionInterval)
	logShares(t, w, what+"_shares_before", bk)
	if p, n, present := mustShare(t, a, bk); !present || p <= ppmOf(a.Static()) {
		l.Stop()
		t.Fatalf("%s: %s's share %s, want above static (%d): %.0f/s there, %.0f/s in %s",
			what, a.Name, shareString(p, n, present), ppmOf(a.Static()), rateA, rateB, b.Name)
	}
	return l, key, bk
}

// scenarioLinkCut: the link between the first two regions cut both ways,
// then restored. No request fails or waits longer; shares are held for
// the hold, then back to static: a share above static within 5 intervals
// of the cut (3 silent intervals after the last exchange that heard the
// peer, at most one before the cut, and the exchange that acts), one below
// static within 8 (6 silent intervals), never before the other side's
// above-static share fell: sampled every 100 ms, the shares never add up
// to more than the limit. After the restore they follow demand again.
func scenarioLinkCut(t *testing.T, w *RegionWorld) {
	a, b := w.Regions[0], w.Regions[1]
	l, _, bk := splitAboveStatic(t, w, "cut", 30, 5, 60*time.Second)
	defer l.Stop()
	failedLabels := map[string]string{"region": a.Name, "result": "failed"}
	failed0 := sumMetric(a, "tollgate_region_exchanges_total", failedLabels)

	cut := time.Now()
	w.Cut(a.Name, b.Name)
	// Polled every 100 ms: a change is seen at most one poll late, so
	// the bound is checked against the last poll that had not seen it.
	var heldA int64 = -1
	var heldPresent bool
	staticA, staticB := time.Duration(-1), time.Duration(-1)
	var lastA, lastB time.Duration // the last poll before each was static
	peerDown := time.Duration(-1)
	var series []string
	for i := 0; time.Since(cut) < 9*time.Second; i++ {
		since := time.Since(cut)
		pa, na, prA := mustShare(t, a, bk)
		pb, nb, prB := mustShare(t, b, bk)
		if sum := shareOrStatic(a, pa, prA) + shareOrStatic(b, pb, prB); sum > 1000000+1000 {
			t.Errorf("%v into the cut: shares %s/%s add up to %d ppm, more than the limit", since.Round(10*time.Millisecond), shareString(pa, na, prA), shareString(pb, nb, prB), sum)
		}
		if heldA < 0 && since >= 1500*time.Millisecond {
			heldA, heldPresent = pa, prA
		}
		if atStatic(a, pa, prA) {
			if staticA < 0 {
				staticA = since
			}
		} else {
			lastA, staticA = since, -1
		}
		if atStatic(b, pb, prB) {
			if staticB < 0 {
				staticB = since
			}
		} else {
			lastB, staticB = since, -1
		}
		if peerDown < 0 && i%3 == 0 {
			if ls, err := leaders(a); err == nil && len(ls) > 0 {
				if v, ok, err := podMetric(ls[0], "tollgate_region_peer_up", map[string]string{"region": a.Name, "peer": b.Name}); err == nil && ok && v == 0 {
					peerDown = since
				}
			}
		}
		if i%3 == 0 {
			series = append(series, fmt.Sprintf("%.1fs:%s/%s", since.Seconds(), shareString(pa, na, prA), shareString(pb, nb, prB)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	failed1 := sumMetric(a, "tollgate_region_exchanges_total", failedLabels)
	figure(t, "cut_shares_series", "%s", strings.Join(series, " "))
	figure(t, "cut_static_after", "%s=%v (last seen above at %v),%s=%v (last seen below at %v) (bound %v)",
		a.Name, staticA.Round(10*time.Millisecond), lastA.Round(10*time.Millisecond),
		b.Name, staticB.Round(10*time.Millisecond), lastB.Round(10*time.Millisecond), 8*regionInterval)
	figure(t, "cut_peer_up_0_after", "%v", peerDown.Round(10*time.Millisecond))
	figure(t, "cut_failed_exchanges", "%.0f (ok: %.0f)", failed1-failed0, sumMetric(a, "tollgate_region_exchanges_total", map[string]string{"region": a.Name, "result": "ok"}))
	bound := 5 * regionInterval
	if !heldPresent || heldA <= ppmOf(a.Static()) {
		t.Errorf("1.5 s into the cut %s's share is %s: want it held above static for the hold", a.Name, shareString(heldA, 0, heldPresent))
	}
	if staticA < 0 || lastA >= bound {
		t.Errorf("link cut: %s's share (above static) still above static %v after the cut (static from %v), want back within %v", a.Name, lastA, staticA, bound)
	}
	if bound = 8 * regionInterval; staticB < 0 || lastB >= bound {
		t.Errorf("link cut: %s's share (below static) still below static %v after the cut (static from %v), want back within %v", b.Name, lastB, staticB, bound)
	}
	if peerDown < 0 {
		t.Errorf("link cut: the leader of %s never reported tollgate_region_peer_up{peer=%q} 0", a.Name, b.Name)
	}
	// (Not asserted: whether an exchange that could not read a peer counts
	// as failed is not specified; the implementation counts it ok.)
	// Admitted at static while cut (the last 1.5 s of it).
	cutEnd := time.Now()
	rA := rateOf(l.Samples(a.Name, cutEnd.Add(-1500*time.Millisecond), cutEnd), 1500*time.Millisecond)
	figure(t, "cut_admitted_per_s_late", "%s=%.2f (static %.2f)", a.Name, rA, a.Static()*regionAverage)
	if rA > 1.25*a.Static()*regionAverage+1 {
		t.Errorf("link cut: %s admitted %.2f/s at the end of the cut, want about its static %.2f/s", a.Name, rA, a.Static()*regionAverage)
	}

	if err := w.Restore(a.Name, b.Name); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	grew := time.Duration(-1)
	for time.Since(restored) < 8*time.Second {
		pa, _, prA := mustShare(t, a, bk)
		if grew < 0 && prA && pa > ppmOf(a.Static())+20000 {
			grew = time.Since(restored)
		}
		time.Sleep(250 * time.Millisecond)
	}
	upAgain := false
	if ls, err := leaders(a); err == nil && len(ls) > 0 {
		v, ok, _ := podMetric(ls[0], "tollgate_region_peer_up", map[string]string{"region": a.Name, "peer": b.Name})
		upAgain = ok && v == 1
	}
	l.Stop()
	end := time.Now()
	logShares(t, w, "cut_shares_after_restore", bk)
	figure(t, "cut_share_grows_after_restore_in", "%v", grew.Round(10*time.Millisecond))
	if grew < 0 || grew > 6*regionInterval {
		t.Errorf("after the restore %s's share did not follow demand again within 6 intervals (grew after %v)", a.Name, grew)
	}
	if !upAgain {
		t.Errorf("after the restore the leader of %s does not report tollgate_region_peer_up{peer=%q} 1", a.Name, b.Name)
	}
	na, _ := CountAdmitted(l.Samples(a.Name, end.Add(-3*time.Second), end))
	nb, _ := CountAdmitted(l.Samples(b.Name, end.Add(-3*time.Second), end))
	figure(t, "cut_admitted_after_restore", "%s=%.2f/s,%s=%.2f/s", a.Name, float64(na)/3, b.Name, float64(nb)/3)

	all := l.All()
	noFailures(t, "link cut and restored", all)
	before := l.Samples("", cut.Add(-5*time.Second), cut)
	during := l.Samples("", cut, cut.Add(8*time.Second))
	p50b, p99b, p50d, p99d := Latency(before, 50), Latency(before, 99), Latency(during, 50), Latency(during, 99)
	figure(t, "cut_latency", "before p50=%v p99=%v, during p50=%v p99=%v (%d, %d requests)",
		p50b.Round(10*time.Microsecond), p99b.Round(10*time.Microsecond), p50d.Round(10*time.Microsecond), p99d.Round(10*time.Microsecond), len(before), len(during))
	figure(t, "cut_decisions", "before %s; during %s", formatTally(Decisions(before)), formatTally(Decisions(during)))
	if p50d > p50b+10*time.Millisecond || p99d > p99b+50*time.Millisecond {
		t.Errorf("link cut: latency p50/p99 %v/%v before, %v/%v during: a request waited for the cut link", p50b, p99b, p50d, p99d)
	}
	if d := Decisions(during); d["local"]+d["unavailable"] > len(during)/100 {
		t.Errorf("link cut: decisions during the cut %s: the region's own Redis should decide", formatTally(d))
	}
}
