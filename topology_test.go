package tollgate

import (
	"bufio"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
		if got := keySlot(tc.key); got != tc.want {
			t.Errorf("keySlot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// fakeNode is a fake cluster node or sentinel: it answers the admin
// commands with canned replies (CLIENT SETNAME with +OK).
func fakeNode(t *testing.T, replies map[string]string) string {
	t.Helper()
	return startFakeWith(t, "", replies).l.Addr().String()
}

func topologyBackend(t *testing.T, mode string, endpoints ...string) *backend {
	t.Helper()
	cfg := CreateConfig()
	cfg.Average = 10
	cfg.Redis.Mode, cfg.Redis.Endpoints, cfg.Redis.MasterName = mode, endpoints, "mymaster"
	cfg.Redis.Timeout = "50ms"
	s, err := compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{base: s.redis, breaker: &breaker{}, now: monotonic, set: s.redis}
	b.topo.nodes = map[string]*redisClient{}
	return b
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
			b := topologyBackend(t, "cluster", addr)
			err := b.loadSlots()
			if tc.wantErr == "" {
				if err != nil || len(b.topo.nodes) != tc.wantNodes || b.route("123456789") == nil {
					t.Fatalf("err %v, %d nodes; want %d nodes and a route", err, len(b.topo.nodes), tc.wantNodes)
				}
				// An empty host is the queried node's.
				if c := b.topo.slots[16383]; c == nil || c.set.addr != "127.0.0.1:7002" {
					t.Fatalf("slot 16383 on %v, want 127.0.0.1:7002", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || b.topo.slots != nil {
				t.Fatalf("err %v, slots set %v; want an error containing %q and no map", err, b.topo.slots != nil, tc.wantErr)
			}
		})
	}
}

func TestSentinelReplies(t *testing.T) {
	for _, tc := range []struct {
		desc, reply, want, wantErr string
	}{
		{desc: "primary named", reply: "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", want: "127.0.0.1:6380"},
		{desc: "unknown master", reply: "*-1\r\n", wantErr: "does not know master"},
		{desc: "auth refused", reply: "-WRONGPASS invalid username-password pair\r\n", wantErr: "WRONGPASS"},
		{desc: "three fields", reply: "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", wantErr: "unexpected"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			addr := fakeNode(t, map[string]string{"SENTINEL": tc.reply})
			b := topologyBackend(t, "sentinel", addr)
			err := b.resolvePrimary()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || b.topo.primary != nil {
					t.Fatalf("err %v, primary %v; want an error containing %q", err, b.topo.primary, tc.wantErr)
				}
				return
			}
			if err != nil || b.topo.primary == nil || b.topo.primary.set.addr != tc.want {
				t.Fatalf("err %v, primary %v; want %s", err, b.topo.primary, tc.want)
			}
		})
	}
}

func TestReadStrings(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n", want: "subscribe|+switch-master|1"},
		{in: "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$36\r\nmymaster 10.0.0.1 6379 10.0.0.2 6379\r\n", want: "message|+switch-master|mymaster 10.0.0.1 6379 10.0.0.2 6379"},
		{in: "+OK\r\n", wantErr: true},
		{in: "*1\r\n$-5\r\n", wantErr: true},
		{in: "*9999999999\r\n", wantErr: true},
		{in: "*1\r\n$10\r\nshort\r\n", wantErr: true},
	} {
		got, err := readStrings(bufio.NewReader(strings.NewReader(tc.in)))
		if tc.wantErr != (err != nil) || strings.Join(got, "|") != tc.want {
			t.Errorf("readStrings(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRedirectsAreFollowedOnce(t *testing.T) {
	// Node A owns every slot but answers MOVED (or ASK) to B; B answers
	// the decision.
	for _, verb := range []string{"MOVED", "ASK"} {
		t.Run(verb, func(t *testing.T) {
			b := startFake(t, "+1 4 0 1000\r\n")
			bAddr := b.l.Addr().String()
			a := startFake(t, fmt.Sprintf("-%s %d %s\r\n", verb, keySlot("tg{0123456789}"), bAddr))
			aAddr := a.l.Addr().String()
			be := topologyBackend(t, "cluster", aAddr)
			ownAllSlots(be, aAddr)
			atomic.StoreInt64(&be.topo.lastRefresh, monotonic()+int64(time.Hour)) // no refresh in this test
			set := newPolicySet([]*policy{mustPolicy(t)}, 14)
			d := make([]int64, 4)
			for i := 0; i < 2; i++ {
				if err := be.check(set.cmd, "tg{0123456789}", d, &be.set, nil); err != nil || d[0] != 1 {
					t.Fatalf("check %d: %v %v, want B's decision", i, err, d)
				}
			}
			// MOVED updates the map: A is asked once; ASK does not: twice.
			want := int64(1)
			if verb == "ASK" {
				want = 2
			}
			if n := atomic.LoadInt64(&a.evals); n != want {
				t.Fatalf("A was asked %d times, want %d", n, want)
			}
		})
	}
	// A redirects to B, which redirects again to C (which would decide):
	// the second redirection is not followed, the check fails (and falls
	// back) and C is never asked. Catches following redirections in a
	// loop, or twice (e.g. redirected calling itself on a redirect reply).
	for _, tc := range []struct{ first, second string }{
		{"MOVED", "MOVED"}, {"MOVED", "ASK"}, {"ASK", "MOVED"}, {"ASK", "ASK"},
	} {
		t.Run(tc.first+" then "+tc.second, func(t *testing.T) {
			slot := keySlot("tg{0123456789}")
			c := startFake(t, "+1 4 0 1000\r\n")
			b := startFake(t, fmt.Sprintf("-%s %d %s\r\n", tc.second, slot, c.l.Addr().String()))
			a := startFake(t, fmt.Sprintf("-%s %d %s\r\n", tc.first, slot, b.l.Addr().String()))
			aAddr := a.l.Addr().String()
			be := topologyBackend(t, "cluster", aAddr)
			ownAllSlots(be, aAddr)
			atomic.StoreInt64(&be.topo.lastRefresh, monotonic()+int64(time.Hour)) // no refresh in this test
			set := newPolicySet([]*policy{mustPolicy(t)}, 14)
			d := make([]int64, 4)
			if err := be.check(set.cmd, "tg{0123456789}", d, &be.set, nil); err != errRedirect {
				t.Fatalf("check: %v, decision %v; want %v (a redirection to a redirection is not followed)", err, d, errRedirect)
			}
			na, nb, nc := atomic.LoadInt64(&a.evals), atomic.LoadInt64(&b.evals), atomic.LoadInt64(&c.evals)
			if na != 1 || nb != 1 || nc != 0 {
				t.Fatalf("A, B, C asked %d, %d, %d times; want 1, 1, 0 (one redirection followed, not the second)", na, nb, nc)
			}
		})
	}
}

// ownAllSlots makes the node at addr own every slot of be's map.
func ownAllSlots(be *backend, addr string) {
	be.topo.mu.Lock()
	defer be.topo.mu.Unlock()
	be.topo.slots = make([]*redisClient, clusterSlots)
	for i := range be.topo.slots {
		be.topo.slots[i] = be.node(addr, true)
	}
}

func mustPolicy(t *testing.T) *policy {
	t.Helper()
	p, err := compileLimit("", 60, "1m", 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSentinelWatcherFollowsSwitchMaster(t *testing.T) {
	msg := "mymaster 127.0.0.1 6379 127.0.0.1 6380"
	addr := fakeNode(t, map[string]string{
		"SUBSCRIBE": "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n" +
			"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$" + fmt.Sprint(len(msg)) + "\r\n" + msg + "\r\n",
	})
	b := topologyBackend(t, "sentinel", addr)
	atomic.StoreInt64(&b.lastUsed, monotonic())
	b.watch()
	waitFor(t, func() bool {
		b.topo.mu.Lock()
		defer b.topo.mu.Unlock()
		return b.topo.primary != nil && b.topo.primary.set.addr == "127.0.0.1:6380"
	}, "the watcher to switch to the announced primary")
	// Idle backends stop their watcher.
	atomic.StoreInt64(&b.lastUsed, monotonic()-2*int64(watchIdle))
	waitFor(t, func() bool { return atomic.LoadInt32(&b.topo.watching) == 0 }, "the watcher to end once the backend is idle")
}

func TestRedirectedNodesAreBounded(t *testing.T) {
	// Node A answers every check MOVED to a new address, and CLUSTER
	// SLOTS fails: the nodes known only from redirections stay at most
	// maxExtraNodes, their pools closed.
	seq := int64(0)
	a := startFakeWith(t, "", map[string]string{"CLUSTER": "-ERR cluster is down\r\n"})
	aAddr := a.l.Addr().String()
	be := topologyBackend(t, "cluster", aAddr)
	ownAllSlots(be, aAddr)
	set := newPolicySet([]*policy{mustPolicy(t)}, 14)
	d := make([]int64, 4)
	for i := 0; i < 3*maxExtraNodes; i++ {
		seq++
		line := []byte(fmt.Sprintf("-MOVED %d 127.0.0.1:%d\r\n", keySlot("tg{0123456789}"), 1+seq))
		_ = be.redirected(set.cmd, "tg{0123456789}", d, line, aAddr, &be.set)
		be.topo.mu.Lock()
		n := len(be.topo.nodes)
		be.topo.mu.Unlock()
		if n > 1+maxExtraNodes {
			t.Fatalf("after %d redirections to new nodes: %d nodes, want at most %d", i+1, n, 1+maxExtraNodes)
		}
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
