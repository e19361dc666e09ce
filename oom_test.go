package tollgate

// What a Redis out of memory does to the checks, as the README says it:
// with maxmemory reached and noeviction, Redis refuses the script's writes
// (-OOM ...); the check fails and the failure policy applies.

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestRedisOutOfMemoryAppliesTheFailurePolicy(t *testing.T) {
	addr := redistest.Start(t)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	if got := liveDo(t, nc, br, "CONFIG", "SET", "maxmemory-policy", "noeviction"); got != "OK" {
		t.Fatalf("CONFIG SET maxmemory-policy: %q", got)
	}
	if got := liveDo(t, nc, br, "CONFIG", "SET", "maxmemory", "1"); got != "OK" {
		t.Fatalf("CONFIG SET maxmemory: %q", got)
	}
	if _, err := nc.Write(redis.AppendCommand(nil, "SET", "k", "v")); err != nil {
		t.Fatal(err)
	}
	if v, err := redistest.ReadReply(br); err != nil || len(v) != 1 || !strings.Contains(v[0], "OOM command not allowed") {
		t.Fatalf("SET with maxmemory 1: %q, %v; want an OOM error", v, err)
	}
	for _, tc := range []struct {
		mode, decision string
		code           int
	}{
		{"open", "local", 200},
		{"closed", "unavailable", 503},
	} {
		h := handlerOn(t, addr, func(c *config.Config) {
			c.Class = uniqueName("oom")
			c.FailureMode = tc.mode
			c.DecisionHeader = "X-Decision"
		})
		rec := serve(h, "k")
		if rec.Code != tc.code || rec.Header().Get("X-Decision") != tc.decision {
			t.Fatalf("failureMode %s, Redis out of memory: %d %q, want %d %q", tc.mode, rec.Code, rec.Header().Get("X-Decision"), tc.code, tc.decision)
		}
	}
	if got := scrape(t)[`tollgate_redis_errors_total{redis="`+addr+`",reason="reply"}`]; got < 2 {
		t.Fatalf("errors counted with reason reply: %v, want 2", got)
	}
}
