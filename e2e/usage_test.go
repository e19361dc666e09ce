package e2e

// The usage suite (issue 36): what a response says it cost, read from its
// body (responseCost.jsonFields, maxScan) or its header (taken out of the
// response unless keepHeader), charged to the client's bucket once the
// response has ended. One body of cases runs on three real Traefik
// replicas (the plugin under Traefik's Yaegi) and in process, compiled and
// interpreted by the e2e loader, in front of one backend that answers as
// an LLM API does (usageBackend).
//
// Every route's limit is 25 a minute, burst 25, cost 1: a response that
// says 10 is charged 9 more. Charges are queued off the response's path,
// so a case waits, bounded, until the replicas' counters
// (tollgate_response_cost_tokens_total: counted once Redis took the
// charge) say they landed before it sends the next request. A charge the
// plugin must not make is shown absent by a barrier: a later request of
// the same replica, key and class whose charge has another amount; the
// replica's queue sends its charges in order, so once the barrier's has
// landed any earlier one has too.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The counters the cases read (internal/metrics).
const (
	usageTokens = "tollgate_response_cost_tokens_total"
	usageErrors = "tollgate_response_cost_errors_total"
)

// usageRoute is one router of the suite and its own middleware, of class
// "usage-"+name, served at /name/; cost is its responseCost (nil: none).
type usageRoute struct {
	name string
	cost map[string]interface{}
}

// usageRoutes are the suite's routes: one per case, so that each case
// reads its own class's counters.
func usageRoutes() []usageRoute {
	body := func(kv ...interface{}) map[string]interface{} {
		return withResponseCost(map[string]interface{}{"jsonFields": []interface{}{"usage.total_tokens"}, "max": 1000}, kv...)
	}
	header := func(kv ...interface{}) map[string]interface{} {
		return withResponseCost(map[string]interface{}{"header": "X-Usage-Tokens", "max": 1000}, kv...)
	}
	return []usageRoute{
		{"json", body()},
		{"sse", body()},
		{"ssectl", nil}, // the same limit without responseCost: no wrapper
		{"abort", body()},
		{"ws", body()},
		{"wshdr", header()},
		{"gzip", body()},
		{"scan", body("maxScan", 4096)},
		{"header", header()},
		{"keep", header("keepHeader", true)},
	}
}

func withResponseCost(m map[string]interface{}, kv ...interface{}) map[string]interface{} {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// usageOpts is route r's middleware configuration on redisAddr.
func usageOpts(redisAddr string, r usageRoute) map[string]interface{} {
	o := limitOpts(redisAddr, "class", "usage-"+r.name, "average", 25, "period", "1m", "burst", 25, "redis.timeout", "1s")
	if r.cost != nil {
		o["responseCost"] = r.cost
	}
	return o
}

// usageDynamic is Traefik's dynamic configuration of the suite: a router
// and a middleware per route, the service "usage" at backendAddr, and the
// metrics router.
func usageDynamic(redisAddr, backendAddr string) (map[string]interface{}, []string) {
	routers, mws := map[string]interface{}{}, map[string]interface{}{}
	names := []string{drillMetrics}
	for _, r := range usageRoutes() {
		name := "usage-" + r.name
		routers[name] = map[string]interface{}{"rule": "PathPrefix(`/" + r.name + "/`)", "service": "usage",
			"entryPoints": []interface{}{"web"}, "middlewares": []interface{}{name + "-limit"}}
		mws[name+"-limit"] = map[string]interface{}{"plugin": map[string]interface{}{"tollgate": usageOpts(redisAddr, r)}}
		names = append(names, name+"@file")
	}
	conf := map[string]interface{}{"http": map[string]interface{}{
		"routers":     routers,
		"middlewares": mws,
		"services": map[string]interface{}{"usage": map[string]interface{}{"loadBalancer": map[string]interface{}{
			"servers": []interface{}{map[string]interface{}{"url": "http://" + backendAddr}}}}},
	}}
	return withMetricsRouter(conf), names
}

// usageSite is where the cases send their requests: the base URLs of the
// replicas (one in process), each serving the suite's routes and the
// metrics at metricsPath, in front of backend.
type usageSite struct {
	bases   []string
	backend *usageBackend
	proxied bool // next is a reverse proxy to backend (Traefik's), not backend's handler
}

func TestUsageTraefik(t *testing.T) {
	b := startUsageBackend(t)
	dir, r := fleetRedis(t)
	conf, routers := usageDynamic(r.Addr, b.Addr)
	fe := fleetIn(t, dir, 3, conf, routers...)
	s := &usageSite{backend: b, proxied: true}
	for _, tr := range fe.fleet.Replicas {
		s.bases = append(s.bases, "http://"+tr.Web)
	}
	runUsageCases(t, s)
}

func TestUsageInProcess(t *testing.T) {
	// The same cases on the e2e loader's pods behind net/http's server,
	// next being the backend behind httputil.ReverseProxy, as in Traefik
	// (proxy), or the backend's handler itself (handler: a status set by
	// the first Write). Under Yaegi the compiled next gets the interpreted
	// usage.Writer as Yaegi hands it over (yaegi #1600: no Flusher).
	forEachKind(t, func(t *testing.T, e *env) {
		f := e.pod()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("plugin stderr:\n%s", e.logs.String())
			}
		})
		for _, front := range []string{"proxy", "handler"} {
			t.Run(front, func(t *testing.T) {
				b := startUsageBackend(t)
				var next http.Handler = b
				if front == "proxy" {
					next = usageProxy(b)
				}
				mux := http.NewServeMux()
				for _, r := range usageRoutes() {
					h, err := f.New(context.Background(), next, usageOpts(e.redis.Addr, r), "usage-"+r.name+"-limit@file")
					if err != nil {
						t.Fatalf("New %s: %v", r.name, err)
					}
					mux.Handle("/"+r.name+"/", h)
				}
				mux.Handle(metricsPath, e.handler(f, drillMetrics, map[string]interface{}{"serveMetrics": true}))
				srv := httptest.NewServer(mux)
				t.Cleanup(srv.Close)
				runUsageCases(t, &usageSite{bases: []string{srv.URL}, backend: b, proxied: front == "proxy"})
			})
		}
	})
}

