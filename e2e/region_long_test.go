package e2e

import (
	"os"
	"testing"
	"time"
)

// TestRegionSixtySecondWindows measures the regions' steady-state bound
// over whole minutes: two regions (in-process, compiled pods), a client
// split 70/30, then all of it in one region, then all in the other, then
// 70/30 again; the admitted requests of both regions over every 60 s
// window (sliding, per request) against the limit's (20/s x 60 s plus
// the burst). About 3 minutes, so it runs only with
// TOLLGATE_REGION_LONG=1:
//
//	cd e2e && TOLLGATE_REGION_LONG=1 go test -count=1 -run TestRegionSixtySecondWindows -v .
func TestRegionSixtySecondWindows(t *testing.T) {
	if os.Getenv("TOLLGATE_REGION_LONG") == "" {
		t.Skip("about 3 minutes: TOLLGATE_REGION_LONG=1 runs it")
	}
	w := startRegionWorld(t, twoRegions()...)
	startRegionPods(t, w, "compiled")
	a, b := w.Regions[0], w.Regions[1]
	key := fleetKey(t, "minutes")
	bound := float64(regionAverage*60 + regionBurst)
	phase := func(d time.Duration, flows ...RegionFlow) []RegionSample {
		l := w.Drive(d+time.Second, flows...)
		time.Sleep(d)
		l.Stop()
		return l.All()
	}
	var all []RegionSample
	steady := phase(75*time.Second, RegionFlow{a.Name, "/", []string{key}, 28}, RegionFlow{b.Name, "/", []string{key}, 12})
	all = append(all, steady...)
	// Steady state: from 10 s in (the shares settled within 3 intervals).
	var settled []RegionSample
	for _, s := range steady {
		if s.At.Sub(steady[0].At) >= 10*time.Second {
			settled = append(settled, s)
		}
	}
	n, at := MaxWindow(settled, 60*time.Second)
	figure(t, "steady_max_60s_window", "%d admitted (%.3f x the limit's %.0f), from %s", n, float64(n)/bound, bound, at.Format("15:04:05"))
	if float64(n) > 1.05*bound {
		t.Errorf("steady 70/30: %d admitted in a 60 s window, more than 1.05 x %.0f", n, bound)
	}
	all = append(all, phase(30*time.Second, RegionFlow{a.Name, "/", []string{key}, 40})...)
	all = append(all, phase(30*time.Second, RegionFlow{b.Name, "/", []string{key}, 40})...)
	all = append(all, phase(30*time.Second, RegionFlow{a.Name, "/", []string{key}, 28}, RegionFlow{b.Name, "/", []string{key}, 12})...)
	n, at = MaxWindow(all, 60*time.Second)
	figure(t, "moves_max_60s_window", "%d admitted (%.3f x %.0f), from %s", n, float64(n)/bound, bound, at.Format("15:04:05"))
	n5, at5 := MaxWindow(all, 5*time.Second)
	figure(t, "moves_max_5s_window", "%d admitted (%.3f x the limit's %d), from %s", n5, float64(n5)/float64(regionAverage*5+regionBurst), regionAverage*5+regionBurst, at5.Format("15:04:05"))
	noFailures(t, "the minutes", all)
}
