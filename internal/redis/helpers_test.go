package redis

// Helpers of the client's tests: a script and its prepared call, pools
// and topologies on fake servers (redistest.Fake), and bounded waits.

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// testScript is the script of the tests' checks; a Fake answers its
// SCRIPT LOAD with its SHA1, and every call of it with its canned reply.
var testScript = NewScript("return redis.call('TIME')")

// testKey is a client key as the plugin makes them: its hash tag is the
// key's slot.
const testKey = "tg{0123456789}"

// command is a call of testScript with one key, keyLen bytes long, and
// three arguments: one bucket, as the plugin's for one policy.
func command(keyLen int) *Command {
	return NewCommand(testScript, []int{keyLen}, []string{":p"}, []string{"6", "5", "1"}, nil)
}

// clientOn returns a pool of poolSize connections to f, with checks of
// timeout, once its first connection is open.
func clientOn(t *testing.T, f *redistest.Fake, timeout time.Duration, poolSize int) *Pool {
	t.Helper()
	c := NewPool(Options{Addr: f.Addr(), Timeout: timeout, PoolSize: poolSize, Script: testScript})
	c.Warm()
	waitConns(t, c, 1)
	return c
}

// waitConns waits until c has n connections open.
func waitConns(t *testing.T, c *Pool, n int) {
	t.Helper()
	redistest.WaitFor(t, func() bool { return c.OpenConns() == n }, fmt.Sprintf("%d connections open", n))
}

// awaitShort sends a call of 5 ms on cn and waits for it: how long it took,
// and its error.
func awaitShort(t *testing.T, cn *rconn) (time.Duration, error) {
	t.Helper()
	short := newCall()
	start := time.Now()
	if err := send(cn, nil, short, pingCmd, nil, nil, "", 5*time.Millisecond, time.Now); err != nil {
		t.Fatal(err)
	}
	cn.mu.Lock()
	await(cn, short)
	cn.mu.Unlock()
	return time.Since(start), short.err
}

// listen accepts loopback connections for the test, each served by
// serve on a goroutine of its own, and returns the address.
func listen(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l.Addr().String()
}

// silentConn is a connection to a server that reads and never answers.
func silentConn(t *testing.T) *rconn {
	t.Helper()
	addr := listen(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	cn := newConn(nc)
	startReader(cn, nil)
	return cn
}

// fakeNode is a fake cluster node or sentinel: it answers the admin
// commands with canned replies (CLIENT SETNAME with +OK).
func fakeNode(t *testing.T, replies map[string]string) string {
	t.Helper()
	return redistest.StartFakeWith(t, "", replies).Addr()
}

// topoClient is a Client of a topology (Sentinel or Cluster) at
// endpoints that has learnt nothing yet: New's first refresh not run.
func topoClient(mode int, endpoints ...string) *Client {
	rc := &Client{
		opts: Options{Mode: mode, Endpoints: endpoints, MasterName: "mymaster", Timeout: 50 * time.Millisecond, PoolSize: 4},
		now:  clock.Mono, lastUsed: clock.Mono(),
	}
	rc.topo.nodes = map[string]*Pool{}
	return rc
}

// ownAllSlots makes the node at addr own every slot of rc's map.
func ownAllSlots(rc *Client, addr string) {
	rc.topo.mu.Lock()
	defer rc.topo.mu.Unlock()
	rc.topo.slots = make([]*Pool, clusterSlots)
	for i := range rc.topo.slots {
		rc.topo.slots[i] = rc.node(addr, true)
	}
}

// noRefresh keeps rc from refreshing its topology for an hour.
func noRefresh(rc *Client) {
	atomic.StoreInt64(&rc.topo.lastRefresh, clock.Mono()+int64(time.Hour))
}