// usageProxy is b behind a reverse proxy as Traefik's: events flushed as
// they come; its transport, as Traefik's, asks for gzip when the request
// does not and decodes it.
func usageProxy(b *usageBackend) http.Handler {
	p := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: b.Addr})
	p.Transport = &http.Transport{MaxIdleConnsPerHost: 16}
	p.ErrorLog = log.New(io.Discard, "", 0) // a client gone mid-stream is logged
	return p
}

func runUsageCases(t *testing.T, s *usageSite) {
	t.Run("JSONBody", func(t *testing.T) { usageJSONBody(t, s) })
	t.Run("EventStream", func(t *testing.T) { usageEventStream(t, s) })
	t.Run("EventStreamNotHeldBack", func(t *testing.T) { usageEventStreamNotHeldBack(t, s) })
	t.Run("HeaderTakenOut", func(t *testing.T) { usageHeaderTakenOut(t, s) })
	t.Run("AbortedStream", func(t *testing.T) { usageAbortedStream(t, s) })
	t.Run("WebSocket", func(t *testing.T) { usageWebSocket(t, s) })
	t.Run("WebSocketCostHeader", func(t *testing.T) { usageWebSocketCostHeader(t, s) })
	t.Run("GzipBody", func(t *testing.T) { usageGzipBody(t, s) })
	t.Run("MaxScan", func(t *testing.T) { usageMaxScan(t, s) })
}

// usageSequence sends 5 requests for path (replica i%n for request i) and
// wants 200, 200, 200, 429, 429: each 200's response says 10, so its
// charge of 9 more is waited for before the next request; body checks
// each 200's body.
func usageSequence(t *testing.T, s *usageSite, class, path string, body func(string) error) {
	t.Helper()
	key := fleetKey(t, "seq")
	labels := map[string]string{"class": class}
	charged := s.metric(t, usageTokens, labels)
	var rs []int
	for i, want := range []int{200, 200, 200, 429, 429} {
		r := s.get(t, i, path, key, nil)
		rs = append(rs, limitRemaining(r.header))
		if r.status != want {
			t.Fatalf("request %d (replica %d): status %d, want %d; RateLimit r= so far %v", i+1, i%len(s.bases), r.status, want, rs)
		}
		if r.status != 200 {
			continue
		}
		if err := body(r.body); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		charged += 9
		s.waitMetric(t, usageTokens, labels, charged, fmt.Sprintf("request %d's charge", i+1))
	}
	// 25 - 1 = 24, less 9 charged and 1 taken: 14 (15 once 2.4 s have
	// refilled a token). Were only the request's cost taken: 23.
	if rs[0] != 24 || rs[1] < 14 || rs[1] > 15 {
		t.Errorf("RateLimit r= of the requests %v, want 24 then 14 or 15 (each response charged 10)", rs)
	}
	t.Logf("200, 200, 200, 429, 429; RateLimit r= %v", rs)
}

func usageJSONBody(t *testing.T, s *usageSite) {
	// {"usage":{"total_tokens":10}}, application/json.
	usageSequence(t, s, "usage-json", "/json/json", func(b string) error {
		if b != usageJSON(10) {
			return fmt.Errorf("body %q, want the backend's %q", b, usageJSON(10))
		}
		return nil
	})
}

func usageEventStream(t *testing.T, s *usageSite) {
	// 5 events 150 ms apart, the last before [DONE] carrying usage 10;
	// the others "usage":null, as OpenAI's include_usage sends them.
	usageSequence(t, s, "usage-sse", "/sse/sse", func(b string) error {
		ev := strings.SplitAfter(b, "\n\n")
		if len(ev) != 7 || ev[6] != "" || ev[5] != "data: [DONE]\n\n" || ev[4] != sseEvent(5, true) {
			return fmt.Errorf("stream %q, want 5 events, the last with usage, then [DONE]", b)
		}
		return nil
	})
}

// streamTiming is one stream read through a route: when the client read
// each event against when the backend wrote it.
type streamTiming struct {
	latency time.Duration // first event: read by the client less written by the backend
	ttfe    time.Duration // first event: read by the client less the request sent
	span    time.Duration // the backend's last event written less its first
	lead    time.Duration // the backend's last event written less the client's first event read
	err     error
}

