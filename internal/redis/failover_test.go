package redis

// The first burst after a Redis Cluster failover (CLUSTER FAILOVER on a
// real two-node cluster): the old primary's connections are idle (proven
// by a PING), it answers MOVED, the heir's pool is new, and a topology
// refresh runs meanwhile. Every check is decided by Redis.

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// failoverScript writes its key (a replica answers MOVED) and answers a
// decision.
var failoverScript = NewScript("redis.call('INCR', KEYS[1]) return {ok='1 3 0 2000'}")

// clusterPair is a two-node Redis Cluster: one primary owning every slot
// and its replica.
type clusterPair struct {
	addrs [2]string
	ids   [2]string
}

// startClusterPair starts the two nodes (node timeout 1 s, as the drills'),
// node 0 the primary, and waits until node 1 replicates it.
func startClusterPair(t *testing.T) *clusterPair {
	t.Helper()
	p := &clusterPair{}
	for i := range p.addrs {
		p.addrs[i] = redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf",
			"--cluster-node-timeout", "1000", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
			"--cluster-replica-validity-factor", "0")
		p.ids[i] = redistest.Do(t, p.addrs[i], "CLUSTER", "MYID")[0]
	}
	redistest.Do(t, p.addrs[0], "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	host, port, _ := net.SplitHostPort(p.addrs[1])
	redistest.Do(t, p.addrs[0], "CLUSTER", "MEET", host, port)
	waitUntil(t, 10*time.Second, "node 1 knows node 0", func() bool {
		v := redistest.Do(t, p.addrs[1], "CLUSTER", "NODES")
		return len(v) == 1 && strings.Contains(v[0], p.ids[0])
	})
	redistest.Do(t, p.addrs[1], "CLUSTER", "REPLICATE", p.ids[0])
	p.waitOwner(t, 0)
	return p
}

// waitOwner waits until both nodes name node i the owner of every slot,
// the other a synced replica of it, and the cluster is ok.
func (p *clusterPair) waitOwner(t *testing.T, i int) {
	t.Helper()
	if !p.owns(t, i, 30*time.Second) {
		t.Fatalf("node %d not the primary within 30 s", i)
	}
}

// owns reports whether, within d, both nodes name node i the owner of
// every slot, the other a synced replica of it, and the cluster is ok.
func (p *clusterPair) owns(t *testing.T, i int, d time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ok := true
		for _, a := range p.addrs {
			info := redistest.Do(t, a, "CLUSTER", "INFO")
			nodes := redistest.Do(t, a, "CLUSTER", "NODES")
			if len(info) != 1 || !strings.Contains(info[0], "cluster_state:ok") || len(nodes) != 1 || !ownsAll(nodes[0], p.ids[i]) {
				ok = false
			}
		}
		repl := redistest.Do(t, p.addrs[1-i], "INFO", "replication")
		if ok && len(repl) == 1 && strings.Contains(repl[0], "master_link_status:up") &&
			strings.Contains(repl[0], "master_port:"+p.addrs[i][strings.LastIndex(p.addrs[i], ":")+1:]) {
			return true
		}
	}
	return false
}

// ownsAll reports whether CLUSTER NODES lists id as the master of 0-16383.
func ownsAll(nodes, id string) bool {
	for _, l := range strings.Split(nodes, "\n") {
		if strings.HasPrefix(l, id+" ") {
			return strings.Contains(l, "master") && strings.HasSuffix(strings.TrimSpace(l), "0-16383")
		}
	}
	return false
}

// failover runs CLUSTER FAILOVER on the replica of node i and waits until
// it owns the slots (asking again every 5 s: a vote may be refused while
// the last failover is recent); it returns the new primary.
func (p *clusterPair) failover(t *testing.T, i int) int {
	t.Helper()
	heir := 1 - i
	for try := 0; ; try++ {
		if v := redistest.Do(t, p.addrs[heir], "CLUSTER", "FAILOVER"); len(v) != 1 || v[0] != "OK" {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", p.addrs[heir], v)
		}
		if p.owns(t, heir, 5*time.Second) {
			return heir
		}
		if try == 5 {
			t.Fatalf("CLUSTER FAILOVER on %s: not the owner after %d tries", p.addrs[heir], try+1)
		}
	}
}

// waitUntil polls cond every 10 ms for up to within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// burst runs n concurrent checks on rc, each with a key of its own (a
// slot of its own), and returns the failures by Kind and one failure's
// text.
func burst(rc *Client, cmd *Command, prefix string, n int, timeout time.Duration) ([Kinds]int64, string) {
	var kinds [Kinds]int64
	var mu sync.Mutex
	var one string
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := make([]int64, 4)
			if err := rc.Check(cmd, fmt.Sprintf("%s{%04d}", prefix, i), d, timeout); err != nil {
				mu.Lock()
				kinds[Kind(err)]++
				one = err.Error()
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return kinds, one
}

func TestFirstBurstAfterClusterFailover(t *testing.T) {
	// CLUSTER FAILOVER on a busy cluster, then, its connections idle past
	// proveAfter, 60 concurrent checks: each of the old primary's
	// connections is proven by a PING and answers MOVED; the checks go on
	// to the heir, a pool dialled on the redirection, while the topology
	// is read again. The pod is starved: on each of the old primary's
	// connections a reply, the PONG (run 1) or the first check's (run 2),
	// is read past its deadline and its late look descheduled (see
	// stallingConn). Seen before: those checks failed (ErrTimeout, the
	// reply in the socket), two or three at once (one a connection), as
	// the drills' first burst after a failover did on a busy machine.
	p := startClusterPair(t)
	const timeout = 200 * time.Millisecond // Redis's own speed is not tested
	rc := New(Options{Mode: Cluster, Endpoints: []string{p.addrs[0]}, Timeout: timeout, PoolSize: 64, Script: failoverScript}, Hooks{})
	rc.Start()
	waitUntil(t, 5*time.Second, "the slots learnt", func() bool { return rc.route("x") != nil })
	cmd := NewCommand(failoverScript, []int{8}, []string{":p"}, []string{"6", "5", "1"}, nil)
	owner := 0
	for run := 1; run <= 2; run++ {
		for i := 0; i < 3; i++ { // busy: several connections to the owner
			_, _ = burst(rc, cmd, fmt.Sprintf("w%d", run), 60, timeout)
		}
		old := rc.route("x")
		owner = p.failover(t, owner)
		time.Sleep(proveAfter + 100*time.Millisecond)
		var stalled []*stallingConn
		old.mu.Lock()
		n := len(old.conns)
		old.mu.Unlock()
		for i := 0; i < n; i++ {
			stalled = append(stalled, stall(t, old, i, run))
		}
		if k, one := burst(rc, cmd, fmt.Sprintf("b%d", run), 60, timeout); k != [Kinds]int64{} {
			t.Errorf("run %d: 60 concurrent checks after a failover (%d connections to the old primary): failures by kind %v (%s), want none",
				run, len(stalled), k, one)
		}
		for i, sc := range stalled {
			if !sc.stalled() {
				t.Logf("run %d: connection %d to the old primary was not stalled (not read twice)", run, i)
			}
		}
	}
}
