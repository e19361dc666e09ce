package tollgate

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRedis answers every EVALSHA/EVAL of the bucket script with reply,
// heartbeats as if 3 pods were registered, the commands in replies with
// their canned reply, and anything else (CLIENT SETNAME) with +OK. An
// in-process fake, for unit tests of reply handling only: the behaviour
// against Redis itself is tested against real redis-servers in e2e.
type fakeRedis struct {
	l       net.Listener
	reply   string
	replies map[string]string // by command, upper case; set before serving
	evals   int64             // bucket checks
	beats   int64             // heartbeats
	setName int64             // Unix ns: CLIENT SETNAME is answered no sooner (a slow dial)
	names   int64             // CLIENT commands received
	frozen  int32             // 1: commands are read but never answered
	isDown  int32             // 1: connections are closed at once
	pings   int64             // PINGs received
	ids     int64             // the last CLIENT ID given
	resets  int32             // 1: a check is run (counted), then its connection closed unanswered

	open map[net.Conn]bool // guarded by mu: the connections being served

	mu    sync.Mutex
	auths []string // the password of each AUTH received
}

// restart closes every connection open, as a restarted Redis does; the
// server goes on accepting new ones.
func (f *fakeRedis) restart() {
	f.mu.Lock()
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
}

// freeze makes the server stop answering.
func (f *fakeRedis) freeze() { atomic.StoreInt32(&f.frozen, 1) }

// down makes the server close every connection (true) or serve again.
func (f *fakeRedis) down(v bool) {
	var n int32
	if v {
		n = 1
	}
	atomic.StoreInt32(&f.isDown, n)
}

func startFake(t *testing.T, reply string) *fakeRedis {
	t.Helper()
	return startFakeWith(t, reply, nil)
}

// startFakeWith is startFake with canned replies by command.
func startFakeWith(t *testing.T, reply string, replies map[string]string) *fakeRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{l: l, reply: reply, replies: replies}
	t.Cleanup(func() { l.Close() })
	go f.serve()
	return f
}

// startFakeTLS is startFake behind TLS, with a self-signed certificate.
func startFakeTLS(t *testing.T, reply string) *fakeRedis {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{l: l, reply: reply}
	t.Cleanup(func() { l.Close() })
	go f.serve()
	return f
}

func (f *fakeRedis) serve() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		go f.conn(c)
	}
}

func (f *fakeRedis) conn(c net.Conn) {
	f.mu.Lock()
	if f.open == nil {
		f.open = map[net.Conn]bool{}
	}
	f.open[c] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.open, c)
		f.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		args, err := readCommand(br)
		if err != nil || atomic.LoadInt32(&f.isDown) == 1 {
			return
		}
		if atomic.LoadInt32(&f.frozen) == 1 {
			continue
		}
		reply := "+OK\r\n"
		if strings.EqualFold(args[0], "AUTH") {
			f.mu.Lock()
			f.auths = append(f.auths, args[len(args)-1])
			f.mu.Unlock()
		}
		if args[0] == "CLIENT" && len(args) > 1 && strings.EqualFold(args[1], "ID") {
			reply = ":" + strconv.FormatInt(atomic.AddInt64(&f.ids, 1), 10) + "\r\n"
		} else if args[0] == "CLIENT" {
			atomic.AddInt64(&f.names, 1)
			time.Sleep(time.Until(time.Unix(0, atomic.LoadInt64(&f.setName))))
		}
		switch args[0] {
		case "SCRIPT":
			reply = "$40\r\n" + bucketSHA + "\r\n"
		case "TIME":
			reply = "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n"
		case "ZADD", "ZREMRANGEBYSCORE", "PEXPIRE":
			reply = ":1\r\n"
		case "ZCARD":
			atomic.AddInt64(&f.beats, 1)
			reply = ":3\r\n"
		}
		if args[0] == "PING" {
			atomic.AddInt64(&f.pings, 1)
			reply = "+PONG\r\n"
		}
		if r, ok := f.replies[strings.ToUpper(args[0])]; ok {
			reply = r
		} else if args[0] == "EVALSHA" || args[0] == "EVAL" {
			atomic.AddInt64(&f.evals, 1)
			reply = f.reply
			if atomic.LoadInt32(&f.resets) == 1 {
				return // run, then the connection lost before the reply
			}
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		if line, err = br.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// handlerOn builds a middleware on addr. Each call names its own (unused:
// no password) username, so that it gets a backend (pool and breaker) of
// its own.
var backendSeq int64

func handlerOn(t *testing.T, addr string, mutate func(*Config)) *Tollgate {
	t.Helper()
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst = 60, "1m", 5
	cfg.SourceCriterion = &SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	cfg.Redis.Timeout = "500ms"
	cfg.Redis.ProbeInterval = "1h"
	cfg.Redis.Username = fmt.Sprintf("test-%d", atomic.AddInt64(&backendSeq, 1))
	if mutate != nil {
		mutate(cfg)
	}
	h, err := New(nil, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(200) }), cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	return h.(*Tollgate)
}

