package tollgate

import (
	"bytes"
	"log"
	"os"
	"strconv"
	"strings"
	"testing"
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
	want := `primary "mymaster" is now "127.0.0.1\ntollgate forged line:6380" (was none)` + "\n"
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q, want a line ending %q", buf.String(), want)
	}
}