// readStream sends GET path for a fresh key to base, reads the whole
// stream and times it against the backend's log.
func readStream(s *usageSite, base, path string) streamTiming {
	id := fmt.Sprintf("stream-%d-%s", time.Now().UnixNano(), wsKey())
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("X-API-Key", id)
	req.Header.Set(streamHeader, id)
	start := time.Now()
	resp, err := fleetClient.Do(req)
	if err != nil {
		return streamTiming{err: err}
	}
	got := readSSE(resp.Body, -1)
	resp.Body.Close()
	if resp.StatusCode != 200 || got.err != nil {
		return streamTiming{err: fmt.Errorf("status %d, %v", resp.StatusCode, got.err)}
	}
	sl, err := s.backend.waitStream(id, 5*time.Second)
	if err != nil {
		return streamTiming{err: err}
	}
	if string(got.raw) != string(sl.body) || len(got.at) != sl.chunks {
		return streamTiming{err: fmt.Errorf("read %q (%d events), the backend wrote %q (%d)", got.raw, len(got.at), sl.body, sl.chunks)}
	}
	last := sl.wrote[len(sl.wrote)-1]
	return streamTiming{latency: got.at[0].Sub(sl.wrote[0]), ttfe: got.at[0].Sub(start), span: last.Sub(sl.wrote[0]), lead: last.Sub(got.at[0])}
}

func usageEventStreamNotHeldBack(t *testing.T, s *usageSite) {
	// Each event reaches the client as it is written: rounds of three
	// streams at once, of 5 parts 150 ms apart (600 ms from the first to
	// the last): events through the responseCost route, the same through
	// the same limit without it (no wrapper), and a JSON body of no known
	// length through the responseCost route. In each, the first part must
	// be read before the backend writes the last (a wrapper that held the
	// body back until the end would give ~600 ms); over the rounds, the
	// median latency of the first part through responseCost must stay
	// under a quarter of the stream and within 100 ms of the route
	// without it.
	const rounds = 3
	paths := []struct{ what, path string }{
		{"events, responseCost", "/sse/sse"},
		{"events, no responseCost", "/ssectl/sse"},
		{"JSON of no known length, responseCost", "/sse/slowjson"},
	}
	byPath := make([][]streamTiming, len(paths))
	for i := 0; i < rounds; i++ {
		round := make([]streamTiming, len(paths))
		var wg sync.WaitGroup
		base := s.bases[i%len(s.bases)]
		for j, p := range paths {
			wg.Add(1)
			go func(j int, path string) { defer wg.Done(); round[j] = readStream(s, base, path) }(j, p.path)
		}
		wg.Wait()
		for j, st := range round {
			if st.err != nil {
				t.Fatalf("round %d, %s: %v", i+1, paths[j].what, st.err)
			}
			if st.span < 600*time.Millisecond || st.lead <= 0 {
				t.Errorf("round %d, %s: first part read %v after the backend wrote it, its stream lasting %v: want it read before the stream's last part (%v before)",
					i+1, paths[j].what, st.latency, st.span, st.lead)
			}
			byPath[j] = append(byPath[j], st)
		}
		t.Logf("round %d: first part read after written (after the request sent): %s %v (%v), %s %v (%v), %s %v (%v); streams of %v",
			i+1, paths[0].what, round[0].latency.Round(10*time.Microsecond), round[0].ttfe.Round(10*time.Microsecond),
			paths[1].what, round[1].latency.Round(10*time.Microsecond), round[1].ttfe.Round(10*time.Microsecond),
			paths[2].what, round[2].latency.Round(10*time.Microsecond), round[2].ttfe.Round(10*time.Microsecond), round[0].span.Round(time.Millisecond))
	}
	mc, mp, mj := medianTiming(byPath[0]), medianTiming(byPath[1]), medianTiming(byPath[2])
	if mc.latency > mc.span/4 || mc.latency > mp.latency+100*time.Millisecond || mj.latency > mj.span/4 {
		t.Errorf("median first-part latency %v for events with responseCost, %v without, %v for JSON of no known length; streams of %v: want under a quarter of the stream and within 100 ms of the route without",
			mc.latency, mp.latency, mj.latency, mc.span)
	}
}

