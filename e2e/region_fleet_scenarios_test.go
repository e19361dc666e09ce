package e2e

// The multi-region suite's scenarios run on Traefik fleets only
// (TestRegionFleet): commands per interval, the leader killed, a Redis
// killed.

import (
	"strconv"
	"testing"
	"time"
)

// scenarioPeerCommands: the commands each region sends its peers' Redis
// per interval are a small constant, whatever the request count: two
// windows of 6 s, one with 5 requests a second in the first region, one
// with 200 (a hot key and 80 others), compared on the links' counters.
func scenarioPeerCommands(t *testing.T, w *RegionWorld) {
	a, b := w.Regions[0], w.Regions[1]
	const win = 6 * time.Second
	light := fleetKey(t, "light")
	bKey := fleetKey(t, "b")
	measure := func(name string, flows ...RegionFlow) (map[string]ProxyStats, int) {
		l := w.Drive(win+10*time.Second, flows...)
		defer l.Stop()
		time.Sleep(1500 * time.Millisecond)
		s0, from := w.LinkStats(), time.Now()
		time.Sleep(win)
		s1, to := w.LinkStats(), time.Now()
		l.Stop()
		noFailures(t, name, l.All())
		d := map[string]ProxyStats{}
		for k, v := range s1 {
			d[k] = v.Sub(s0[k])
		}
		_, n := CountAdmitted(l.Samples(a.Name, from, to))
		if sk := l.Skipped(); sk > 0 {
			t.Logf("%s: %d ticks skipped (in-flight bound)", name, sk)
		}
		return d, n
	}
	lightD, lightN := measure("light", RegionFlow{a.Name, "/", []string{light}, 5}, RegionFlow{b.Name, "/", []string{bKey}, 2})
	var many []string
	for i := 0; i < 80; i++ {
		many = append(many, fleetKey(t, "k"+strconv.Itoa(i)))
	}
	heavyD, heavyN := measure("heavy",
		RegionFlow{a.Name, "/", []string{fleetKey(t, "hot")}, 40},
		RegionFlow{a.Name, "/", many, 160},
		RegionFlow{b.Name, "/", []string{bKey}, 2})
	secs := win.Seconds()
	ab, ba := a.Name+"->"+b.Name, b.Name+"->"+a.Name
	figure(t, "peer_requests_in_window", "light=%d heavy=%d (%v each, in %s)", lightN, heavyN, win, a.Name)
	for _, link := range []string{ab, ba} {
		for _, x := range []struct {
			name string
			d    ProxyStats
		}{{"light", lightD[link]}, {"heavy", heavyD[link]}} {
			figure(t, "peer_link_"+x.name+"_"+link, "commands/interval=%.2f bytes_up/interval=%.0f bytes_down/interval=%.0f conns=%d",
				float64(x.d.Commands)/secs, float64(x.d.BytesUp)/secs, float64(x.d.BytesDown)/secs, x.d.Accepted)
		}
	}
	dc := heavyD[ab].Commands - lightD[ab].Commands
	dn := heavyN - lightN
	figure(t, "peer_commands_per_request", "%.5f (%d more commands for %d more requests on %s)", float64(dc)/float64(max(dn, 1)), dc, dn, ab)
	if heavyN < 1000 {
		t.Errorf("the heavy window sent %d requests in %s, want at least 1000 (load not reached)", heavyN, a.Name)
	}
	perInterval := int64(3 * secs) // one GET per peer per interval, with room for a reconnection
	for _, link := range []string{ab, ba} {
		for _, d := range []ProxyStats{lightD[link], heavyD[link]} {
			if d.Commands > perInterval+2 {
				t.Errorf("%s: %d commands in %v, want at most about 3 per interval", link, d.Commands, win)
			}
			if d.Commands == 0 {
				t.Errorf("%s: no command in %v: the region did not read its peer", link, win)
			}
		}
	}
	if dc > 3 {
		t.Errorf("%s: %d commands with %d requests, %d with %d: the commands to a peer grow with the requests",
			ab, heavyD[ab].Commands, heavyN, lightD[ab].Commands, lightN)
	}
}

