package tollgate

// A concurrency cap's shape and its slots' members (concurrency.go says
// how caps are taken and given back).

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand"
	"strconv"
	"sync/atomic"
	"time"
)

// CapShape is a compiled Concurrency.
type CapShape struct {
	Max   int64
	Class string // the owner's class key (key: class): tg{c:<class>}; "" per client
	DurUS int64  // maxDuration, µs
}

const (
	maxConcurrency     = 1000000
	defaultMaxDuration = 60 * time.Second
	maxHoldDuration    = 24 * time.Hour
	memberLen          = 18 // heldBase's digits
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
