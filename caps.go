package tollgate

// Concurrency caps (Config.Concurrency): at most max requests in flight
// across every replica, per client or per owner as a whole.
//
// A cap is one more policy of its owner's sets (after the owner's
// quotas), charged in the same script call as the rates, all or nothing:
// its key is a sorted set of slots, <client or class key><owner
// suffix>}c, each slot a member scored by its deadline (Redis's TIME +
// maxDuration), swept by every take, so that a pod that dies holding
// slots holds them at most maxDuration. The member is the pod's own
// (18 digits: a random start to the process, then a counter), written into
// the call after the key (key#member), so that a pod gives back a slot
// whose take's reply it never read. A give-back (its own script,
// bucket.go) removes the member or, when the take has not run yet,
// leaves a tombstone (}c}r) that the take honours; it is sent when next
// returns, before the handler does (answer.go), and queued on the charge
// queue (costs.go) when Redis does not take it then. A set with a cap is
// called whole (redis.Command.Whole): the caller writes every key
// (policyset.go, decide.go; plugin.go serves a capped top level alone).
//
// Redis unavailable, each pod caps the key itself at max over the pods
// counted (at least 1), in its local store (fallback.go); failureMode
// closed answers 503 as for rates. Here: the slots' members; compiling caps:
// internal/config.

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand"
	"strconv"
	"sync/atomic"
)

const (
	memberLen = 18 // heldBase's digits
	// concRetryMS is a full cap's wait: slots free as requests end, so a
	// client is told to come back in a second (Retry-After: 1).
	concRetryMS = 1000
)

// heldBase and heldSeq make this process's slot members: 18 digits, a
// random start to the process, then a counter. Two pods' members meet
// only when their starts lie closer than the requests they count (pods
// behind one balancer count alike: a start drawn from a few digits, the
// counter beside it, would have them share every slot and give back each
// other's), and a restarted pod never gives back another's slot.
var (
	heldBase = newHeldBase()
	heldSeq  int64
)

// newHeldBase returns heldBase: at random from 1e17 to 1e18 - 1e12 (its
// counter's 1e12 members stay 18 digits).
func newHeldBase() int64 {
	const span = 900000000000000000 - 1000000000000
	b := make([]byte, 8)
	var n int64
	if _, err := rand.Read(b); err == nil {
		n = int64(binary.BigEndian.Uint64(b) % span)
	} else {
		n = mrand.Int63n(span) // seeded at random by the runtime
	}
	return 100000000000000000 + n
}

// newMember returns a new slot member of this process.
func newMember() string {
	return strconv.FormatInt(heldBase+atomic.AddInt64(&heldSeq, 1)%1000000000000, 10)
}