// scenarioLeaderKilled: the pod doing the first region's exchange is
// killed (SIGKILL). Another pod takes the lease within 3 intervals + 1 s;
// the shares are not lost meanwhile. Traefik pods only.
func scenarioLeaderKilled(t *testing.T, w *RegionWorld) {
	a := w.Regions[0]
	key := fleetKey(t, "leader")
	bk := bucketKey("api", key)
	l := w.Drive(40*time.Second, RegionFlow{a.Name, "/", []string{key}, 2 * regionAverage})
	defer l.Stop()
	time.Sleep(5 * time.Second)
	ls, err := leaders(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 {
		var names []string
		for _, p := range ls {
			names = append(names, p.Name())
		}
		t.Fatalf("%d pods of %s report tollgate_region_leader 1 (%v), want exactly one", len(ls), a.Name, names)
	}
	leader, ok := ls[0].(*traefikPod)
	if !ok {
		t.Skipf("pod %s cannot be killed", ls[0].Name())
	}
	lead0, err := a.Lead()
	if err != nil || lead0 == "" {
		t.Fatalf("GET %s = %q (%v) while %s leads", a.LeadKey(), lead0, err, leader.Name())
	}
	ppm0, n0, present := mustShare(t, a, bk)
	if !present || ppm0 <= ppmOf(a.Static()) {
		t.Fatalf("before the kill: %s's share %s, want above static", a.Name, shareString(ppm0, n0, present))
	}
	a.RemovePod(leader)
	time.Sleep(200 * time.Millisecond) // its requests in flight answered
	killed := time.Now()
	leader.kill()
	took, before := time.Duration(-1), time.Duration(0) // first poll that saw the new lease, the one before
	var lead1 string
	minPPM, minPresent := ppm0, true
	for time.Since(killed) < 8*time.Second {
		if took < 0 {
			since := time.Since(killed)
			if v, err := a.Lead(); err == nil && v != "" && v != lead0 {
				took, lead1 = since, v
			} else {
				before = since
			}
		}
		if p, _, pr := mustShare(t, a, bk); !pr || p < minPPM {
			minPPM, minPresent = p, pr
		}
		time.Sleep(100 * time.Millisecond)
	}
	end := time.Now()
	l.Stop()
	figure(t, "leader_takeover_after", "%v (last poll without it %v; lease %q -> %q)", took.Round(10*time.Millisecond),
		before.Round(10*time.Millisecond), lead0, lead1)
	figure(t, "leader_share_min_during_takeover", "%s (before %d)", shareString(minPPM, 0, minPresent), ppm0)
	if took < 0 || before >= 3*regionInterval+time.Second {
		t.Errorf("leader %s killed: the lease %s changed after %v, want within 3 intervals + 1 s", leader.Name(), a.LeadKey(), took)
	}
	ls, err = leaders(a)
	if err != nil || len(ls) != 1 {
		t.Errorf("after the takeover %d pods of %s report leader 1 (%v), want the survivor", len(ls), a.Name, err)
	}
	if !minPresent || minPPM <= ppmOf(a.Static()) {
		t.Errorf("leader killed: %s's share fell to %s during the takeover, want kept above static (%d before)",
			a.Name, shareString(minPPM, 0, minPresent), ppm0)
	}
	rate := rateOf(l.Samples(a.Name, end.Add(-4*time.Second), end), 4*time.Second)
	figure(t, "leader_admitted_per_s_after", "%.2f", rate)
	if rate < 0.9*regionAverage {
		t.Errorf("after the takeover %s admitted %.2f/s, want at least 90%% of %d", a.Name, rate, regionAverage)
	}
	noFailures(t, "leader killed", l.All())
}

// scenarioRedisKilled: the second region's Redis is killed (its clients,
// 5/s until then, now ask 15/s). Nothing fails (fail-open): its pods
// decide locally at its static share over the replicas; the first
// region's share above static is back to static within 5 intervals.
func scenarioRedisKilled(t *testing.T, w *RegionWorld) {
	a, b := w.Regions[0], w.Regions[1]
	l, key, bk := splitAboveStatic(t, w, "redis_killed", 30, 5, 40*time.Second)
	defer l.Stop()
	killed := time.Now()
	b.Redis.Kill()
	more := w.Drive(40*time.Second, RegionFlow{b.Name, "/", []string{key}, 10})
	defer more.Stop()
	back, last := time.Duration(-1), time.Duration(0) // static since, the last poll above it
	for time.Since(killed) < 9*time.Second {
		since := time.Since(killed)
		if p, _, pr := mustShare(t, a, bk); atStatic(a, p, pr) {
			if back < 0 {
				back = since
			}
		} else {
			back, last = -1, since
		}
		time.Sleep(100 * time.Millisecond)
	}
	end := time.Now()
	l.Stop()
	more.Stop()
	regionTimeline(t, w, l, "redis_killed", int(end.Sub(l.Start)/time.Second))
	figure(t, "redis_killed_share_static_after", "%v (last poll above %v; bound %v)", back.Round(10*time.Millisecond),
		last.Round(10*time.Millisecond), 5*regionInterval)
	noFailures(t, "Redis of "+b.Name+" killed", append(l.All(), more.All()...))
	if back < 0 || last >= 5*regionInterval {
		t.Errorf("Redis of %s killed: %s's share back to static after %v, want within 5 intervals (above static: 3 silent intervals and the exchange that acts)", b.Name, a.Name, back)
	}
	from := killed.Add(time.Second)
	bs := append(l.Samples(b.Name, from, end), more.Samples(b.Name, from, end)...)
	for _, s := range bs {
		if s.Decision != "local" {
			t.Errorf("Redis of %s down: %v, want decided locally", b.Name, s)
			break
		}
	}
	nb, _ := CountAdmitted(bs)
	secs := end.Sub(from).Seconds()
	allowed := b.Static()*regionAverage*secs + b.Static()*regionBurst
	figure(t, "redis_killed_local_admitted", "%s=%d in %.1fs (allowed %.0f: static share / %d replicas each)", b.Name, nb, secs, allowed, regionPods)
	if float64(nb) > 1.15*allowed {
		t.Errorf("Redis of %s down: %d admitted in %.1f s, want at most its static share of the limit (%.0f)", b.Name, nb, secs, allowed)
	}
}
