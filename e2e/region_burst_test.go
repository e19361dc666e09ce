package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRegionFleetColdBurst tries regions the way a retry loop arrives:
// two regions of just-started Traefik replicas (no request served yet),
// 600 concurrent requests for one fresh key (150 at each replica, above its
// pool of 64), half in each region; then
// the first region's Redis restarted (its data gone) and the same burst
// for another fresh key. Each region may admit its static share of the
// burst (10 of 20) plus what its share of the rate refills while the
// burst lasts; nothing fails (fail-open), and the decision header says
// who decided each request.
func TestRegionFleetColdBurst(t *testing.T) {
	needTraefik(t)
	w := startRegionWorld(t, twoRegions()...)
	startRegionFleets(t, w)
	a := w.Regions[0]
	burst := func(what string) {
		key := fleetKey(t, what)
		type result struct {
			region, decision string
			status           int
			err              error
		}
		results := make(chan result, 600)
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < 600; i++ {
			r := w.Regions[i%2]
			p := r.Pods()[(i/2)%len(r.Pods())]
			wg.Add(1)
			go func(region string, p RegionPod) {
				defer wg.Done()
				rep := p.Do("/", key)
				res := result{region: region, status: rep.Status, err: rep.Err}
				if rep.Header != nil {
					res.decision = rep.Header.Get("X-Tollgate-Decision")
				}
				results <- res
			}(r.Name, p)
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(results)
		admitted := map[string]int{}
		decisions := map[string]int{}
		failed := 0
		for res := range results {
			if res.err != nil || res.status >= 500 {
				failed++
			}
			if res.status == 200 {
				admitted[res.region]++
			}
			decisions[res.region+":"+res.decision]++
		}
		var ds []string
		for d, n := range decisions {
			ds = append(ds, fmt.Sprintf("%s=%d", d, n))
		}
		sort.Strings(ds)
		figure(t, what, "admitted %v in %v; decisions %s; failed %d", admitted, elapsed.Round(time.Millisecond), strings.Join(ds, " "), failed)
		if failed != 0 {
			t.Errorf("%s: %d of 600 failed", what, failed)
		}
		for _, r := range w.Regions {
			// A region's share: half the burst (10) and half the rate
			// (10/s) over the burst, one request of slack for the
			// refill's rounding.
			limit := int(r.Static()*regionBurst + r.Static()*regionAverage*elapsed.Seconds() + 1)
			if admitted[r.Name] > limit {
				t.Errorf("%s: %s admitted %d, more than its share of the burst and of the rate over %v (%d)", what, r.Name, admitted[r.Name], elapsed.Round(time.Millisecond), limit)
			}
			if admitted[r.Name] < int(r.Static()*regionBurst) {
				t.Errorf("%s: %s admitted %d, less than its share of the burst (%.0f)", what, r.Name, admitted[r.Name], r.Static()*regionBurst)
			}
		}
	}
	burst("cold_burst")
	if err := a.Redis.Restart(); err != nil {
		t.Fatal(err)
	}
	burst("burst_after_restart")
}
