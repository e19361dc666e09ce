package tollgate

import (
	"bytes"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestHeartbeatRidesOnChecks(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Heartbeat = "150ms" })
	if got := replicasSeen(h.hb, h.conf.Replicas, clock.Mono()); got != 1 {
		t.Fatalf("before any heartbeat the fallback divides by %d, want replicas (1)", got)
	}
	serve(h, t.Name())
	redistest.WaitFor(t, func() bool { return atomic.LoadInt64(&f.Beats) == 1 }, "the first check's heartbeat")
	redistest.WaitFor(t, func() bool { return replicasSeen(h.hb, h.conf.Replicas, clock.Mono()) == 3 }, "the count (3) to be kept")
	// Not due yet: no heartbeat is asked for. A heartbeat asked for is
	// sent before the beat goroutine ends (see beatQuiet), so once it is
	// quiet the server has counted every one: no sleep decides this. (A
	// beat asked for on every check fails here.)
	serve(h, t.Name())
	beatQuiet(t, h)
	if n := atomic.LoadInt64(&f.Beats); n != 1 {
		t.Fatalf("%d heartbeats within one interval, want 1", n)
	}
	time.Sleep(150 * time.Millisecond)
	serve(h, t.Name())
	redistest.WaitFor(t, func() bool { return atomic.LoadInt64(&f.Beats) == 2 }, "a heartbeat once due")
	if l := localShare(h.conf.Top, replicasSeen(h.hb, h.conf.Replicas, clock.Mono())); l.Burst != 1 {
		t.Fatalf("local share with 3 pods: burst %v, want 5/3 -> 1", l.Burst)
	}
}

func TestHeartbeatOff(t *testing.T) {
	f := redistest.StartFake(t, "+1 4 0 1000\r\n")
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Redis.Heartbeat = "0"; c.Replicas = 2 })
	serve(h, t.Name())
	beatQuiet(t, h) // a beat asked for by that check would be counted now
	if n := atomic.LoadInt64(&f.Beats); n != 0 || h.hb != nil || replicasSeen(h.hb, h.conf.Replicas, clock.Mono()) != 2 {
		t.Fatalf("heartbeat off: %d heartbeats, divisor %d; want none and replicas (2)", n, replicasSeen(h.hb, h.conf.Replicas, clock.Mono()))
	}
}

func TestHeartbeatReplies(t *testing.T) {
	// What a node answers the heartbeat is untrusted: only four integer
	// replies per class, after a TIME that is one, count.
	ok := map[string]string{"TIME": "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n", "ZADD": ":1\r\n", "ZREMRANGEBYSCORE": ":0\r\n", "PEXPIRE": ":1\r\n", "ZCARD": ":3\r\n"}
	for _, tc := range []struct {
		desc, verb, reply string
		want              int64
	}{
		{desc: "three pods", want: 3},
		{desc: "ACL refuses ZADD", verb: "ZADD", reply: "-NOPERM this user has no permissions\r\n"},
		{desc: "TIME not an array", verb: "TIME", reply: ":5\r\n"},
		{desc: "TIME negative", verb: "TIME", reply: "*2\r\n$2\r\n-1\r\n$1\r\n0\r\n"},
		{desc: "ZCARD not a number", verb: "ZCARD", reply: "+three\r\n"},
		{desc: "ZCARD negative", verb: "ZCARD", reply: ":-3\r\n"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			replies := map[string]string{}
			for k, v := range ok {
				replies[k] = v
			}
			if tc.verb != "" {
				replies[tc.verb] = tc.reply
			}
			f := redistest.StartFakeWith(t, "+1 3 0 2000\r\n", replies)
			c := redis.NewPool(redis.Options{Addr: f.Addr(), Timeout: time.Second, PoolSize: 1})
			hb := &heartbeat{key: "tg{hb:api}", ttlMS: 3000}
			heartbeatOn(c, []*heartbeat{hb}, 1)
			if n := atomic.LoadInt64(&hb.seen); n != tc.want {
				t.Fatalf("count %d, want %d", n, tc.want)
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
		s, err := config.Compile(cfg, "api")
		if tc.wantErr != (err != nil) || err == nil && s.Redis.HeartbeatNS != int64(tc.want) {
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
	redistest.WaitFor(t, func() bool {
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

// A pod-to-Redis clock skew past maxSkewMS is logged, at most every
// skewLogEvery; one within it is not.
func TestClockSkewIsLogged(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	old := atomic.LoadInt64(&skewLogged)
	defer atomic.StoreInt64(&skewLogged, old)
	atomic.StoreInt64(&skewLogged, 0)
	logSkew(1500, 1)
	if buf.Len() != 0 {
		t.Fatalf("a skew of 1.5 s logged: %q", buf.String())
	}
	logSkew(-5000, 2)
	if !strings.Contains(buf.String(), "-5000 ms") {
		t.Fatalf("a skew of -5 s: %q, want it logged", buf.String())
	}
	buf.Reset()
	logSkew(5000, 3)
	if buf.Len() != 0 {
		t.Errorf("logged again at once: %q", buf.String())
	}
	logSkew(5000, 2+skewLogEvery)
	if !strings.Contains(buf.String(), "5000 ms") {
		t.Errorf("not logged again after %v", time.Duration(skewLogEvery))
	}
}