// medianTiming is the stream of the median latency of sts.
func medianTiming(sts []streamTiming) streamTiming {
	c := append([]streamTiming(nil), sts...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j].latency < c[i].latency {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c[len(c)/2]
}

func usageHeaderTakenOut(t *testing.T, s *usageSite) {
	// header mode: X-Usage-Tokens: 7 is read (6 charged), and the client
	// never sees it unless keepHeader; status, every other header and the
	// body as the backend sent them. The backend sets the status by
	// WriteHeader (201) or by its first Write (200).
	for _, c := range []struct {
		route string
		keep  bool
	}{{"header", false}, {"keep", true}} {
		class := map[string]string{"class": "usage-" + c.route}
		charged := s.metric(t, usageTokens, class)
		for i, q := range []string{"?status=201", ""} {
			direct := getDirect(t, "http://"+s.backend.Addr+"/header"+q)
			via := s.get(t, i, "/"+c.route+"/header"+q, fleetKey(t, c.route), nil)
			if direct.header.Get("X-Usage-Tokens") != "7" || via.header.Get("RateLimit") == "" {
				t.Fatalf("%s%s: the backend's X-Usage-Tokens %q, the plugin's RateLimit %q: the fixture is broken",
					c.route, q, direct.header.Get("X-Usage-Tokens"), via.header.Get("RateLimit"))
			}
			if _, seen := via.header["X-Usage-Tokens"]; seen != c.keep {
				t.Errorf("%s%s (keepHeader %v): the client saw X-Usage-Tokens: %v", c.route, q, c.keep, seen)
			}
			want := direct.header.Clone()
			got := via.header.Clone()
			for _, h := range []string{"Date", "RateLimit", "RateLimit-Policy"} {
				want.Del(h)
				got.Del(h)
			}
			if !c.keep {
				want.Del("X-Usage-Tokens")
			}
			if via.status != direct.status || via.body != direct.body || !reflect.DeepEqual(got, want) {
				t.Errorf("%s%s: the client got %d %v %q; the backend sent %d %v %q (Date and RateLimit aside, X-Usage-Tokens taken out unless keepHeader)",
					c.route, q, via.status, got, via.body, direct.status, want, direct.body)
			}
			charged += 6
			s.waitMetric(t, usageTokens, class, charged, c.route+q+"'s charge")
		}
	}
}

func usageAbortedStream(t *testing.T, s *usageSite) {
	// A stream of 100 events 100 ms apart; the client reads 2 events and
	// goes. When the 2nd said 10, the request is charged 10 in all (the
	// next request's r= is 14, not 23); when only the last would have,
	// it is charged its cost, 1 (missing counted).
	class := map[string]string{"class": "usage-abort"}
	missing := map[string]string{"class": "usage-abort", "reason": "missing"}
	for _, c := range []struct {
		desc     string
		usageAt  int
		charge   float64
		min, max int // the next request's RateLimit r=
	}{
		{"usage in the 2nd event", 2, 9, 14, 15},
		{"usage in the last event only", 100, 0, 23, 24},
	} {
		charged, missed := s.metric(t, usageTokens, class), s.metric(t, usageErrors, missing)
		key, id := fleetKey(t, "abort"), fmt.Sprintf("abort-%d", time.Now().UnixNano())
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.bases[0]+"/abort/sse?n=100&gap=100ms&usageAt="+strconv.Itoa(c.usageAt), nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set(streamHeader, id)
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", c.desc, err)
		}
		got := readSSE(resp.Body, 2)
		resp.Body.Close() // before its end: the connection is closed
		cancel()
		client.CloseIdleConnections()
		if resp.StatusCode != 200 || len(got.at) != 2 || limitRemaining(resp.Header) != 24 {
			t.Fatalf("%s: status %d, RateLimit %q, %d events read (%v)", c.desc, resp.StatusCode, resp.Header.Get("RateLimit"), len(got.at), got.err)
		}
		sl, err := s.backend.waitStream(id, 5*time.Second)
		if err != nil || !sl.gone || len(sl.wrote) >= 100 {
			t.Fatalf("%s: the backend's stream did not end early, the client gone (%v, %d events written)", c.desc, err, len(sl.wrote))
		}
		if c.charge > 0 {
			s.waitMetric(t, usageTokens, class, charged+c.charge, c.desc+": the aborted stream's charge")
		} else {
			s.waitMetric(t, usageErrors, missing, missed+1, c.desc+": the aborted stream counted missing")
		}
		next := s.get(t, 0, "/abort/plain", key, nil) // text/plain: nothing read, nothing charged
		if r := limitRemaining(next.header); next.status != 200 || r < c.min || r > c.max {
			t.Errorf("%s: after the client read 2 of 100 events and went, the next request: %d, RateLimit r=%d, want 200 and r= %d..%d",
				c.desc, next.status, r, c.min, c.max)
		}
		if after := s.metric(t, usageTokens, class); after != charged+c.charge {
			t.Errorf("%s: %v tokens charged, want %v", c.desc, after-charged, c.charge)
		}
		t.Logf("%s: client gone after 2 events, the backend stopped after %d; next request's RateLimit %q", c.desc, len(sl.wrote), next.header.Get("RateLimit"))
	}
}

func usageWebSocket(t *testing.T, s *usageSite) {
	// A WebSocket handshake through the responseCost route (jsonFields):
	// the backend hijacks, answers 101 by hand and echoes; the client
	// reads its bytes back. The upgrade has no body to read: it is
	// charged its cost and counts nothing missing. (The text/plain
	// request after it, which does count missing, is the barrier: it is
	// sent once the backend's side has ended.)
	missing := map[string]string{"class": "usage-ws", "reason": "missing"}
	missed := s.metric(t, usageErrors, missing)
	key := fleetKey(t, "ws")
	resp := wsRoundTrip(t, s, "/ws/ws", key)
	if r := s.get(t, 0, "/ws/plain", key, nil); r.status != 200 || limitRemaining(r.header) != 23 {
		t.Errorf("after the WebSocket: GET /ws/plain %d, RateLimit %q, want 200 and r=23 (the upgrade charged its cost)", r.status, r.header.Get("RateLimit"))
	}
	s.waitMetric(t, usageErrors, missing, missed+1, "the text/plain request after the upgrade counted missing, the upgrade nothing")
	t.Logf("101 and echoes through the responseCost route; the 101's RateLimit %q", resp.Header.Get("RateLimit"))
}

