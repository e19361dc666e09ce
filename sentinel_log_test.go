package tollgate

import (
	"bytes"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSentinelAddressQuotedInLog: the primary's address comes from a
// sentinel's reply; logged unquoted, a host holding a newline wrote a log
// line of the sentinel's choosing.
func TestSentinelAddressQuotedInLog(t *testing.T) {
	host := "127.0.0.1\ntollgate forged line"
	addr := fakeNode(t, map[string]string{"SENTINEL": "*2\r\n$" + strconv.Itoa(len(host)) + "\r\n" + host + "\r\n$4\r\n6380\r\n"})
	b := topologyBackend(t, "sentinel", addr)
	var buf bytes.Buffer
	log.SetOutput(&buf)
	err := b.resolvePrimary()
	log.SetOutput(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	// (Other lines may hold the address too: the dial's error, logged by
	// the backend.)
	want := `primary "mymaster" is now "127.0.0.1\ntollgate forged line:6380" (was "none")` + "\n"
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q, want a line ending %q", buf.String(), want)
	}
}

// TestNodeAddressQuotedInErrors: a node's address (from a sentinel, CLUSTER
// SLOTS or a redirection) reaches the log through the errors of dials and
// topology queries; the failure log escapes their line breaks, so a
// newline in it forges no line.
func TestNodeAddressQuotedInErrors(t *testing.T) {
	addr := "127.0.0.1\ntollgate forged line:1"
	c, err := newRedisClient(redisSettings{addr: addr, timeout: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, derr := c.dialSafe(true)
	b := topologyBackend(t, "cluster", "127.0.0.1:1")
	_, serr := b.clusterSlots(addr)
	for _, err := range []error{derr, serr} {
		if err == nil {
			t.Fatal("no error")
		}
		var buf bytes.Buffer
		log.SetOutput(&buf)
		atomic.StoreInt64(&b.lastLog, 0)
		set := b.latest()
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
