package tollgate

// A peer's report is trusted to say what the peer asks and holds, never
// to take from this region what its own demand needs up to its static
// share (shares.go).

import (
	"bufio"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// lyingPeer writes region b's report on rb every 50 ms until stop: b
// acknowledges a's latest report (ahead: a report a has not published
// yet) and claims the whole of key claimed and of every key a's report
// names, with a demand without end.
func lyingPeer(t *testing.T, ra, rb, claimed string, ahead int64, stop chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	do := func(nc net.Conn, br *bufio.Reader, args ...string) ([]string, error) {
		if err := nc.SetDeadline(time.Now().Add(time.Second)); err != nil {
			return nil, err
		}
		if _, err := nc.Write(appendCommand(nil, args[0], args[1:]...)); err != nil {
			return nil, err
		}
		return readValues(br)
	}
	na, err := net.Dial("tcp", ra)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := net.Dial("tcp", rb)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer na.Close()
		defer nb.Close()
		bra, brb := bufio.NewReader(na), bufio.NewReader(nb)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			v, err := do(na, bra, "GET", reportKeyOf("a"))
			if err != nil {
				return
			}
			body := "tollgate-region 1 b " + strconv.FormatInt(time.Now().UnixNano()/int64(200*time.Millisecond), 10) + "\n"
			keys := map[string]bool{claimed: true}
			if len(v) == 1 {
				if r, err := parseReport([]byte(v[0])); err == nil {
					body += "ack a " + strconv.FormatInt(r.seq+ahead, 10) + "\n"
					for k := range r.keys {
						keys[k] = true
					}
				}
			}
			for k := range keys {
				body += "k " + k + " 1000000000000 1000000 50000\n"
			}
			if _, err := do(nb, brb, "SET", reportKeyOf("b"), body); err != nil {
				return
			}
		}
	}()
}

// A peer whose report claims the whole of a key and a demand without end
// (for a key it names from the start, and for one it learns from this
// region's report) cuts nothing this region's clients ask for up to its
// static share: asking 60/s of a limit of 50/s, the region holds its
// static half and admits its 25/s. (It was cut to its floor: 2.5/s, a
// burst of 2.) A peer that acknowledges reports never published counts
// as acknowledging none: silent, and every share is static again.
func TestRegionLyingPeerCutsNothingBelowStatic(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		ahead int64
	}{
		{"acknowledging a's reports", 0},
		{"acknowledging reports a never published", 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ra, rb := startLiveRedis(t), startLiveRedis(t)
			class := uniqueName("region")
			a := handlerOn(t, ra, func(c *Config) {
				c.Class = class
				c.Average, c.Period, c.Burst = 50, "1s", 50
				c.Redis.Username = ""
				c.Region = &RegionConfig{Name: "a", Interval: "200ms", Peers: []PeerConfig{{Name: "b", Endpoints: []string{rb}}}}
			})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			lyingPeer(t, ra, rb, hashKey(class+"\x00h:claimed"), tc.ahead, stop, &wg)
			time.Sleep(600 * time.Millisecond) // a tracks the claimed key, at its floor while it has no traffic
			last := map[string]int{}
			var mu sync.Mutex
			var drivers sync.WaitGroup
			for _, key := range []string{"claimed", "learned"} {
				key := key
				drivers.Add(1)
				go func() {
					defer drivers.Done()
					_, n := drive(a, key, 16*time.Millisecond, 3*time.Second) // about 60/s
					mu.Lock()
					last[key] = n
					mu.Unlock()
				}()
			}
			drivers.Wait()
			shares := map[string]int64{}
			for _, key := range []string{"claimed", "learned"} {
				shares[key] = shareIn(t, ra, hashKey(class+"\x00h:"+key))
			}
			close(stop)
			wg.Wait()
			for _, key := range []string{"claimed", "learned"} {
				t.Logf("%s: share %d, %d admitted in the last second", key, shares[key], last[key])
				if shares[key] != 0 && shares[key] < 500000 || last[key] < 20 {
					t.Errorf("%s: share %d, %d admitted in the last second of 60/s asked; want at least the static share (500000) and 20 (of its 25/s)", key, shares[key], last[key])
				}
			}
		})
	}
}

// A key first seen in a peer's report, whatever that peer asks, holds the
// static share here until this region's demand for it is counted (from
// the next exchange: its hash is written, the script counts it); then it
// falls to what that demand needs. (It fell to the floor at once, before
// anything said this region asks less.)
func TestRegionUnmeasuredKeyHoldsStatic(t *testing.T) {
	rs, err := compileRegion(&RegionConfig{Name: "a", Peers: []PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}, redisSettings{addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	const k = "tg{unmeasured}"
	x := &exchanger{tracked: map[string]*keyShares{}, views: []peerView{{rep: &report{keys: map[string]reportKey{k: {demand: 1e9, share: ppm, rate: 20}}}}}}
	op, _ := x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 0, 0, false, 100, 0)
	if op.share != rs.static || x.tracked[k] == nil {
		t.Errorf("first seen in a peer's report: share %d (tracked %v), want static (%d), tracked so that its demand is counted", op.share, x.tracked[k] != nil, rs.static)
	}
	op, _ = x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 0, 20, false, 101, 0)
	if op.share != rs.floor {
		t.Errorf("counted, no demand here: share %d, want the floor (%d)", op.share, rs.floor)
	}
}