func usageWebSocketCostHeader(t *testing.T, s *usageSite) {
	// header mode, a backend whose 101 carries X-Usage-Tokens: 7 (written
	// by WriteHeader, then the hijack; behind a proxy, how it wrote it
	// does not matter, the proxy reads it off the wire). An upgrade is
	// charged its cost only (docs/quotas-and-costs.md, "Not read"): the
	// next request's r= is 23, not 17. Whether the client's 101 carries
	// the header is logged, not asserted: the docs let a 101's headers
	// pass as the backend wrote them, which a proxy does, while a
	// handler's WriteHeader(101) has it taken out.
	key := fleetKey(t, "wshdr")
	resp := wsRoundTrip(t, s, "/wshdr/ws?writeHeader=1&usage=7", key)
	r := s.get(t, 0, "/wshdr/plain", key, nil)
	if r.status != 200 || limitRemaining(r.header) != 23 {
		t.Errorf("after an upgrade whose 101 said X-Usage-Tokens: 7: GET /wshdr/plain %d, RateLimit %q, want 200 and r=23 (the upgrade charged its cost only)",
			r.status, r.header.Get("RateLimit"))
	}
	_, seen := resp.Header["X-Usage-Tokens"]
	t.Logf("101 through a header-mode route: the client saw X-Usage-Tokens: %v; the next request's RateLimit %q", seen, r.header.Get("RateLimit"))
}

// wsRoundTrip upgrades GET path (the backend's ws) through replica 0 for
// key, sends two messages and reads each back, closes the connection,
// and waits (5 s at most) until the backend's side has ended. It returns
// the handshake's answer.
func wsRoundTrip(t *testing.T, s *usageSite, path, key string) *http.Response {
	t.Helper()
	upgrades := atomic.LoadInt64(&s.backend.upgrades)
	u, _ := url.Parse(s.bases[0])
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	nonce := wsKey()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-API-Key: %s\r\n\r\n",
		path, u.Host, nonce, key)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the handshake's answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
		resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(nonce) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.Fatalf("handshake: %d %v %q, want 101 with Upgrade: websocket and the accept of the key", resp.StatusCode, resp.Header, b)
	}
	for _, msg := range []string{"hello through tollgate", "and a second frame"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	conn.Close()
	if n := atomic.LoadInt64(&s.backend.upgrades) - upgrades; n != 1 {
		t.Errorf("the backend upgraded %d connections, want 1", n)
	}
	for deadline := time.Now().Add(5 * time.Second); atomic.LoadInt64(&s.backend.upgraded) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the backend's WebSocket still open 5 s after the client closed")
		}
	}
	return resp
}

func usageGzipBody(t *testing.T, s *usageSite) {
	// A compressed JSON body is not read. Deflate, which no proxy
	// decodes: the request is charged its cost only, counted encoded, and
	// the client gets the bytes as compressed. A barrier (a JSON response
	// of 30 on the same replica and key, 29 charged) shows nothing else
	// was charged. Gzip: the route takes Accept-Encoding off the request;
	// a proxy's transport (Traefik's, net/http's) then asks for gzip
	// itself and decodes the body, which is read and charged (9); a
	// backend that compresses only when asked answers a bare handler in
	// clear. The client gets clear JSON either way, though it asked for
	// gzip; only gzip sent to a bare handler unasked stays encoded.
	class := map[string]string{"class": "usage-gzip"}
	encoded := map[string]string{"class": "usage-gzip", "reason": "encoded"}
	charged, enc := s.metric(t, usageTokens, class), s.metric(t, usageErrors, encoded)
	b := s.backend
	gz := map[string]string{"Accept-Encoding": "gzip, deflate"}
	key := fleetKey(t, "deflate")
	r := s.get(t, 0, "/gzip/deflate", key, gz)
	if r.status != 200 || r.header.Get("Content-Encoding") != "deflate" || r.body != string(deflated(usageJSON(10))) || limitRemaining(r.header) != 24 {
		t.Fatalf("deflate: %d %v %q, want 200, the backend's deflate bytes and r=24", r.status, r.header, r.body)
	}
	s.waitMetric(t, usageErrors, encoded, enc+1, "the deflate body counted encoded")
	// The barrier's r= is read before its own charge: 25 - 2 = 23 (24
	// once a token has refilled); a deflate body charged 9 would leave 14.
	if br := s.get(t, 0, "/gzip/json?tokens=30", key, nil); br.status != 200 || limitRemaining(br.header) < 23 || limitRemaining(br.header) > 24 {
		t.Fatalf("barrier: status %d, RateLimit %q, want 200 and r=23 or 24 (the deflate request charged its cost only)", br.status, br.header.Get("RateLimit"))
	}
	charged += 29
	s.waitMetric(t, usageTokens, class, charged, "the barrier's charge, alone")

	clear := func(what string, r reply) {
		t.Helper()
		if r.status != 200 || r.header.Get("Content-Encoding") != "" || r.body != usageJSON(10) {
			t.Fatalf("%s: %d %v %q, want 200 and the JSON in clear", what, r.status, r.header, r.body)
		}
	}
	key = fleetKey(t, "gzip")
	r = s.get(t, 0, "/gzip/gzip", key, gz)
	if s.proxied {
		clear("gzip whatever is asked, decoded by the proxy", r)
		charged += 9
		s.waitMetric(t, usageTokens, class, charged, "the gzip body, decoded by the proxy, charged")
	} else {
		if r.status != 200 || r.header.Get("Content-Encoding") != "gzip" || r.body != string(gzipped(usageJSON(10))) {
			t.Fatalf("gzip whatever is asked, to a bare handler: %d %v %q, want 200 and the backend's gzip bytes", r.status, r.header, r.body)
		}
		s.waitMetric(t, usageErrors, encoded, enc+2, "the gzip body counted encoded")
	}
	b.mu.Lock()
	asked := len(b.acceptEncoding)
	b.mu.Unlock()
	r = s.get(t, 0, "/gzip/gzipif", key, gz)
	clear("gzip when asked", r)
	charged += 9
	// The last charge queued: once it has landed, any other has too.
	s.waitMetric(t, usageTokens, class, charged, "the gzipif body charged")
	b.mu.Lock()
	seen := append([]string(nil), b.acceptEncoding[asked:]...)
	b.mu.Unlock()
	t.Logf("deflate: counted encoded, charged its cost only; gzip when asked: the client asked %q, the backend was asked %q, the client got it in clear, charged", gz["Accept-Encoding"], seen)
}

