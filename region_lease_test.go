package tollgate

// The registry's region exchanges (registry.go: exchangerFor): each its
// own holder of its region's lease.

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Two exchangers of one region in one process (its Redis written once as
// 127.0.0.1 and once as localhost: two backends, two exchangers) contend
// for the lease like two pods: one leads. (With the process's identity as
// the holder, both held it for good: both led every interval.)
func TestRegionTwoExchangersOneLease(t *testing.T) {
	own, peer := redistest.Start(t), redistest.Start(t)
	class := uniqueName("region")
	mk := func(addr string) *Tollgate {
		return handlerOn(t, addr, func(c *config.Config) {
			c.Class = class
			c.Redis.Username = ""
			c.Region = &config.RegionConfig{Name: "a", Interval: "200ms", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
		})
	}
	x := exchangerOf(mk(own))
	y := exchangerOf(mk("localhost:" + own[strings.LastIndex(own, ":")+1:]))
	if x == y {
		t.Fatal("one exchanger for both spellings of the Redis")
	}
	time.Sleep(600 * time.Millisecond) // both loops have run a round
	// The lease's holder leads until a renewal comes late: both may then
	// lead for an interval, seldom. Both leading half the time is one
	// lease held by two.
	both, led := 0, 0
	for i := 0; i < 10; i++ {
		lx, ly := x.Stats().Leading, y.Stats().Leading
		if lx && ly {
			both++
		}
		if lx || ly {
			led++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if both >= 5 || led < 5 {
		t.Errorf("of 10 samples half an interval apart, both exchangers led in %d, one of them in %d; want one leader most of the time", both, led)
	}
}
