package regions

// A peer's report is trusted to say what the peer asks and holds, never
// to take from this region what its own demand needs up to its static
// share (shares.go).

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// lyingPeer writes region b's report on rb every 50 ms until the test
// ends: b acknowledges a's latest report (ahead: a report a has not
// published yet) and claims the whole of key claimed and of every key
// a's report names, with a demand without end.
func lyingPeer(t *testing.T, ra, rb, claimed string, ahead int64) {
	t.Helper()
	na, nb := peerClient(ra, time.Second), peerClient(rb, time.Second)
	var stop int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for atomic.LoadInt32(&stop) == 0 {
			time.Sleep(50 * time.Millisecond)
			v, err := na.SideDo(reportKeyOf("a"), redis.AppendCommand(nil, "GET", reportKeyOf("a")), 1)
			if err != nil {
				continue
			}
			body := "tollgate-region 1 b " + strconv.FormatInt(time.Now().UnixNano()/int64(testIV), 10) + "\n"
			keys := map[string]bool{claimed: true}
			if len(v[0]) == 1 {
				if r, err := parseReport([]byte(v[0][0])); err == nil {
					body += "ack a " + strconv.FormatInt(r.seq+ahead, 10) + "\n"
					for k := range r.keys {
						keys[k] = true
					}
				}
			}
			for k := range keys {
				body += "k " + k + " 1000000000000 1000000 50000\n"
			}
			_, _ = nb.SideDo(reportKeyOf("b"), redis.AppendCommand(nil, "SET", reportKeyOf("b"), body), 1)
		}
	}()
	t.Cleanup(func() {
		atomic.StoreInt32(&stop, 1)
		wg.Wait()
	})
}

// A peer whose report claims the whole of a key and a demand without end
// (for a key it names from the start, and for one it learns from this
// region's report) cuts nothing this region's clients ask for up to its
// static share: asking 60/s of a limit of 50/s, the region holds its
// static half. (It was cut to its floor: 2.5/s, a burst of 2.) A peer that
// acknowledges reports never published counts as acknowledging none:
// silent, and every share is static again. Sampled every 50 ms over the
// last second of 3 s of traffic.
func TestRegionLyingPeerCutsNothingBelowStatic(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		ahead int64
	}{
		{"acknowledging a's reports", 0},
		{"acknowledging reports a never published", 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ra, rb := redistest.Start(t), redistest.Start(t)
			a := exchangerOn(twoRegions("a", "b", testIV), ownClient(ra), peerClient(rb, time.Second))
			run(t, a)
			const claimed, learned = "tg{claimed}", "tg{learned}"
			lyingPeer(t, ra, rb, claimed, tc.ahead)
			time.Sleep(600 * time.Millisecond) // a tracks the claimed key, at its floor while it has no traffic
			var drivers sync.WaitGroup
			for _, key := range []string{claimed, learned} {
				key := key
				drivers.Add(1)
				go func() {
					defer drivers.Done()
					newPresser(a, ra, 50).drive(key, 16*time.Millisecond, 3*time.Second) // about 60/s
				}()
			}
			time.Sleep(2 * time.Second)
			least := map[string]int64{claimed: ppm, learned: ppm}
			for i := 0; i < 20; i++ {
				for _, key := range []string{claimed, learned} {
					s := shareIn(t, ra, key)
					if s == 0 {
						s = 500000 // untracked: static
					}
					if s < least[key] {
						least[key] = s
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			drivers.Wait()
			for _, key := range []string{claimed, learned} {
				t.Logf("%s: least share %d in the last second", key, least[key])
				if least[key] < 500000 {
					t.Errorf("%s: share down to %d in the last second of 60/s asked of 50/s; want at least the static share (500000)", key, least[key])
				}
			}
		})
	}
}
