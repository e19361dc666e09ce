package redis

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

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
			rc := topoClient(Sentinel, addr)
			var changed int64
			rc.hooks.Changed = func() { atomic.AddInt64(&changed, 1) }
			err := rc.resolvePrimary()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || rc.topo.primary != nil || atomic.LoadInt64(&changed) != 0 {
					t.Fatalf("err %v, primary %v, %d changes; want an error containing %q and no change", err, rc.topo.primary, changed, tc.wantErr)
				}
				return
			}
			if err != nil || rc.topo.primary == nil || rc.topo.primary.opts.Addr != tc.want || atomic.LoadInt64(&changed) != 1 {
				t.Fatalf("err %v, primary %v, %d changes; want %s, one change", err, rc.topo.primary, changed, tc.want)
			}
		})
	}
}

func TestSentinelWatcherFollowsSwitchMaster(t *testing.T) {
	msg := "mymaster 127.0.0.1 6379 127.0.0.1 6380"
	addr := fakeNode(t, map[string]string{
		"SUBSCRIBE": "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n" +
			"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$" + fmt.Sprint(len(msg)) + "\r\n" + msg + "\r\n",
	})
	rc := topoClient(Sentinel, addr)
	atomic.StoreInt64(&rc.lastUsed, clock.Mono())
	rc.watch()
	redistest.WaitFor(t, func() bool {
		rc.topo.mu.Lock()
		defer rc.topo.mu.Unlock()
		return rc.topo.primary != nil && rc.topo.primary.opts.Addr == "127.0.0.1:6380"
	}, "the watcher to switch to the announced primary")
	// Idle clients stop their watcher.
	atomic.StoreInt64(&rc.lastUsed, clock.Mono()-2*int64(watchIdle))
	redistest.WaitFor(t, func() bool { return atomic.LoadInt32(&rc.topo.watching) == 0 }, "the watcher to end once the client is idle")
}

// TestSentinelAddressQuotedInLog: the primary's address comes from a
// sentinel's reply; logged unquoted, a host holding a newline wrote a log
// line of the sentinel's choosing.
func TestSentinelAddressQuotedInLog(t *testing.T) {
	host := "127.0.0.1\ntollgate forged line"
	addr := fakeNode(t, map[string]string{"SENTINEL": "*2\r\n$" + strconv.Itoa(len(host)) + "\r\n" + host + "\r\n$4\r\n6380\r\n"})
	rc := topoClient(Sentinel, addr)
	var buf bytes.Buffer
	log.SetOutput(&buf)
	err := rc.resolvePrimary()
	log.SetOutput(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	want := `primary "mymaster" is now "127.0.0.1\ntollgate forged line:6380" (was "none")` + "\n"
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q, want a line ending %q", buf.String(), want)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "tollgate forged line") {
			t.Fatalf("log %q: a line forged by the address", buf.String())
		}
	}
}