func usageMaxScan(t *testing.T, s *usageSite) {
	// maxScan 4096, a 100 KB body: its usage object at the end is read
	// from the tail (9 charged); at its start, out of the tail, it is not
	// (missing counted, nothing charged). Both reach the client whole.
	class := map[string]string{"class": "usage-scan"}
	missing := map[string]string{"class": "usage-scan", "reason": "missing"}
	charged, missed := s.metric(t, usageTokens, class), s.metric(t, usageErrors, missing)
	head := s.get(t, 0, "/scan/bighead", fleetKey(t, "head"), nil)
	if head.status != 200 || head.body != bigBody(false) {
		t.Fatalf("bighead: %d, %d bytes (want the backend's %d)", head.status, len(head.body), len(bigBody(false)))
	}
	s.waitMetric(t, usageErrors, missing, missed+1, "usage past maxScan from the end counted missing")
	key := fleetKey(t, "tail")
	tail := s.get(t, 0, "/scan/big", key, nil)
	if tail.status != 200 || tail.body != bigBody(true) {
		t.Fatalf("big: %d, %d bytes (want the backend's %d)", tail.status, len(tail.body), len(bigBody(true)))
	}
	s.waitMetric(t, usageTokens, class, charged+9, "the 100 KB body's charge, read from its tail")
	if r := s.get(t, 0, "/scan/plain", key, nil); limitRemaining(r.header) < 14 || limitRemaining(r.header) > 15 {
		t.Errorf("after the 100 KB body: RateLimit %q, want r=14 or 15 (10 charged)", r.header.Get("RateLimit"))
	}
	t.Logf("a %d-byte body, maxScan 4096: charged from its tail", len(bigBody(true)))
}

// get sends GET path with key (and the headers h) to replica i%n and
// reads the whole reply.
func (s *usageSite) get(t *testing.T, i int, path, key string, h map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequest("GET", s.bases[i%len(s.bases)]+path, nil)
	req.Header.Set("X-API-Key", key)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := fleetClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// getDirect is GET u, straight to the backend.
func getDirect(t *testing.T, u string) reply {
	t.Helper()
	status, h, b, err := getBody(u)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: status, header: h, body: string(b)}
}

// metric is the sum over the replicas of the series of name with labels.
func (s *usageSite) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, base := range s.bases {
		status, _, body, err := getBody(base + metricsPath)
		if err != nil || status != 200 {
			t.Fatalf("GET %s%s: %d %v", base, metricsPath, status, err)
		}
		v, _ := MetricValue(string(body), name, labels)
		sum += v
	}
	return sum
}

