package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HoldHeader names a request's hold group at a HeldBackend: a request
// that carries it is held until its group is released.
const HoldHeader = "X-Test-Hold"

// maxHold bounds a hold that nothing releases.
const maxHold = 30 * time.Second

// heldClient sends the requests a HeldBackend holds: its timeout is
// above maxHold.
var heldClient = &http.Client{
	Timeout:   40 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
}

// HeldBackend is a service that holds each request of a group (its
// HoldHeader) until the test releases the group, the request's context
// ends (its client, or the proxy in between, went away) or maxHold has
// passed; a request without the header is answered at once. It counts,
// by group, the requests it holds now, the most it held at once and all
// it served: what a concurrency cap lets through is measured where the
// cap applies, not by timing.
type HeldBackend struct {
	Addr   string
	mu     sync.Mutex
	groups map[string]*heldGroup
	server *http.Server
}

// heldGroup is one group's counts and its gate, closed by Release.
type heldGroup struct {
	now, peak, hits int64
	gate            chan struct{}
}

// StartHeldBackend serves on a free loopback port.
func StartHeldBackend() (*HeldBackend, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &HeldBackend{Addr: l.Addr().String(), groups: map[string]*heldGroup{}}
	b.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(b.serve)}
	go func() { _ = b.server.Serve(l) }()
	return b, nil
}

func (b *HeldBackend) serve(rw http.ResponseWriter, req *http.Request) {
	name, hold := req.Header.Get(HoldHeader), req.Header.Get(HoldHeader) != ""
	b.mu.Lock()
	g := b.group(name)
	g.hits++
	g.now++
	if g.now > g.peak {
		g.peak = g.now
	}
	gate := g.gate
	b.mu.Unlock()
	if hold {
		timer := time.NewTimer(maxHold)
		select {
		case <-gate:
		case <-req.Context().Done():
		case <-timer.C:
		}
		timer.Stop()
	}
	b.mu.Lock()
	g.now--
	b.mu.Unlock()
	rw.Header().Set("Content-Type", "text/plain")
	_, _ = rw.Write([]byte("ok\n"))
}

// group returns name's group, made on first use; b.mu is held.
func (b *HeldBackend) group(name string) *heldGroup {
	g := b.groups[name]
	if g == nil {
		g = &heldGroup{gate: make(chan struct{})}
		b.groups[name] = g
	}
	return g
}

// Release lets the requests of group name held now go; later ones are
// held until the next Release.
func (b *HeldBackend) Release(name string) {
	b.mu.Lock()
	g := b.group(name)
	close(g.gate)
	g.gate = make(chan struct{})
	b.mu.Unlock()
}

// Held returns the requests of group name held now.
func (b *HeldBackend) Held(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.group(name).now
}

// Peak returns the most requests of group name held at once.
func (b *HeldBackend) Peak(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.group(name).peak
}

// Hits returns the requests of group name served (held or not).
func (b *HeldBackend) Hits(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.group(name).hits
}

// WaitHeld waits until b holds n requests of group name, at most within.
func (b *HeldBackend) WaitHeld(name string, n int64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for b.Held(name) != n {
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s: %d held at the backend after %v, want %d", name, b.Held(name), within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Close releases every group and stops the server.
func (b *HeldBackend) Close() {
	b.mu.Lock()
	for _, g := range b.groups {
		close(g.gate)
		g.gate = make(chan struct{})
	}
	b.mu.Unlock()
	_ = b.server.Close()
}

// capItem returns the r and t of concurrency cap name's RateLimit item in
// h, and whether h's RateLimit-Policy has its item with q=max.
func capItem(h http.Header, name string, max int) (r, tt int, ok bool) {
	if !strings.Contains(h.Get("RateLimit-Policy"), fmt.Sprintf(`"%s";q=%d;qu="concurrent-requests"`, name, max)) {
		return 0, 0, false
	}
	for _, item := range strings.Split(h.Get("RateLimit"), ",") {
		if _, err := fmt.Sscanf(strings.TrimSpace(item), `"`+name+`";r=%d;t=%d`, &r, &tt); err == nil {
			return r, tt, true
		}
	}
	return 0, 0, false
}

// perRequest returns a client key per request: prefix-i.
func perRequest(prefix string) func(i int) string {
	return func(i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
}
