package tollgate

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// a client that goes away mid-stream, behind the standard
// library's ReverseProxy (Traefik's proxy), must be charged what the
// stream had reported by then (docs/quotas-and-costs.md). The proxy
// panics with http.ErrAbortHandler when its copy to the client fails.
func TestResponseCostClientGoneMidStream(t *testing.T) {
	addr := redistest.Start(t)
	backend := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.Write([]byte("data: {\"usage\":{\"total_tokens\":10}}\n\n"))
		rw.(http.Flusher).Flush()
		for i := 0; ; i++ {
			select {
			case <-req.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := rw.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
		}
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, req *http.Request) { proxy.ServeHTTP(rw, req) }, nil)
	done := make(chan interface{}, 1)
	front := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		defer func() {
			r := recover()
			done <- r
			if r != nil {
				panic(r)
			}
		}()
		h.ServeHTTP(rw, req)
	}))
	defer front.Close()
	req, _ := http.NewRequest("GET", front.URL, nil)
	req.Header.Set("X-API-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	t.Logf("client read %q (%v); now goes away", line, err)
	resp.Body.Close() // the client goes away
	select {
	case r := <-done:
		t.Logf("handler ended; panic: %v", r)
	case <-time.After(5 * time.Second):
		t.Fatal("handler did not end")
	}
	settle(t, h)
	m := h.top.ps[0].Metrics
	if n := atomic.LoadInt64(&m.CostCharged); n != 9 {
		t.Errorf("charged %d after the client went away, want 9 (10 reported less cost 1); missing %d", n, atomic.LoadInt64(&m.CostMissing))
	}
}
