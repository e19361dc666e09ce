package regions

// An exchanger: one region configuration's exchange in this process, its
// state and figures, and the keys it reads and writes (exchange.go runs
// it).

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// Bounds of the exchangers.
const (
	exchangerStale = 30 * time.Second
	maxHotRead     = 4096 // notes the leader reads per interval
	// retireBelow: a key whose every region asks for at most this part
	// of its static share of the rate goes back to static and is no
	// longer tracked.
	retireBelow = 0.5
	// retireQuiet: a key that has not pressed here for this many
	// intervals retires once every region asks for at most its static
	// share, so that keys that never press do not hold the tracked set.
	retireQuiet = 12
	// demandWeight is the weight of the last interval in a key's demand,
	// an exponential average: a client that moves region is followed
	// within about three intervals.
	demandWeight = 0.7
)

// Exchanger is one region configuration's exchange in this process.
type Exchanger struct {
	key   string
	own   *redis.Client
	peers []*redis.Client // in rs.Peers' order
	id    string          // the lease's holder: this Exchanger's, not the process's

	mu sync.Mutex // guards rs
	rs *Settings

	bound   int64 // monotonic ns of the last New that used it
	running int32 // 1 while loop runs
	dropped int32 // 1 once the registry forgot it
	lastNew func() int64

	notes Notes // the pods' requests' part (notes.go)

	// The leader's state, used by the loop's goroutine only.
	leadSlot int64 // the slot of the last exchange led; 0: not leading
	leadAt   int64 // monotonic ns of that exchange
	tracked  map[string]*keyShares
	views    []peerView
	sent     []sentReport // the last reports published (peers.go)
	reading  []int32      // by peer, 1 while a read of its report is out (atomic)

	// Counters, for the metrics (atomic).
	leading     int32
	exchangesOK int64
	exchangesKO int64
	trackedN    int64
	reportBytes int64
	peerUp      []int32
}

// peerView is the leader's knowledge of a peer.
type peerView struct {
	rep    *report // the last report read; nil: none
	readAt int64   // monotonic ns of the exchange that read it
	heard  int64   // monotonic ns its report last changed
	acked  int64   // monotonic ns it last acknowledged one of our recent reports
}

// Drop ends x's loop (at its next round): its configuration is gone.
func (x *Exchanger) Drop() { atomic.StoreInt32(&x.dropped, 1) }

// Bound returns when a New last bound x (monotonic ns).
func (x *Exchanger) Bound() int64 { return atomic.LoadInt64(&x.bound) }

// Own returns this region's Redis.
func (x *Exchanger) Own() *redis.Client { return x.own }

// Notes returns where requests note the keys that pressed.
func (x *Exchanger) Notes() *Notes { return &x.notes }

// Settings returns the latest settings.
func (x *Exchanger) Settings() *Settings {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rs
}

// Stats are an Exchanger's figures, for the metrics.
type Stats struct {
	Leading     bool
	OK, Failed  int64 // exchanges led
	Tracked     int64
	ReportBytes int64
	PeerUp      []bool // by peer
}

// Stats returns x's figures.
func (x *Exchanger) Stats() Stats {
	st := Stats{Leading: atomic.LoadInt32(&x.leading) == 1, OK: atomic.LoadInt64(&x.exchangesOK), Failed: atomic.LoadInt64(&x.exchangesKO),
		Tracked: atomic.LoadInt64(&x.trackedN), ReportBytes: atomic.LoadInt64(&x.reportBytes)}
	for i := range x.peerUp {
		st.PeerUp = append(st.PeerUp, atomic.LoadInt32(&x.peerUp[i]) == 1)
	}
	return st
}

// Stale reports whether the loop should end: dropped, or not bound by
// New while other middlewares were built since (exchangerStale).
func (x *Exchanger) Stale() bool {
	return atomic.LoadInt32(&x.dropped) == 1 || x.lastNew()-atomic.LoadInt64(&x.bound) > int64(exchangerStale)
}

// Keys of a region in its own Redis; one hash tag, so one Cluster slot.
func leadKey(region string) string { return "tg{rg:" + region + "}:lead" }

func hotKey(region string) string { return "tg{rg:" + region + "}:hot" }

func reportKeyOf(region string) string { return "tg{rg:" + region + "}:report" }

// shareKey is the hash beside a bucket that holds its share and demand.
func shareKey(bucket string) string { return bucket + "}s" }