// waitMetric waits, at most 10 s, until metric reaches want, and fails if
// it does not or passes it (the counters only grow).
func (s *usageSite) waitMetric(t *testing.T, name string, labels map[string]string, want float64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.metric(t, name, labels)
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s: %s%v = %v, want %v", what, name, labels, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// limitRemaining is the r= of a RateLimit header's first item, -1 when none.
func limitRemaining(h http.Header) int {
	for _, p := range strings.Split(h.Get("RateLimit"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "r="); ok {
			if n, err := strconv.Atoi(strings.TrimRight(v, ", ")); err == nil {
				return n
			}
		}
	}
	return -1
}

// sseRead is what readSSE read: the bytes, and when each event
// (ended by an empty line) was read whole.
type sseRead struct {
	raw []byte
	at  []time.Time
	err error
}

// readSSE reads body's events, up to max (-1: to its end).
func readSSE(body io.Reader, max int) sseRead {
	var out sseRead
	br := bufio.NewReader(body)
	for max < 0 || len(out.at) < max {
		line, err := br.ReadString('\n')
		out.raw = append(out.raw, line...)
		if err != nil {
			if err != io.EOF {
				out.err = err
			}
			return out
		}
		if line == "\n" {
			out.at = append(out.at, time.Now())
		}
	}
	return out
}

// streamHeader names a stream in the backend's log.
const streamHeader = "X-Test-Stream"

// usageBackend answers as an LLM API does, by the last element of the
// request's path (the routes' prefixes pick the middleware):
//
//	json     usageJSON(?tokens, default 10), application/json
//	sse      an event stream: ?n events (5) ?gap apart (150ms), each
//	         flushed; event ?usageAt (n) says 10, the others
//	         "usage":null; then data: [DONE]. It stops when the client goes.
//	header   text/plain with X-Usage-Tokens: 7 and headers of its own;
//	         ?status by WriteHeader, else 200 by the first Write
//	slowjson usageJSON(10) as a stream: 5 parts ?gap apart (150ms), each
//	         flushed, no Content-Length; logged as sse is
//	gzip     usageJSON(10) gzip-encoded, whatever the request accepts
//	gzipif   the same when the request accepts gzip, else in clear
//	deflate  usageJSON(10) deflate-encoded (RFC 1950, which no Go
//	         transport decodes), whatever the request accepts
//	big      a 100 KB JSON body, its usage object (10) at the end
//	bighead  the same, its usage object at the start
//	ws       a WebSocket handshake by hand (Hijack), or by WriteHeader(101)
//	         then Hijack (?writeHeader); its 101 carries ?usage as
//	         X-Usage-Tokens; then an echo
//	else     text/plain "ok"
//
// A stream named by its request's streamHeader is logged (waitStream).
type usageBackend struct {
	Addr     string
	server   *http.Server
	upgrades int64 // WebSocket connections hijacked (atomic)
	upgraded int64 // of which still open (atomic)

	mu             sync.Mutex
	streams        map[string]*streamLog
	acceptEncoding []string // of each gzip request, as it came
}

// streamLog is what the backend wrote of a stream.
type streamLog struct {
	wrote  []time.Time // when each event was handed to the writer (not [DONE])
	body   []byte      // every byte written
	chunks int         // writes: the events and [DONE]
	ended  bool        // the handler returned
	gone   bool        // because the client went
}

func startUsageBackend(t *testing.T) *usageBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &usageBackend{Addr: l.Addr().String(), streams: map[string]*streamLog{}}
	b.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: b}
	go func() { _ = b.server.Serve(l) }()
	t.Cleanup(func() { _ = b.server.Close() })
	return b
}

// ServeHTTP implements http.Handler.
func (b *usageBackend) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	switch path.Base(req.URL.Path) {
	case "json":
		n, _ := strconv.Atoi(q.Get("tokens"))
		if n == 0 {
			n = 10
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, usageJSON(n))
	case "sse", "slowjson":
		b.stream(rw, req)
	case "header":
		h := rw.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Usage-Tokens", "7")
		h.Set("X-Backend", "usage")
		h.Set("Cache-Control", "no-store")
		h["Set-Cookie"] = []string{"a=1; Path=/", "b=2; Path=/"}
		const body = "the answer, in two writes\n"
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if code, err := strconv.Atoi(q.Get("status")); err == nil {
			rw.WriteHeader(code)
		}
		_, _ = io.WriteString(rw, body[:10])
		_, _ = io.WriteString(rw, body[10:])
	case "gzip", "gzipif":
		rw.Header().Set("Content-Type", "application/json")
		b.mu.Lock()
		b.acceptEncoding = append(b.acceptEncoding, req.Header.Get("Accept-Encoding"))
		b.mu.Unlock()
		if path.Base(req.URL.Path) == "gzipif" && !strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(rw, usageJSON(10))
			return
		}
		rw.Header().Set("Content-Encoding", "gzip")
		_, _ = rw.Write(gzipped(usageJSON(10)))
	case "deflate":
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Content-Encoding", "deflate")
		_, _ = rw.Write(deflated(usageJSON(10)))
	case "big", "bighead":
		rw.Header().Set("Content-Type", "application/json")
		body := bigBody(path.Base(req.URL.Path) == "big")
		for len(body) > 0 { // in writes of 1000 bytes: the tail spans them
			n := 1000
			if n > len(body) {
				n = len(body)
			}
			_, _ = io.WriteString(rw, body[:n])
			body = body[n:]
		}
	case "ws":
		b.webSocket(rw, req)
	default:
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(rw, "ok\n")
	}
}

// usageJSON is a chat completion that says it cost n tokens.
func usageJSON(n int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"}}],"usage":{"prompt_tokens":4,"completion_tokens":%d,"total_tokens":%d}}`, n-4, n)
}

// sseEvent is event i of a stream; with usage it says 10 tokens.
func sseEvent(i int, usage bool) string {
	if usage {
		return `data: {"id":"chatcmpl-s","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}}` + "\n\n"
	}
	return fmt.Sprintf(`data: {"id":"chatcmpl-s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token %d"}}],"usage":null}`+"\n\n", i)
}

