package tollgate

import (
	"bytes"
	"errors"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// TestNodeAddressQuotedInErrors: a node's address (from a sentinel, CLUSTER
// SLOTS or a redirection) reaches the log through the errors of dials and
// topology queries; the failure log escapes their line breaks, so a
// newline in it forges no line. (The client's own log line, a new primary:
// internal/redis.)
func TestNodeAddressQuotedInErrors(t *testing.T) {
	addr := "127.0.0.1\ntollgate forged line:1"
	var mu sync.Mutex
	var derr, serr error
	timeout := 5 * time.Millisecond
	redis.New(redis.Options{Addr: addr, Timeout: timeout, PoolSize: 1},
		redis.Hooks{DialFailed: func(err error) { mu.Lock(); derr = err; mu.Unlock() }}).Start()
	redis.New(redis.Options{Mode: redis.Cluster, Endpoints: []string{addr}, Timeout: timeout, PoolSize: 1},
		redis.Hooks{RefreshFailed: func(err error) { mu.Lock(); serr = err; mu.Unlock() }}).Start()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		done := derr != nil && serr != nil
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dial's error %v, the topology query's %v: want both", derr, serr)
		}
	}
	// The backend that logs is one of the operator's own addresses (the
	// configuration's): the node's reaches its log through the error.
	set := config.RedisSettings{Mode: redis.Cluster, Endpoints: []string{"127.0.0.1:1"}, Timeout: timeout, PoolSize: 1, ProbeNS: int64(time.Second)}
	b := &backend{base: set, breaker: &breaker{}, now: clock.Mono, set: set,
		rc: redis.New(redis.Options{Mode: redis.Cluster, Endpoints: set.Endpoints, Timeout: timeout, PoolSize: 1}, redis.Hooks{})}
	mu.Lock()
	errs := []error{derr, serr, errors.New("a reply\ntollgate forged line")}
	mu.Unlock()
	for _, err := range errs {
		var buf bytes.Buffer
		log.SetOutput(&buf)
		atomic.StoreInt64(&b.lastLog, 0)
		b.logFailure(b.now(), err, &set)
		log.SetOutput(os.Stderr)
		// (Other backends' failures may log meanwhile: the log is the
		// process's. A forged line would start with the address's rest.)
		out := buf.String()
		if !strings.Contains(out, `tollgate forged line`) {
			t.Errorf("log %q: want the failure logged", out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "tollgate forged line") {
				t.Errorf("log %q: a line forged by the address", out)
			}
		}
	}
}