func serve(h http.Handler, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRepliesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		desc, reply string
		status      int
		remaining   string // the RateLimit r the client sees
		fallback    bool
	}{
		{desc: "a good reply is used", reply: "+1 3 0 2000\r\n", status: 200, remaining: "r=3;"},
		{desc: "a refusal with a wait", reply: "+0 0 1500 5000\r\n", status: 429, remaining: "r=0;t=2"},
		{desc: "a refusal without a wait is not believed", reply: "+0 0 0 5000\r\n", status: 200, fallback: true},
		{desc: "a negative number", reply: "+1 -3 0 2000\r\n", status: 200, fallback: true},
		{desc: "allowed flag out of range", reply: "+7 3 0 2000\r\n", status: 200, fallback: true},
		{desc: "too few elements", reply: "+1 3\r\n", status: 200, fallback: true},
		{desc: "an array (an older script's reply)", reply: "*4\r\n:1\r\n:3\r\n:0\r\n:2000\r\n", status: 200, fallback: true},
		{desc: "an error reply", reply: "-ERR something broke\r\n", status: 200, fallback: true},
		{desc: "a word", reply: "+OK\r\n", status: 200, fallback: true},
		{desc: "not a number", reply: "+1 x 0 2000\r\n", status: 200, fallback: true},
		{desc: "a huge number", reply: "+1 99999999999999999999 0 2000\r\n", status: 200, fallback: true},
		{desc: "an empty line", reply: "+\r\n", status: 200, fallback: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := startFake(t, tc.reply)
			h := handlerOn(t, f.l.Addr().String(), nil)
			rec := serve(h, t.Name())
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			st := h.be.stats()
			if got := st.Fallbacks == 1; got != tc.fallback {
				t.Fatalf("fallback = %t (stats %+v), want %t", got, st, tc.fallback)
			}
			if tc.fallback {
				// The local bucket (burst 5) decided: 4 left.
				if r := rec.Header().Get("RateLimit"); !strings.Contains(r, "r=4;") || st.Failures != 1 {
					t.Fatalf("RateLimit %q, stats %+v: want the local bucket's r=4 and one failure", r, st)
				}
				return
			}
			if r := rec.Header().Get("RateLimit"); !strings.Contains(r, tc.remaining) {
				t.Fatalf("RateLimit %q, want %s", r, tc.remaining)
			}
		})
	}
}

func TestFailurePolicyCounters(t *testing.T) {
	// Nothing listens on port 1: every dial is refused.
	h := handlerOn(t, "127.0.0.1:1", func(c *Config) { c.Redis.BreakerThreshold = 3 })
	// New's warm-up dial fails first: one failure.
	for deadline := time.Now().Add(2 * time.Second); h.be.stats().Failures != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the warm-up dial's failure was not counted", h.be.stats())
		}
	}
	for i := 0; i < 5; i++ {
		if rec := serve(h, t.Name()); rec.Code != 200 || rec.Header().Get("RateLimit") == "" {
			t.Fatalf("request %d with Redis down: %d %v, want 200 with headers", i, rec.Code, rec.Header())
		}
	}
	// Checks do not wait for the dials they start once one failed: how
	// many of the 5 were skipped depends on when those dials fail.
	waitFor(t, func() bool { return h.be.stats().Breaker }, "the breaker to open")
	for i := 0; i < 3; i++ {
		serve(h, t.Name())
	}
	st := h.be.stats()
	if st.Fallbacks != 8 || st.Failures < 3 || st.Skipped < 3 || !st.Breaker || st.Open != 0 {
		t.Fatalf("stats %+v: want 8 fallbacks, at least 3 failed dials opening the breaker, the last 3 checks skipped, no connection", st)
	}
}