// bigBody is a completion of over 100 KB, its usage object (10 tokens) at
// its end (tail) or at its start.
func bigBody(tail bool) string {
	text := strings.Repeat("lorem ipsum dolor sit amet ", 3800)
	const usage = `"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}`
	if tail {
		return `{"id":"big","choices":[{"index":0,"text":"` + text + `"}],` + usage + `}`
	}
	return `{"id":"big",` + usage + `,"choices":[{"index":0,"text":"` + text + `"}]}`
}

func deflated(s string) []byte {
	var buf bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&buf, zlib.BestCompression)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return buf.Bytes()
}

func gzipped(s string) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return buf.Bytes()
}

// stream writes the sse answer (see usageBackend).
func (b *usageBackend) stream(rw http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	n, _ := strconv.Atoi(q.Get("n"))
	if n <= 0 {
		n = 5
	}
	gap, err := time.ParseDuration(q.Get("gap"))
	if err != nil {
		gap = 150 * time.Millisecond
	}
	at, _ := strconv.Atoi(q.Get("usageAt"))
	if at <= 0 {
		at = n
	}
	contentType, done := "text/event-stream", "data: [DONE]\n\n"
	parts := make([]string, n)
	for i := range parts {
		parts[i] = sseEvent(i+1, i+1 == at)
	}
	if path.Base(req.URL.Path) == "slowjson" {
		contentType, done, parts = "application/json", "", slowJSON
	}
	sl := &streamLog{}
	defer func() {
		b.mu.Lock()
		sl.ended = true
		b.mu.Unlock()
	}()
	if id := req.Header.Get(streamHeader); id != "" {
		b.mu.Lock()
		b.streams[id] = sl
		b.mu.Unlock()
	}
	rw.Header().Set("Content-Type", contentType)
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(rw)
	_ = rc.Flush() // the header now; under Yaegi in process there may be no Flusher to find
	write := func(ev string, event bool) bool {
		at := time.Now()
		_, err := io.WriteString(rw, ev)
		_ = rc.Flush()
		b.mu.Lock()
		defer b.mu.Unlock()
		sl.body = append(sl.body, ev...)
		sl.chunks++
		if event {
			sl.wrote = append(sl.wrote, at)
		}
		return err == nil
	}
	for i, part := range parts {
		if i > 0 {
			select {
			case <-time.After(gap):
			case <-req.Context().Done():
				b.mu.Lock()
				sl.gone = true
				b.mu.Unlock()
				return
			}
		}
		if !write(part, true) {
			return
		}
	}
	if done != "" {
		write(done, false)
	}
}

// slowJSON is usageJSON(10)'s tokens, each part ended by a blank line
// (whitespace to JSON) so that the client times each as an event.
var slowJSON = []string{
	"{\"id\":\"chatcmpl-1\",\n\n",
	"\"object\":\"chat.completion\",\n\n",
	"\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello!\"}}],\n\n",
	"\"system_fingerprint\":\"fp\",\n\n",
	"\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6,\"total_tokens\":10}}\n\n",
}

// waitStream waits, at most within, for the stream id to end, and returns
// a copy of its log.
func (b *usageBackend) waitStream(id string, within time.Duration) (streamLog, error) {
	deadline := time.Now().Add(within)
	for {
		b.mu.Lock()
		l := b.streams[id]
		var c streamLog
		if l != nil {
			c = *l
			c.wrote, c.body = append([]time.Time(nil), l.wrote...), append([]byte(nil), l.body...)
		}
		b.mu.Unlock()
		if c.ended {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("stream %s: not ended after %v (%d events written)", id, within, len(c.wrote))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// webSocket answers a WebSocket handshake (see usageBackend), then echoes
// what it reads until the client goes.
func (b *usageBackend) webSocket(rw http.ResponseWriter, req *http.Request) {
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		http.Error(rw, "upgrade required", http.StatusUpgradeRequired)
		return
	}
	accept := wsAccept(req.Header.Get("Sec-WebSocket-Key"))
	usage := req.URL.Query().Get("usage")
	byHeader := req.URL.Query().Get("writeHeader") != ""
	if byHeader { // the 101 by WriteHeader, then the connection
		h := rw.Header()
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
		h.Set("Sec-WebSocket-Accept", accept)
		if usage != "" {
			h.Set("X-Usage-Tokens", usage)
		}
		rw.WriteHeader(http.StatusSwitchingProtocols)
	}
	conn, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		if !byHeader {
			http.Error(rw, "hijacking: "+err.Error(), http.StatusInternalServerError)
		}
		return
	}
	atomic.AddInt64(&b.upgrades, 1)
	atomic.AddInt64(&b.upgraded, 1)
	defer atomic.AddInt64(&b.upgraded, -1)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if !byHeader {
		head := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n"
		if usage != "" {
			head += "X-Usage-Tokens: " + usage + "\r\n"
		}
		_, _ = brw.WriteString(head + "\r\n")
		if brw.Flush() != nil {
			return
		}
	}
	buf := make([]byte, 512)
	for {
		n, err := brw.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wsAccept is the Sec-WebSocket-Accept of key (RFC 6455, 4.2.2).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsKey is 16 random bytes in base64 (a Sec-WebSocket-Key).
func wsKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
