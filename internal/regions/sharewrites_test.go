package regions

// The exchange's writes of shares: what Redis refuses is neither counted
// as applied nor published as applied.

import (
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// shrinkWorld is region a (on own, its Redis at addr) holding 0.95 of
// keys of a limit of 20 a second, each tracked in its report with no
// demand, and its peer b pressing on them at its floor: a's next exchange
// shrinks every key to its floor. It returns an exchanger of a (its loop
// not started), its settings and the slot to exchange.
func shrinkWorld(t *testing.T, own *redis.Client, addr string, keys []string) (*Exchanger, *Settings, int64) {
	t.Helper()
	rb := redistest.Start(t)
	rs := twoRegions("a", "b", testIV)
	x := exchangerOn(rs, own, peerClient(rb, time.Second))
	s := time.Now().UnixNano()/int64(rs.Interval) + 1
	seq := strconv.FormatInt(s-1, 10)
	mine, theirs := "tollgate-region 1 a "+seq+"\n", "tollgate-region 1 b "+seq+"\nack a "+seq+"\n"
	for _, k := range keys {
		redistest.Do(t, addr, "HSET", shareKey(k), "s", "950000")
		mine += "k " + k + " 0 950000 20000\n"
		theirs += "k " + k + " 40000 50000 20000\n" // 40/s asked: twice the limit
	}
	redistest.Do(t, addr, "SET", reportKeyOf("a"), mine)
	redistest.Do(t, rb, "SET", reportKeyOf("b"), theirs)
	return x, rs, s
}

// publishedShares reads region a's report from addr.
func publishedShares(t *testing.T, addr string) map[string]reportKey {
	t.Helper()
	v := redistest.Do(t, addr, "GET", reportKeyOf("a"))
	if len(v) != 1 {
		t.Fatal("region a published no report")
	}
	r, err := parseReport([]byte(v[0]))
	if err != nil {
		t.Fatal(err)
	}
	return r.keys
}

// A region on a Cluster tracks keys of several slots on one node: their
// shares are written, one transaction per slot. (In one transaction per
// node, the node refused it whole, CROSSSLOT, the refusal was read as a
// reply, the exchange counted as done, and the report published shares
// never applied: a peer grew into room this region never gave up.)
func TestRegionClusterWritesSharesOfSeveralSlots(t *testing.T) {
	addr := redistest.StartCluster(t)
	keys := []string{"tg{slots-one}", "tg{slots-two}", "tg{slots-three}"}
	if redis.KeySlot(keys[0]) == redis.KeySlot(keys[1]) {
		t.Fatal("the test's keys share a slot")
	}
	own := redis.New(redis.Options{Mode: redis.Cluster, Endpoints: []string{addr}, Timeout: time.Second, PoolSize: 2}, redis.Hooks{})
	own.Start() // learns the slots off the caller's clock
	for i := 0; i < 250 && own.NodeFor(keys[0]) == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if own.NodeFor(keys[0]) == nil {
		t.Fatal("the cluster's slots are not known after 5 s")
	}
	x, rs, s := shrinkWorld(t, own, addr, keys)
	ok := x.exchange(rs, s, clock.Mono())
	pub := publishedShares(t, addr)
	for _, k := range keys {
		if got := shareIn(t, addr, k); got != rs.Floor || pub[k].share != rs.Floor {
			t.Errorf("slot %d: share %d in Redis, %d published; want both the floor, %d", redis.KeySlot(k), got, pub[k].share, rs.Floor)
		}
	}
	if !ok {
		t.Errorf("the exchange counted as failed")
	}
}

// A write refused inside the transaction (here another type at one key's
// share hash) fails that write: the exchange counts as failed, and the
// report publishes that key's share as it still is, not as decided; the
// other keys' writes stand. (The refusal inside EXEC was read as a reply.)
func TestRegionRefusedShareWriteIsNotPublished(t *testing.T) {
	addr := redistest.Start(t)
	good, bad := "tg{refused-good}", "tg{refused-bad}"
	x, rs, s := shrinkWorld(t, ownClient(addr), addr, []string{good, bad})
	redistest.Do(t, addr, "DEL", shareKey(bad))
	redistest.Do(t, addr, "SET", shareKey(bad), "not a hash")
	ok := x.exchange(rs, s, clock.Mono())
	pub := publishedShares(t, addr)
	if got := shareIn(t, addr, good); got != rs.Floor || pub[good].share != rs.Floor {
		t.Errorf("the key written: share %d in Redis, %d published; want the floor, %d", got, pub[good].share, rs.Floor)
	}
	if pub[bad].share != 950000 {
		t.Errorf("the key whose write Redis refused: published at %d, want 950000 (its share before: the shrink was not applied)", pub[bad].share)
	}
	if ok {
		t.Errorf("an exchange whose write Redis refused counted as done")
	}
}
