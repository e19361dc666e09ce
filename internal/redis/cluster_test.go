package redis

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestKeySlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"123456789", 12739}, // CRC-16/XMODEM check value 0x31C3
		{"foo", 12182},       // Redis's CLUSTER KEYSLOT foo
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363}, // an empty tag: the whole key
		{"foo{{bar}}zap", 4015},
		{"tg{abc}", 7638},
		{"tg{abc}:login", 7638},
	} {
		if got := KeySlot(tc.key); got != tc.want {
			t.Errorf("KeySlot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

func TestClusterSlotsReplies(t *testing.T) {
	for _, tc := range []struct {
		desc, reply, wantErr string
		wantNodes            int
	}{
		{desc: "two ranges", reply: "*2\r\n*3\r\n:0\r\n:8000\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n*3\r\n:8001\r\n:16383\r\n*3\r\n$0\r\n\r\n:7002\r\n$2\r\nid\r\n", wantNodes: 2},
		{desc: "empty", reply: "*0\r\n", wantErr: "no slot assigned"},
		{desc: "an error", reply: "-ERR This instance has cluster support disabled\r\n", wantErr: "cluster support disabled"},
		{desc: "slot out of range", reply: "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n", wantErr: "range"},
		{desc: "range backwards", reply: "*1\r\n*3\r\n:9\r\n:1\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n", wantErr: "range"},
		{desc: "bad port", reply: "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n", wantErr: "node"},
		{desc: "short entry", reply: "*1\r\n*2\r\n:0\r\n:1\r\n", wantErr: "entry"},
		{desc: "not an array", reply: ":5\r\n", wantErr: "unexpected"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			addr := fakeNode(t, map[string]string{"CLUSTER": tc.reply})
			rc := topoClient(Cluster, addr)
			var changed int64
			rc.hooks.Changed = func() { atomic.AddInt64(&changed, 1) }
			err := rc.loadSlots()
			if tc.wantErr == "" {
				if err != nil || len(rc.topo.nodes) != tc.wantNodes || rc.route("123456789") == nil {
					t.Fatalf("err %v, %d nodes; want %d nodes and a route", err, len(rc.topo.nodes), tc.wantNodes)
				}
				// An empty host is the queried node's.
				if c := rc.topo.slots[16383]; c == nil || c.opts.Addr != "127.0.0.1:7002" {
					t.Fatalf("slot 16383 on %v, want 127.0.0.1:7002", c)
				}
				if n := atomic.LoadInt64(&changed); n != 1 {
					t.Fatalf("Changed called %d times, want once (a map learnt)", n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || rc.topo.slots != nil {
				t.Fatalf("err %v, slots set %v; want an error containing %q and no map", err, rc.topo.slots != nil, tc.wantErr)
			}
		})
	}
}

func TestRedirectsAreFollowedOnce(t *testing.T) {
	// Node A owns every slot but answers MOVED (or ASK) to B; B answers
	// the decision.
	for _, verb := range []string{"MOVED", "ASK"} {
		t.Run(verb, func(t *testing.T) {
			b := redistest.StartFake(t, "+1 4 0 1000\r\n")
			a := redistest.StartFake(t, fmt.Sprintf("-%s %d %s\r\n", verb, KeySlot(testKey), b.Addr()))
			rc := topoClient(Cluster, a.Addr())
			ownAllSlots(rc, a.Addr())
			noRefresh(rc)
			cmd := command(len(testKey))
			d := make([]int64, 4)
			for i := 0; i < 2; i++ {
				if err := rc.Check(cmd, testKey, d, 50*time.Millisecond); err != nil || d[0] != 1 {
					t.Fatalf("check %d: %v %v, want B's decision", i, err, d)
				}
			}
			// MOVED updates the map: A is asked once; ASK does not: twice.
			want := int64(1)
			if verb == "ASK" {
				want = 2
			}
			if n := atomic.LoadInt64(&a.Evals); n != want {
				t.Fatalf("A was asked %d times, want %d", n, want)
			}
			if n := atomic.LoadInt64(&b.Evals); n != 2 {
				t.Fatalf("B was asked %d times, want 2", n)
			}
		})
	}
	// A redirects to B, which redirects again to C (which would decide):
	// the second redirection is not followed, the check fails and C is
	// never asked. Catches following redirections in a loop, or twice
	// (e.g. redirected calling itself on a redirect reply).
	for _, tc := range []struct{ first, second string }{
		{"MOVED", "MOVED"}, {"MOVED", "ASK"}, {"ASK", "MOVED"}, {"ASK", "ASK"},
	} {
		t.Run(tc.first+" then "+tc.second, func(t *testing.T) {
			slot := KeySlot(testKey)
			c := redistest.StartFake(t, "+1 4 0 1000\r\n")
			b := redistest.StartFake(t, fmt.Sprintf("-%s %d %s\r\n", tc.second, slot, c.Addr()))
			a := redistest.StartFake(t, fmt.Sprintf("-%s %d %s\r\n", tc.first, slot, b.Addr()))
			rc := topoClient(Cluster, a.Addr())
			ownAllSlots(rc, a.Addr())
			noRefresh(rc)
			d := make([]int64, 4)
			if err := rc.Check(command(len(testKey)), testKey, d, 50*time.Millisecond); err != errRedirect {
				t.Fatalf("check: %v, decision %v; want %v (a redirection to a redirection is not followed)", err, d, errRedirect)
			}
			na, nb, nc := atomic.LoadInt64(&a.Evals), atomic.LoadInt64(&b.Evals), atomic.LoadInt64(&c.Evals)
			if na != 1 || nb != 1 || nc != 0 {
				t.Fatalf("A, B, C asked %d, %d, %d times; want 1, 1, 0 (one redirection followed, not the second)", na, nb, nc)
			}
		})
	}
}

func TestRedirectedNodesAreBounded(t *testing.T) {
	// Node A answers every check MOVED to a new address, and CLUSTER
	// SLOTS fails: the nodes known only from redirections stay at most
	// maxExtraNodes, the oldest forgotten with their pools closed.
	aAddr := redistest.StartFakeWith(t, "", map[string]string{"CLUSTER": "-ERR cluster is down\r\n"}).Addr()
	rc := topoClient(Cluster, aAddr)
	ownAllSlots(rc, aAddr)
	cmd := command(len(testKey))
	d := make([]int64, 4)
	var first *Pool
	for i := 0; i < 3*maxExtraNodes; i++ {
		line := []byte(fmt.Sprintf("-MOVED %d 127.0.0.1:%d\r\n", KeySlot(testKey), 2+i))
		_ = rc.redirected(cmd, testKey, d, line, aAddr, 50*time.Millisecond)
		rc.topo.mu.Lock()
		n := len(rc.topo.nodes)
		if i == 0 {
			first = rc.topo.nodes["127.0.0.1:2"]
		}
		rc.topo.mu.Unlock()
		if n > 1+maxExtraNodes {
			t.Fatalf("after %d redirections to new nodes: %d nodes, want at most %d", i+1, n, 1+maxExtraNodes)
		}
	}
	if first == nil {
		t.Fatal("the first redirection's node was never known")
	}
	first.mu.Lock()
	forgotten := first.forgotten
	first.mu.Unlock()
	if !forgotten {
		t.Fatal("the oldest node known from a redirection was dropped but not forgotten (its pool left open)")
	}
}

func TestParseRedirect(t *testing.T) {
	for _, tc := range []struct {
		line  string
		ask   bool
		slot  int
		addr  string
		valid bool
	}{
		{line: "-MOVED 3999 127.0.0.1:6381\r\n", slot: 3999, addr: "127.0.0.1:6381", valid: true},
		{line: "-ASK 1 [::1]:7000\r\n", ask: true, slot: 1, addr: "[::1]:7000", valid: true},
		{line: "-MOVED 2 :7001\r\n", slot: 2, addr: ":7001", valid: true}, // the answering node's host
		{line: "-MOVED 16384 127.0.0.1:6381\r\n"},
		{line: "-MOVED -1 127.0.0.1:6381\r\n"},
		{line: "-MOVED 1 nohost\r\n"},
		{line: "-MOVED 1\r\n"},
		{line: "-ERR 1 2\r\n"},
	} {
		ask, slot, addr, ok := parseRedirect([]byte(tc.line))
		if ok != tc.valid || ok && (ask != tc.ask || slot != tc.slot || addr != tc.addr) {
			t.Errorf("parseRedirect(%q) = %v %d %q %v; want %v %d %q %v", tc.line, ask, slot, addr, ok, tc.ask, tc.slot, tc.addr, tc.valid)
		}
	}
}
