package tollgate

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// The client does not choose whether the body is read: a backend that
// compresses when asked (most do) would answer a client sending
// Accept-Encoding: gzip compressed, its usage not read (reason encoded)
// and only cost charged; Tollgate takes the header off the request, and
// the usage is read and charged whatever the client asked.
func TestResponseCostAcceptEncodingTakenOff(t *testing.T) {
	addr := redistest.Start(t)
	body := `{"usage":{"total_tokens":10}}`
	backend := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		if strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
			rw.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(rw)
			zw.Write([]byte(body))
			zw.Close()
			return
		}
		rw.Write([]byte(body))
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	for _, ae := range []string{"", "gzip"} {
		proxy := httputil.NewSingleHostReverseProxy(u)
		h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, req *http.Request) { proxy.ServeHTTP(rw, req) }, nil)
		front := httptest.NewServer(h)
		req, _ := http.NewRequest("GET", front.URL, nil)
		req.Header.Set("X-API-Key", "k")
		if ae != "" {
			req.Header.Set("Accept-Encoding", ae)
		}
		// A client that asks for no encoding unless told to (Go's, curl's,
		// Python's and browsers' ask for gzip by default).
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		front.Close()
		settle(t, h)
		m := h.top.ps[0].Metrics
		t.Logf("Accept-Encoding %q: %d, Content-Encoding %q; charged %d, encoded %d", ae, resp.StatusCode, resp.Header.Get("Content-Encoding"),
			atomic.LoadInt64(&m.CostCharged), atomic.LoadInt64(&m.CostEncoded))
		if atomic.LoadInt64(&m.CostCharged) != 9 {
			t.Errorf("Accept-Encoding %q: charged %d, want 9 (the client chose not to pay)", ae, atomic.LoadInt64(&m.CostCharged))
		}
	}
}

// a hijacked connection (a WebSocket upgrade) on a jsonFields
// route is counted as a body that named no cost.
func TestResponseCostHijackCountsNothing(t *testing.T) {
	addr := redistest.Start(t)
	h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
		c, _, err := rw.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}, nil)
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", "k")
	rec := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(rec, req)
	settle(t, h)
	if n := atomic.LoadInt64(&h.top.ps[0].Metrics.CostMissing); n != 0 {
		t.Errorf("a WebSocket upgrade counted %d under reason missing, want 0 (no cost is read from it)", n)
	}
}

// responses that carry no body by definition (HEAD, 204, 304)
// on a jsonFields route are counted missing.
func TestResponseCostNoBodyCountsNothing(t *testing.T) {
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc   string
		method string
		status int
	}{
		{"HEAD", "HEAD", 200},
		{"204", "GET", 204},
		{"304", "GET", 304},
	} {
		h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(tc.status)
		}, nil)
		req := httptest.NewRequest(tc.method, "/", nil)
		req.Header.Set("X-API-Key", "k")
		h.ServeHTTP(httptest.NewRecorder(), req)
		settle(t, h)
		if n := atomic.LoadInt64(&h.top.ps[0].Metrics.CostMissing); n != 0 {
			t.Errorf("%s: counted %d under reason missing, want 0", tc.desc, n)
		}
	}
}
