package e2e

// Helpers of the plans suite (plans_test.go): the auth server behind
// Traefik's forwardAuth, a backend that shows the X-Plan it received, and a
// Traefik whose web entrypoint trusts X-Forwarded-For from loopback (as a
// Traefik behind a load balancer trusts the balancer's).

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
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

// startTraefikTrustingLoopback is StartTraefik with the web entrypoint's
// forwardedHeaders.trustedIPs set to loopback: without it Traefik deletes
// the client's X-Forwarded-For before any middleware runs (and appends the
// connection's address only when it proxies), so an ipStrategy with depth
// would see no X-Forwarded-For and key every client by 127.0.0.1.
// (StartTraefik chooses the ports itself and its extra map replaces whole
// top-level sections, so it cannot add this to the entrypoint.)
func startTraefikTrustingLoopback(bin, dir, name, dynamicFile string) (*Traefik, error) {
	webPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	apiPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	t := &Traefik{Name: name, Web: fmt.Sprintf("127.0.0.1:%d", webPort), API: fmt.Sprintf("127.0.0.1:%d", apiPort),
		log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	static := map[string]interface{}{
		"global": map[string]interface{}{"checkNewVersion": false, "sendAnonymousUsage": false},
		"entryPoints": map[string]interface{}{
			"web": map[string]interface{}{"address": t.Web,
				"forwardedHeaders": map[string]interface{}{"trustedIPs": []interface{}{"127.0.0.1/32", "::1/128"}}},
			"traefik": map[string]interface{}{"address": t.API},
		},
		"api":  map[string]interface{}{"insecure": true, "dashboard": false},
		"ping": map[string]interface{}{},
		"log":  map[string]interface{}{"level": "ERROR", "noColor": true},
		"providers": map[string]interface{}{
			"providersThrottleDuration": "10ms",
			"file":                      map[string]interface{}{"filename": dynamicFile, "watch": true},
		},
		"experimental": map[string]interface{}{
			"localPlugins": map[string]interface{}{"tollgate": map[string]interface{}{"moduleName": ModuleName}},
		},
	}
	b, err := yaml.Marshal(static)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, name+".yml")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return nil, err
	}
	out, err := os.Create(t.log)
	if err != nil {
		return nil, err
	}
	t.cmd = exec.Command(bin, "--configFile="+conf)
	t.cmd.Dir = dir
	t.cmd.Stdout, t.cmd.Stderr = out, out
	t.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := t.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting traefik: %w", err)
	}
	go func() { _ = t.cmd.Wait(); out.Close(); close(t.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-t.done:
			return nil, fmt.Errorf("traefik %s exited at start:\n%s", name, t.Log())
		default:
		}
		if resp, err := http.Get("http://" + t.API + "/ping"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return t, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Stop()
	return nil, fmt.Errorf("traefik %s did not answer /ping:\n%s", name, t.Log())
}
