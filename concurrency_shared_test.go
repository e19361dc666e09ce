package tollgate

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Two caps of one class, with other maxDurations (two routers sharing a
// class, or a rolling update from 10m to 30s), share the slots' key and
// hold max between them: neither sweeps the other's slots as too far
// ahead, nor shortens the key's expiry. Seen before: 4 in flight under
// max 2.
func TestCapsOfOtherMaxDurationsShareTheirSlots(t *testing.T) {
	addr := redistest.Start(t)
	class := fmt.Sprintf("shared-%d", atomic.AddInt64(&backendSeq, 1))
	long, short := newGate(), newGate()
	hl := capHandler(t, addr, long, config.Concurrency{Max: 2, Key: "class", MaxDuration: "10m"}, func(c *config.Config) { c.Class = class })
	hs := capHandler(t, addr, short, config.Concurrency{Max: 2, Key: "class", MaxDuration: "30s"}, func(c *config.Config) { c.Class = class })
	recs, done := burst(hl, long, 2, func(i int) string { return fmt.Sprint("c", i) })
	waitArrived(t, long, 2)
	zkey := bucket.KeyPrefix + "c:" + class + "}}c"
	if n := slots(t, addr, zkey); n != "2" {
		t.Fatalf("the 10m cap holds %s slots, want 2", n)
	}
	ttl := redistest.Do(t, addr, "PTTL", zkey)[0]
	more, moreDone := burst(hs, short, 2, func(i int) string { return fmt.Sprint("d", i) })
	waitRefused(t, more, 2)
	for i, r := range more {
		if r.Code != http.StatusTooManyRequests {
			t.Errorf("request %d through the 30s cap with the 10m cap's 2 slots held: %d, want 429", i, r.Code)
		}
	}
	if n := slots(t, addr, zkey); n != "2" {
		t.Errorf("%s slots held after the 30s cap's takes, want the 10m cap's 2", n)
	}
	before, _ := strconv.Atoi(ttl)
	if after, _ := strconv.Atoi(redistest.Do(t, addr, "PTTL", zkey)[0]); after < before-5000 {
		t.Errorf("the slots' key expiry went from %d to %d ms: a take shortened it", before, after)
	}
	close(long.open)
	close(short.open)
	done.Wait()
	moreDone.Wait()
	_ = recs
}

// The take script sweeps slots further ahead than the longest hold a cap
// may ask and a second: its literal is maxHoldDuration's.
func TestSweepHorizonIsTheLongestHold(t *testing.T) {
	want := "now + " + strconv.FormatInt(int64((config.MaxHoldDuration+time.Second)/time.Microsecond), 10) + ")"
	if !strings.Contains(bucket.BucketScript, want) {
		t.Errorf("BucketScript does not sweep past %q (maxHoldDuration %v and a second)", want, config.MaxHoldDuration)
	}
}
