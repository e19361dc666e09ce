package e2e

// Helpers of the plans suite (plans_test.go): the auth server behind
// Traefik's forwardAuth and a backend that shows the X-Plan it received.

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// authServer is the service forwardAuth asks: "Authorization: Bearer
// tok-<plan>[-anything]" is answered 200 with "X-Plan: <plan>" for the
// plans free, pro and internal; tok-weird-* with "X-Plan: platinum" (a plan
// the middleware does not know); tok-none-* with 200 and no X-Plan at all;
// anything else 401. SetPlan overrides one token's plan (an upgrade).
type authServer struct {
	URL    string // the forwardAuth address
	calls  int64
	mu     sync.Mutex
	plans  map[string]string // token -> plan, overriding the prefix rule
	server *http.Server
}

func startAuthServer() (*authServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &authServer{URL: "http://" + l.Addr().String() + "/auth", plans: map[string]string{}}
	a.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(a.serve)}
	go func() { _ = a.server.Serve(l) }()
	return a, nil
}

func (a *authServer) serve(rw http.ResponseWriter, req *http.Request) {
	atomic.AddInt64(&a.calls, 1)
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		http.Error(rw, "no bearer token", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	plan, overridden := a.plans[tok]
	a.mu.Unlock()
	if !overridden {
		switch {
		case tokenIs(tok, "free"), tokenIs(tok, "pro"), tokenIs(tok, "internal"):
			plan = strings.SplitN(strings.TrimPrefix(tok, "tok-"), "-", 2)[0]
		case tokenIs(tok, "weird"):
			plan = "platinum"
		case tokenIs(tok, "none"):
			plan = ""
		default:
			http.Error(rw, "unknown token", http.StatusUnauthorized)
			return
		}
	}
	if plan != "" {
		rw.Header().Set("X-Plan", plan)
	}
	rw.WriteHeader(http.StatusOK)
}

// tokenIs reports whether tok is tok-<kind> or tok-<kind>-<anything>.
func tokenIs(tok, kind string) bool {
	return tok == "tok-"+kind || strings.HasPrefix(tok, "tok-"+kind+"-")
}

// SetPlan makes the server answer plan for tok from now on.
func (a *authServer) SetPlan(tok, plan string) {
	a.mu.Lock()
	a.plans[tok] = plan
	a.mu.Unlock()
}

// Calls is the number of requests forwardAuth made.
func (a *authServer) Calls() int64 { return atomic.LoadInt64(&a.calls) }

func (a *authServer) Close() { _ = a.server.Close() }

// echoBackend answers 200 with the X-Plan lines it received in the
// response header X-Seen-Plan ("<none>" when there were none), and counts
// the requests that reached it.
type echoBackend struct {
	Addr   string
	hits   int64
	server *http.Server
}

func startEchoBackend() (*echoBackend, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &echoBackend{Addr: l.Addr().String()}
	b.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		atomic.AddInt64(&b.hits, 1)
		seen := "<none>"
		if v, ok := req.Header["X-Plan"]; ok {
			seen = strings.Join(v, "|")
		}
		rw.Header().Set("X-Seen-Plan", seen)
		_, _ = rw.Write([]byte("ok\n"))
	})}
	go func() { _ = b.server.Serve(l) }()
	return b, nil
}

func (b *echoBackend) Hits() int64 { return atomic.LoadInt64(&b.hits) }

func (b *echoBackend) Close() { _ = b.server.Close() }
