package tollgate

// The exchange's own resources: its lease and its reads of the peers.

import (
	"strings"
	"testing"
)

// Two exchangers of one region in one process (its Redis written once as
// 127.0.0.1 and once as localhost: two backends, two exchangers) contend
// for the lease like two pods: one leads. (With the process's identity as
// the holder, both held it for good.)
func TestRegionTwoExchangersOneLease(t *testing.T) {
	own, peer := startLiveRedis(t), startLiveRedis(t)
	class := uniqueName("region")
	mk := func(addr string) *exchanger {
		return exchangerOf(handlerOn(t, addr, func(c *Config) {
			c.Class = class
			c.Redis.Username = ""
			// The loops sleep to the hour: the test leads itself.
			c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: []PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
		}))
	}
	x := mk(own)
	y := mk("localhost:" + own[strings.LastIndex(own, ":")+1:])
	if x == y {
		t.Fatal("one exchanger for both spellings of the Redis")
	}
	for round := 0; round < 2; round++ { // taken, then renewed
		lx, ly := x.lead(x.settings()), y.lead(y.settings())
		if lx == ly {
			t.Errorf("round %d: first exchanger leads %v, second %v; want exactly one", round, lx, ly)
		}
	}
}
