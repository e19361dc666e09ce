package redis

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// FuzzExchangeReply feeds arbitrary replies to a call on the wire: it
// must end in a reply line or an error, never a panic, and a line decode
// accepts must be what decodeOracle accepts, with its numbers.
func FuzzExchangeReply(f *testing.F) {
	for _, seed := range []string{
		"+1 3 0 2000\r\n", "+0 0 1500 5000\r\n", "-NOSCRIPT No matching script\r\n", "-ERR x\r\n",
		"*4\r\n:1\r\n:3\r\n:0\r\n:2000\r\n", "+\r\n", "+1 -1 0 0\r\n", "+1 3 0 2000 9\r\n", ":1\r\n", "$-1\r\n",
		"+0 3 0 2000\r\n", "+2 3 0 2000\r\n", "+1 3 0 9999999999999999999\r\n", "-MOVED 1 127.0.0.1:1\r\n",
	} {
		f.Add(seed)
	}
	cmd := command(len(testKey))
	f.Fuzz(func(t *testing.T, reply string) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			br := bufio.NewReader(server)
			for {
				if _, err := redistest.ReadCommand(br); err != nil {
					return
				}
				if _, err := server.Write([]byte(reply)); err != nil {
					return
				}
			}
		}()
		cn := newConn(client)
		startReader(cn, nil)
		cl := newCall()
		d := make([]int64, 4)
		err := send(cn, nil, cl, nil, cmd, cmd.shaHead, testKey, 100*time.Millisecond, time.Now)
		if err == nil {
			cn.mu.Lock()
			await(cn, cl)
			cn.mu.Unlock()
			err = cl.err
		}
		if err != nil {
			return
		}
		line := string(cl.line)
		if !strings.HasPrefix(reply, line) || !strings.HasSuffix(line, "\n") {
			t.Fatalf("reply %q answered with line %q", reply, line)
		}
		err = decode(cl.line, d, &Command{})
		want, ok := decodeOracle(line, len(d))
		if ok != (err == nil) || ok && fmt.Sprint(d) != fmt.Sprint(want) {
			t.Fatalf("reply %q decoded as %v, %v; want ok=%v %v", reply, d, err, ok, want)
		}
	})
}

// FuzzTopologyReplies feeds arbitrary bytes to the readers of heartbeat,
// pub/sub and side-connection replies: an error or a value, never a panic.
func FuzzTopologyReplies(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n:1\r\n:0\r\n:1\r\n:3\r\n",
		"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$5\r\nm a b\r\n",
		"*1\r\n$-1\r\n", "*-1\r\n", "*99999999\r\n", ":\r\n", "-ERR\r\n", "\r\n",
		"*2\r\n*1\r\n:1\r\n+OK\r\n", "*2\r\n$1048576\r\nx\r\n-MOVED 1 a:1\r\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		for _, read := range []func(br *bufio.Reader) error{
			func(br *bufio.Reader) error { _, err := readTime(br); return err },
			func(br *bufio.Reader) error { _, err := readInt(br); return err },
			func(br *bufio.Reader) error { _, err := readStrings(br); return err },
			func(br *bufio.Reader) error { _, err := readValues(br); return err }, // the side connection's (side.go)
		} {
			_ = read(bufio.NewReader(strings.NewReader(reply)))
		}
	})
}
