package tollgate

import (
	"bufio"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHeartbeatRidesOnChecks(t *testing.T) {
	f := startFake(t, "+1 4 0 1000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Heartbeat = "150ms" })
	if got := replicasSeen(h.hb, h.set.replicas, monotonic()); got != 1 {
		t.Fatalf("before any heartbeat the fallback divides by %d, want replicas (1)", got)
	}
	serve(h, t.Name())
	waitFor(t, func() bool { return atomic.LoadInt64(&f.beats) == 1 }, "the first check's heartbeat")
	waitFor(t, func() bool { return replicasSeen(h.hb, h.set.replicas, monotonic()) == 3 }, "the count (3) to be kept")
	// Not due yet: no heartbeat is asked for. A heartbeat asked for is
	// sent before the beat goroutine ends (see beatQuiet), so once it is
	// quiet the server has counted every one: no sleep decides this. (A
	// beat asked for on every check fails here.)
	serve(h, t.Name())
	beatQuiet(t, h)
	if n := atomic.LoadInt64(&f.beats); n != 1 {
		t.Fatalf("%d heartbeats within one interval, want 1", n)
	}
	time.Sleep(150 * time.Millisecond)
	serve(h, t.Name())
	waitFor(t, func() bool { return atomic.LoadInt64(&f.beats) == 2 }, "a heartbeat once due")
	if l := h.set.top.localShare(replicasSeen(h.hb, h.set.replicas, monotonic())); l.burst != 1 {
		t.Fatalf("local share with 3 pods: burst %v, want 5/3 -> 1", l.burst)
	}
}

func TestHeartbeatOff(t *testing.T) {
	f := startFake(t, "+1 4 0 1000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Heartbeat = "0"; c.Replicas = 2 })
	serve(h, t.Name())
	beatQuiet(t, h) // a beat asked for by that check would be counted now
	if n := atomic.LoadInt64(&f.beats); n != 0 || h.hb != nil || replicasSeen(h.hb, h.set.replicas, monotonic()) != 2 {
		t.Fatalf("heartbeat off: %d heartbeats, divisor %d; want none and replicas (2)", n, replicasSeen(h.hb, h.set.replicas, monotonic()))
	}
}

func TestHeartbeatReplies(t *testing.T) {
	for _, tc := range []struct {
		desc, reply string
		want        int64
		wantErr     bool
	}{
		{desc: "three pods", reply: "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n:1\r\n:0\r\n:1\r\n:3\r\n", want: 3},
		{desc: "ACL refuses ZADD", reply: "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n-NOPERM this user has no permissions\r\n", wantErr: true},
		{desc: "TIME not an array", reply: ":5\r\n", wantErr: true},
		{desc: "TIME negative", reply: "*2\r\n$2\r\n-1\r\n$1\r\n0\r\n", wantErr: true},
		{desc: "ZCARD not an integer", reply: "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n:1\r\n:0\r\n:1\r\n+3\r\n", wantErr: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.reply))
			us, err := readTime(br)
			var n int64
			for i := 0; err == nil && i < 4; i++ {
				n, err = readInt(br)
			}
			if tc.wantErr != (err != nil) || !tc.wantErr && (n != tc.want || us != 1700000000*1000000+123456) {
				t.Fatalf("count %d, time %d, err %v; want %d (error: %v)", n, us, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestHeartbeatConfig(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{{"", 5 * time.Second, false}, {"0", 0, false}, {"2", 2 * time.Second, false}, {"10ms", 0, true}, {"soon", 0, true}} {
		cfg := CreateConfig()
		cfg.Average = 1
		cfg.Redis.Heartbeat = tc.in
		s, err := compile(cfg, "api")
		if tc.wantErr != (err != nil) || err == nil && s.redis.heartbeatNS != int64(tc.want) {
			t.Fatalf("heartbeat %q: err %v, got %v; want %v (error: %v)", tc.in, err, s, tc.want, tc.wantErr)
		}
	}
}

// beatQuiet waits until h's backend has no heartbeat asked for and no beat
// goroutine running. beat marks a heartbeat due, then starts the goroutine
// unless it runs, before the check that asked returns; the goroutine takes
// what is due and sends it, reading every reply (the fake counts a
// heartbeat when it reads its ZCARD, before replying), and stops beating
// only when nothing is due. So once quiet, every heartbeat asked for
// before the call has been counted by the server.
func beatQuiet(t *testing.T, h *Tollgate) {
	t.Helper()
	waitFor(t, func() bool {
		if atomic.LoadInt32(&h.be.beating) != 0 {
			return false
		}
		h.be.beatsMu.Lock()
		defer h.be.beatsMu.Unlock()
		for _, hb := range h.be.beats {
			if atomic.LoadInt32(&hb.due) != 0 {
				return false
			}
		}
		return true
	}, "the heartbeat goroutine to end")
}

// waitFor polls cond for up to 2 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
