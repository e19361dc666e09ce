package e2e

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Backend is the service behind the fleet: it answers 200 "ok" and counts
// the requests that reached it; a request's X-Test-Usage comes back as
// X-Usage-Tokens.
type Backend struct {
	Addr   string
	hits   int64
	server *http.Server
}

// StartBackend serves on a free loopback port.
func StartBackend() (*Backend, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Backend{Addr: l.Addr().String()}
	b.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		atomic.AddInt64(&b.hits, 1)
		if u := req.Header.Get("X-Test-Usage"); u != "" {
			rw.Header().Set("X-Usage-Tokens", u) // what the response says the request cost (responseCost)
		}
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = rw.Write([]byte("ok\n"))
	})}
	go func() { _ = b.server.Serve(l) }()
	return b, nil
}

// Hits is the number of requests served.
func (b *Backend) Hits() int64 { return atomic.LoadInt64(&b.hits) }

// CloseIdle closes the keep-alive connections idle on the server (the
// proxies' pooled connections to it), which keeps serving.
func (b *Backend) CloseIdle() {
	b.server.SetKeepAlivesEnabled(false) // closes the idle connections
	b.server.SetKeepAlivesEnabled(true)
}

// Close stops the server.
func (b *Backend) Close() { _ = b.server.Close() }
