package regions

// What the exchange's tests run on: exchangers on live redis-servers
// (internal/redistest), each with its own clients as the plugin builds
// them; a pod's requests pressing a key (presser); links between regions
// that can be cut.

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// testIV is the interval of the exchanges the tests run.
const testIV = 200 * time.Millisecond

// ownClient is a region's own Redis at addr, as the plugin builds it.
func ownClient(addr string) *redis.Client {
	return redis.New(redis.Options{Addr: addr, Timeout: time.Second, PoolSize: 2}, redis.Hooks{})
}

// peerClient is a peer's Redis at addr, read within timeout: the side
// connection only, as the plugin builds it.
func peerClient(addr string, timeout time.Duration) *redis.Client {
	return redis.New(redis.Options{Addr: addr, Timeout: timeout}, redis.Hooks{})
}

// twoRegions are the settings of region name with one peer of the same
// weight, exchanging every iv.
func twoRegions(name, peer string, iv time.Duration) *Settings {
	return NewSettings(name, iv, 1, []string{peer}, []int64{1}, name+"/"+peer)
}

var exchangers int64

// exchangerOn is the exchange of rs on own and peers, its own lease
// holder, never stale; its loop not started (run).
func exchangerOn(rs *Settings, own *redis.Client, peers ...*redis.Client) *Exchanger {
	id := "test-" + strconv.FormatInt(atomic.AddInt64(&exchangers, 1), 10)
	return NewExchanger(rs, own, peers, id, func() int64 { return 0 })
}

// run starts x's loop until the test ends, and waits then (a few seconds
// at most) for it to stop.
func run(t *testing.T, x *Exchanger) {
	t.Helper()
	x.Bind(x.Settings(), clock.Mono())
	t.Cleanup(func() {
		x.Drop()
		for i := 0; i < 250 && atomic.LoadInt32(&x.running) == 1; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// runningPair runs regions a (its Redis at ra) and b (at rb), each with
// the other as its peer, read at aPeer and bPeer (rb and ra, or links to
// them).
func runningPair(t *testing.T, ra, rb, aPeer, bPeer string) (a, b *Exchanger) {
	t.Helper()
	a = exchangerOn(twoRegions("a", "b", testIV), ownClient(ra), peerClient(aPeer, time.Second))
	b = exchangerOn(twoRegions("b", "a", testIV), ownClient(rb), peerClient(bPeer, time.Second))
	run(t, a)
	run(t, b)
	return a, b
}

// pressLua is the bucket script's part on a share hash (the plugin's
// bucket.go): a key whose hash holds a share counts the tokens asked (n)
// and holds the limit's rate (g).
const pressLua = `local v = tonumber(redis.call('HGET', KEYS[1], 's'))
if v and v >= 1 and v <= 1000000 then
  redis.call('HINCRBY', KEYS[1], 'n', ARGV[1])
  redis.call('HSET', KEYS[1], 'g', ARGV[2])
end
return 1`

// presser is a pod's requests in region x that press against their
// share, as the plugin makes them: each one's token counted beside its
// bucket once the bucket is tracked, and noted (Redis decided it).
type presser struct {
	x    *Exchanger
	rc   *redis.Client // the pod's own connection to the region's Redis
	rate string        // the limit's, tokens per second
}

// newPresser presses in region x, on its Redis at addr, a limit of rate
// tokens a second.
func newPresser(x *Exchanger, addr string, rate int) *presser {
	return &presser{x: x, rc: ownClient(addr), rate: strconv.Itoa(rate)}
}

// ask is one request for bucket.
func (p *presser) ask(bucket string) {
	sk := shareKey(bucket)
	_, _ = p.rc.SideDo(sk, redis.AppendCommand(nil, "EVAL", pressLua, "1", sk, "1", p.rate), 1)
	p.x.Notes().Note(bucket, 1, false)
}

// drive asks for bucket every gap for d.
func (p *presser) drive(bucket string, gap, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(gap) {
		p.ask(bucket)
	}
}

// shareIn reads a bucket's share in a region's Redis, ppm; 0: untracked.
func shareIn(t *testing.T, addr, bucket string) int64 {
	t.Helper()
	v := redistest.Do(t, addr, "HGET", shareKey(bucket), "s")
	if len(v) != 1 {
		return 0
	}
	n, _ := strconv.ParseInt(v[0], 10, 64)
	return n
}

// link forwards a loopback port to addr until cut.
type link struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newLink(t *testing.T, addr string) *link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &link{l: l}
	t.Cleanup(func() { k.Cut(); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			k.mu.Lock()
			if k.cut {
				k.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				k.mu.Unlock()
				c.Close()
				continue
			}
			k.conns = append(k.conns, c, up)
			k.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return k
}

func (k *link) Addr() string { return k.l.Addr().String() }

// Cut closes every connection and refuses new ones.
func (k *link) Cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = true
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
}

// silentPeer is a peer that accepts connections and reads what it is
// sent (read: true) or nothing, never answering; closed at the test's end.
func silentPeer(t *testing.T, read bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			if read {
				go func() {
					b := make([]byte, 512)
					for {
						if _, err := c.Read(b); err != nil {
							return
						}
					}
				}()
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}
