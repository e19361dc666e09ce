package tollgate

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// a handler that hijacks without a WriteHeader and then (by
// mistake) writes: without the wrapper the Write fails with
// ErrHijacked and nothing else happens; through the wrapper, its Flush
// after the Write reaches net/http's Flush on a hijacked response, which
// panics (nil pointer).
func TestResponseCostWriteAfterHijack(t *testing.T) {
	addr := redistest.Start(t)
	for _, costed := range []bool{false, true} {
		var panicked interface{}
		h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
			c, brw, err := rw.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HELLO\n")
			brw.Flush()
			func() {
				defer func() { panicked = recover() }()
				rw.Write([]byte("stray"))
			}()
			time.Sleep(50 * time.Millisecond)
		}, func(c *config.Config) {
			if !costed {
				c.ResponseCost = nil
			}
		})
		srv := httptest.NewServer(h)
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(bufio.NewReader(conn))
		conn.Close()
		srv.Close()
		t.Logf("responseCost %t: the hijacked connection got %q", costed, b)
		if string(b) != "HELLO\n" || panicked != nil {
			t.Errorf("responseCost %t: the hijacked connection got %q, want only HELLO; a Write after Hijack panicked: %v", costed, b, panicked)
		}
	}
}