func TestFailClosedCountsAndAnswers503(t *testing.T) {
	h := handlerOn(t, "127.0.0.1:1", func(c *Config) { c.FailureMode = "closed"; c.Redis.ProbeInterval = "7s" })
	rec := serve(h, t.Name())
	if rl := rec.Header().Get("RateLimit"); !strings.HasSuffix(rl, ";r=0;t=7") {
		t.Fatalf("503 RateLimit %q, want r=0;t=7", rl)
	}
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "7" || h.be.stats().Closed != 1 {
		t.Fatalf("fail closed: %d Retry-After %q stats %+v, want 503, 7, one closed", rec.Code, rec.Header().Get("Retry-After"), h.be.stats())
	}
}

func TestNewSharesBackends(t *testing.T) {
	// Reloads that change limits, timeouts or breaker settings keep the
	// connection, hence the pool; another database is another connection.
	a := handlerOn(t, "127.0.0.1:1", nil)
	user := a.set.redis.username
	b := handlerOn(t, "127.0.0.1:1", func(c *Config) {
		c.Redis.Username, c.Average, c.Redis.Timeout, c.Redis.ProbeInterval, c.Redis.BreakerThreshold, c.Redis.PoolSize = user, 7, "9ms", "2s", 5, 3
	})
	c := handlerOn(t, "127.0.0.1:1", func(c *Config) { c.Redis.Username, c.Redis.DB = user, 8 })
	if a.be != b.be || a.be == c.be {
		t.Fatal("backends: one per connection (address, credentials, db, TLS), whatever the other settings")
	}
	if a.be.client.poolSize != 3 {
		t.Fatalf("pool size %d, want the latest config's 3", a.be.client.poolSize)
	}
}

func TestIdleConnectionsArePruned(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), nil)
	c := h.be.client
	waitConns(t, c, 1) // New's warm-up connection
	for i := 0; i < 2; i++ {
		cn, err := c.dialSafe(true)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.conns = append(c.conns, cn)
		c.mu.Unlock()
	}
	// All three unused since 0; a minute later only the first stays.
	var now int64
	c.mono = func() int64 { return now }
	for _, cn := range c.conns {
		atomic.StoreInt64(&cn.used, 0)
	}
	now = int64(idleTimeout) + c.lastPrune + 1
	d := make([]int64, 4)
	if err := c.check(h.top.cmd, "tg{0123456789}", d, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := c.openConns(); n != 1 {
		t.Fatalf("after a check a minute later: %d open, want the 2 idle ones closed", n)
	}
}

func TestMultiBucketRepliesAreChecked(t *testing.T) {
	withRule := func(c *Config) { c.Rules = []Rule{{Name: "search", Average: 10, Burst: 5}} }
	for _, tc := range []struct {
		desc, reply, want string
	}{
		{desc: "good", reply: "+1 3 0 2000 4 0 100\r\n", want: `"api";r=3;t=0, "search";r=4;t=0`},
		{desc: "a field short", reply: "+1 3 0 2000 4 0\r\n", want: `"api";r=4;t=0, "search";r=4;t=0`},
		{desc: "negative", reply: "+1 3 0 2000 -4 0 100\r\n", want: `"api";r=4;t=0, "search";r=4;t=0`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := startFake(t, tc.reply)
			h := handlerOn(t, f.l.Addr().String(), withRule)
			if got := serve(h, t.Name()).Header().Get("RateLimit"); got != tc.want {
				t.Fatalf("RateLimit = %q, want %q (bad replies fall back to the local buckets)", got, tc.want)
			}
		})
	}
}

func TestDecisionHeader(t *testing.T) {
	// (Each handler is held in a variable: Yaegi cannot pass a call's
	// *Tollgate result straight as an http.Handler argument.)
	f := startFake(t, "+1 4 0 1000\r\n")
	withHeader := func(c *Config) { c.DecisionHeader = "x-tollgate-decision" }
	var h http.Handler = handlerOn(t, f.l.Addr().String(), withHeader)
	if got := serve(h, t.Name()).Header().Get("X-Tollgate-Decision"); got != "redis" {
		t.Fatalf("decided by Redis: header %q, want redis", got)
	}
	h = handlerOn(t, "127.0.0.1:1", withHeader)
	if got := serve(h, t.Name()).Header().Get("X-Tollgate-Decision"); got != "local" {
		t.Fatalf("Redis unavailable: header %q, want local", got)
	}
	h = handlerOn(t, "127.0.0.1:1", func(c *Config) { withHeader(c); c.FailureMode = "closed" })
	if rec := serve(h, t.Name()); rec.Code != 503 || rec.Header().Get("X-Tollgate-Decision") != "unavailable" {
		t.Fatalf("fail closed: %d, header %q, want 503 unavailable", rec.Code, rec.Header().Get("X-Tollgate-Decision"))
	}
	h = handlerOn(t, f.l.Addr().String(), nil)
	if hd := serve(h, t.Name()).Header(); len(hd.Values("X-Tollgate-Decision")) != 0 {
		t.Fatalf("decision header sent without decisionHeader: %v", hd)
	}
}

func TestNewWarmsThePool(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), nil)
	waitConns(t, h.be.client, 1)
	if n := atomic.LoadInt64(&f.evals); n != 0 {
		t.Fatalf("%d checks before any request", n)
	}
}

func TestFirstChecksWaitForTheWarmUpDial(t *testing.T) {
	// The dial takes 150 ms, the check's budget 50 ms: a burst that
	// arrives before the pool's first connection waits for it and is
	// decided by Redis, on one connection, not by the local fallback.
	f := startFake(t, "+1 3 0 2000\r\n")
	atomic.StoreInt64(&f.setName, time.Now().Add(150*time.Millisecond).UnixNano())
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "50ms" })
	serveConcurrently(h, t.Name(), 50)
	if st := h.be.stats(); st.Fallbacks != 0 || st.Failures != 0 || atomic.LoadInt64(&f.evals) != 50 {
		t.Fatalf("stats %+v, %d evals: want 50 checks answered by Redis", st, f.evals)
	}
}

// serveConcurrently serves n concurrent requests, each with a key of its
// own (prefix and a number).
func serveConcurrently(h http.Handler, prefix string, n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			serve(h, fmt.Sprint(prefix, i))
		}(i)
	}
	wg.Wait()
}

func TestBurstNeverWaitsForADial(t *testing.T) {
	// Once one connection is open, a burst far above the pool shares it
	// (and the ones dialled meanwhile, up to poolSize) instead of waiting
	// for dials: every dial after the first takes 10 s here.
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "200ms"; c.Redis.PoolSize = 4 })
	waitConns(t, h.be.client, 1)
	atomic.StoreInt64(&f.setName, time.Now().Add(10*time.Second).UnixNano())
	serveConcurrently(h, t.Name(), 300)
	if st := h.be.stats(); st.Fallbacks != 0 || atomic.LoadInt64(&f.evals) != 300 || st.Open != 1 {
		t.Fatalf("stats %+v, %d evals: want 300 checks answered by Redis on the one open connection", st, f.evals)
	}
}

func TestRefusedDialFailsFast(t *testing.T) {
	// Nothing listens: the check falls back as soon as the dial is
	// refused, not when its (long) budget runs out.
	h := handlerOn(t, "127.0.0.1:1", func(c *Config) { c.Redis.Timeout = "3s" })
	start := time.Now()
	serve(h, t.Name())
	if el := time.Since(start); el > time.Second || h.be.stats().Fallbacks != 1 {
		t.Fatalf("refused dial: %v, stats %+v; want a fallback well before the 3 s budget", el, h.be.stats())
	}
}

// waitConns waits until c has n connections open.
func waitConns(t *testing.T, c *redisClient, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		open := c.openConns()
		if open == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", open, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLateReplyIsTaken(t *testing.T) {
	// A reply that arrived before the deadline but is read after it (the
	// goroutine was not scheduled in time) is used, not counted as a
	// timeout.
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), nil)
	c := h.be.client
	waitConns(t, c, 1)
	cn := c.conns[0]
	key := "tg{0123456789}"
	if _, err := cn.nc.Write(appendCall(nil, h.top.cmd, h.top.cmd.shaHead, key)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = cn.nc.SetReadDeadline(time.Now().Add(-time.Second))
	line, err := cn.readLine()
	if err != nil || string(line) != "+1 3 0 2000\r\n" {
		t.Fatalf("read past the deadline of a reply received in time: %q, %v; want the reply", line, err)
	}
	// With nothing received, the late look times out quickly.
	start := time.Now()
	_ = cn.nc.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err = cn.readLine(); err == nil || !isTimeout(err) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("late read with no reply: %v after %v", err, time.Since(start))
	}
}

func TestFrozenRedisTimesOutAndDropsTheConnection(t *testing.T) {
	// A server that stops answering: checks fail at their deadline (and
	// count against Redis); a connection that owes replies staleAfter past
	// their deadline is closed.
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "20ms" })
	c := h.be.client
	waitConns(t, c, 1)
	f.freeze()
	// Measured on 2 cores shared with other test runs (6 compiled, 4
	// interpreted runs): 21.5 to 23.3 ms. The bound leaves 60 ms for one
	// check's scheduling on a loaded machine (the e2e suite saw single
	// interpreted requests delayed by up to 53 ms). Caught: a check given
	// the renewal's cap, 10 timeouts (200 ms), from its write (the old
	// bound, 200 ms, let it pass by a hair), and one giving up early.
	start := time.Now()
	serve(h, t.Name())
	if el := time.Since(start); el < 20*time.Millisecond || el > 80*time.Millisecond || h.be.stats().Failures != 1 {
		t.Fatalf("frozen: %v, stats %+v; want one failure after about 20 ms (20 to 80 ms)", el, h.be.stats())
	}
	time.Sleep(staleAfter + 20*time.Millisecond)
	serve(h, t.Name())
	if st := h.be.stats(); st.Failures != 2 || c.openConns() != 0 {
		t.Fatalf("stats %+v, %d open: want the stale connection closed", st, c.openConns())
	}
	// No connection, the last one went silent: the next check does not
	// wait for a dial (a frozen Redis would hold it for the dial budget).
	start = time.Now()
	serve(h, t.Name())
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("a check with no connection after a silent one waited %v", el)
	}
}

func TestFailedWriteDropsTheConnection(t *testing.T) {
	// Over TLS a write error is permanent (crypto/tls): a check whose
	// write failed (here its deadline had passed: a starved pod) must not
	// leave the connection pooled, or every later check on it would fail.
	// The check itself is tried again on a new connection: Redis never saw
	// it.
	f := startFakeTLS(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.TLS.InsecureSkipVerify = true })
	c := h.be.client
	waitConns(t, c, 1)
	first := c.conns[0]
	// The clock lags for the write deadline of the next check only.
	var reads int32
	c.now = func() time.Time {
		if atomic.AddInt32(&reads, 1) == 1 {
			return time.Now().Add(-time.Hour)
		}
		return time.Now()
	}
	serve(h, t.Name())
	if first.deadErr() != errOwed {
		t.Fatalf("the connection whose write failed: dead = %v, want it closed", first.deadErr())
	}
	for i := 0; i < 20; i++ {
		serve(h, fmt.Sprint(t.Name(), i))
	}
	if st := h.be.stats(); st.Fallbacks != 0 || st.Failures != 0 || atomic.LoadInt64(&f.evals) != 21 {
		t.Fatalf("stats %+v, %d evals: want the check whose write failed and the 20 after it answered by Redis", st, f.evals)
	}
}

func TestBreakerProbesWithoutTraffic(t *testing.T) {
	// Redis goes away, the breaker opens; Redis returns and, with no
	// request at all, the breaker closes within probeInterval: the very
	// first request after is decided by Redis.
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.ProbeInterval = "100ms"; c.Redis.BreakerThreshold = 2 })
	waitConns(t, h.be.client, 1)
	f.down(true)
	for i := 0; i < 5; i++ {
		serve(h, t.Name())
	}
	if !h.be.stats().Breaker {
		t.Fatalf("stats %+v: want the breaker open", h.be.stats())
	}
	f.down(false)
	time.Sleep(350 * time.Millisecond)
	if st := h.be.stats(); st.Breaker {
		t.Fatalf("stats %+v: the breaker did not probe by itself", st)
	}
	evals := atomic.LoadInt64(&f.evals)
	if serve(h, t.Name()); atomic.LoadInt64(&f.evals) != evals+1 || h.be.stats().Fallbacks != 5 {
		t.Fatalf("first request after Redis returned: stats %+v; want it decided by Redis", h.be.stats())
	}
}

func TestDialPanicIsContained(t *testing.T) {
	// Dials run on the plugin's own goroutines, where a panic would end
	// Traefik: it becomes a failed dial instead.
	c := &redisClient{set: redisSettings{addr: "127.0.0.1:1"}, now: func() time.Time { panic("boom") }}
	if cn, err := c.dialSafe(true); cn != nil || err == nil || !strings.Contains(err.Error(), "recovered from a panic: boom") {
		t.Fatalf("dialSafe with a panicking clock: %v, %v", cn, err)
	}
	c.onDialError = func(error) { panic("boom") }
	c.reportDial(errBadReply) // must return
}
