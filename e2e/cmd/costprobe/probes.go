package main

// coreSource is added to the plugin's package in the copy: the probes of
// the first-class figures, written against what every version since the
// shared connections (eb2e0d0) has (New, ServeHTTP, the breaker's fields),
// and a layout's adapter for the rest (the prepared command's parts, the
// monotonic clock: flatSource before the packages, packagesSource since),
// so that -core runs them on an older checkout too (TOLLGATE_PLUGIN_SRC).
// Each Probe function runs one stage n times.
const coreSource = `package tollgate

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

var (
	probeT    *Tollgate
	probeReq  *http.Request
	probeRW   http.ResponseWriter
	probeD    []int64
	probeKey  string
	probeConn net.Conn
	probeBR   *bufio.Reader
	probeCall []byte
	probeNext http.Handler
	probeAddr string
)

// ProbeSetup builds the middleware in front of next; rw is the response
// writer of every run. Both are compiled (the host's), as in Traefik.
func ProbeSetup(addr string, rw http.ResponseWriter, next http.Handler) error {
	h, err := New(context.Background(), next, probeConfig(addr), "probe")
	if err != nil {
		return err
	}
	probeT = h.(*Tollgate)
	probeNext = next
	probeAddr = addr
	probeReq, _ = http.NewRequest("GET", "http://probe/", nil)
	probeReq.Header.Set("X-API-Key", "probe-key")
	probeReq.RemoteAddr = "127.0.0.1:1"
	probeRW = rw
	probeD = make([]int64, probeT.top.decisionLen)
	probeKey = probeClientKey("h:probe-key")
	for i := 0; i < 2000; i++ {
		probeT.ServeHTTP(probeRW, probeReq)
	}
	if probeConn, err = net.Dial("tcp", addr); err != nil {
		return err
	}
	probeBR = bufio.NewReader(probeConn)
	head, tail := probeCallParts()
	probeCall = append(append(append([]byte{}, head...), probeKey...), tail...)
	cfg := probeConfig(addr)
	cfg.Average, cfg.Period, cfg.Burst = 1, "1h", 1
	hc, err := New(context.Background(), next, cfg, "probe-refused")
	if err != nil {
		return err
	}
	probeRefused = hc.(*Tollgate)
	probeRefused.ServeHTTP(probeRW, probeReq) // the one token
	probeRefused.ServeHTTP(probeRW, probeReq) // refused by Redis: in the deny cache for an hour
	cfg = probeConfig(addr)
	probeWithRegion(cfg)
	hr, err := New(context.Background(), next, cfg, "probe-region")
	if err != nil {
		return err
	}
	probeRegion = hr.(*Tollgate)
	for i := 0; i < 2000; i++ {
		probeRegion.ServeHTTP(probeRW, probeReq)
	}
	return minimalSetup(addr, head, tail)
}

// probeRefused refuses probeReq's client from its deny cache.
var probeRefused *Tollgate

// probeRegion is probeT's limit in one of two regions.
var probeRegion *Tollgate

// ProbeServeRegion is ServeHTTP admitted by Redis with a region
// configured: the script reads the key's share; the request notes nothing.
func ProbeServeRegion(n int) {
	for i := 0; i < n; i++ {
		probeRegion.ServeHTTP(probeRW, probeReq)
	}
}

// ProbeServeRefused is ServeHTTP for a client over its limit, refused
// from the deny cache (a flood's path: no Redis call).
func ProbeServeRefused(n int) {
	for i := 0; i < n; i++ {
		probeRefused.ServeHTTP(probeRW, probeReq)
	}
}

// minimal is the smallest middleware that makes one round trip per
// request (the session that took the plugin to the interpreter's floor
// measured one like it):
// a SHA-256 key, a mutex-guarded stack of connections, one prepared
// EVALSHA, a one-line status check, two headers by map assignment, next.
// No breaker, fallback, deny cache, rules, timeouts beyond a deadline, or
// decision beyond admitted or not. The plugin's work is measured against
// it: what Tollgate adds above it is what its features cost.
type minimal struct {
	mu         sync.Mutex
	conns      []*minimalConn
	head, tail []byte
	prefix     string
	policy     []string
	next       http.Handler
}

type minimalConn struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

var probeMin *minimal

func minimalSetup(addr string, head, tail []byte) error {
	m := &minimal{head: head, tail: tail, prefix: probeKeyPrefix(), policy: []string{"\"default\";q=100;w=1"}, next: probeNext}
	for i := 0; i < 2; i++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		m.conns = append(m.conns, &minimalConn{nc: nc, br: bufio.NewReader(nc)})
	}
	probeMin = m
	return nil
}

func (m *minimal) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	sum := sha256.Sum256([]byte(req.Header["X-Api-Key"][0]))
	key := m.prefix + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
	m.mu.Lock()
	c := m.conns[len(m.conns)-1]
	m.conns = m.conns[:len(m.conns)-1]
	m.mu.Unlock()
	c.buf = append(append(append(c.buf[:0], m.head...), key...), m.tail...)
	c.nc.SetDeadline(time.Now().Add(time.Second))
	c.nc.Write(c.buf)
	line, err := c.br.ReadSlice('\n')
	m.mu.Lock()
	m.conns = append(m.conns, c)
	m.mu.Unlock()
	if err != nil || len(line) < 2 || line[1] != '1' {
		rw.WriteHeader(http.StatusTooManyRequests)
		return
	}
	h := rw.Header()
	h["Ratelimit-Policy"] = m.policy
	h["Ratelimit"] = m.policy
	m.next.ServeHTTP(rw, req)
}

func ProbeMinimal(n int) {
	for i := 0; i < n; i++ {
		probeMin.ServeHTTP(probeRW, probeReq)
	}
}

func ProbeServeHTTP(n int) {
	for i := 0; i < n; i++ {
		probeT.ServeHTTP(probeRW, probeReq)
	}
}

// ProbeServeOpen is ServeHTTP while the breaker is open (the prober marked
// as running, so none starts): the local fallback's whole path.
func ProbeServeOpen(n int) {
	b := probeT.be
	atomic.StoreInt32(&b.probing, 1)
	atomic.StoreInt64(&b.breaker.nextProbe, probeMono()+int64(time.Hour))
	for i := 0; i < n; i++ {
		probeT.ServeHTTP(probeRW, probeReq)
	}
	atomic.StoreInt64(&b.breaker.nextProbe, 0)
	atomic.StoreInt32(&b.probing, 0)
}

// ProbeBare is the floor: the same prepared EVALSHA, written on a raw
// socket and its reply read, nothing else.
func ProbeBare(n int) {
	for i := 0; i < n; i++ {
		probeConn.SetDeadline(time.Now().Add(time.Second))
		probeConn.Write(probeCall)
		probeBR.ReadSlice('\n')
	}
}
`

// stagesSource adds the probes of each stage of the current hot path.
const stagesSource = `package tollgate

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

var (
	probeP    *Tollgate // poolSize 2, db 1: a backend of its own, whose checks mostly share connections
	probeLine = []byte("+1 19 0 1000\r\n")
)

func ProbeStagesSetup() error {
	cfg := probeConfig(probeAddr)
	cfg.Redis.PoolSize = 2
	cfg.Redis.DB = 1
	h, err := New(context.Background(), probeNext, cfg, "probe-pipelined")
	if err != nil {
		return err
	}
	probeP = h.(*Tollgate)
	cfg = probeConfig(probeAddr)
	cfg.Lease = config.Lease{Max: 10000, TTL: "10s"} // hot: calls within 4 ms
	cfg.Redis.DB = 2
	if h, err = New(context.Background(), probeNext, cfg, "probe-leased"); err != nil {
		return err
	}
	probeL = h.(*Tollgate)
	probeL.ServeHTTP(probeRW, probeReq)
	probeL.ServeHTTP(probeRW, probeReq) // the grant: 10,000 requests, and one more every 10,000
	cfg = probeConfig(probeAddr)
	cfg.Lease = config.Lease{Max: 1000000, TTL: "10ms"} // never hot: a gap of 40 ns
	cfg.Redis.DB = 3
	if h, err = New(context.Background(), probeNext, cfg, "probe-lukewarm"); err != nil {
		return err
	}
	probeLW = h.(*Tollgate)
	cfg = probeConfig(probeAddr)
	cfg.Quotas = []config.Quota{{Name: "month", Limit: 1000000000000, Window: "month"}}
	cfg.Redis.DB = 4
	if h, err = New(context.Background(), probeNext, cfg, "probe-quota"); err != nil {
		return err
	}
	probeQ = h.(*Tollgate)
	return probeCappedSetup()
}

// probeQ has a monthly quota beside the rate (nothing refused).
var probeQ *Tollgate

// ProbeServeQuota is ServeHTTP admitted by Redis, a rate and a calendar
// quota charged in one call.
func ProbeServeQuota(n int) {
	for i := 0; i < n; i++ {
		probeQ.ServeHTTP(probeRW, probeReq)
	}
}

// probeLW leases, but its client is never hot: every request is Redis's.
var probeLW *Tollgate

// ProbeServeLukewarm is ServeHTTP admitted by Redis in a leasing
// middleware, for a client too slow to lease: what leases cost the rest.
func ProbeServeLukewarm(n int) {
	for i := 0; i < n; i++ {
		probeLW.ServeHTTP(probeRW, probeReq)
	}
}

// probeL leases: its requests are admitted from the pod's lease.
var probeL *Tollgate

// ProbeServeLeased is ServeHTTP admitted from the pod's lease (no Redis
// call): a hot client's path.
func ProbeServeLeased(n int) {
	for i := 0; i < n; i++ {
		probeL.ServeHTTP(probeRW, probeReq)
	}
}

func ProbeDecide(n int) {
	for i := 0; i < n; i++ {
		decide(probeT, probeT.top, probeReq, nil, probeD)
	}
}

// ProbeShared is redisCheck from 32 goroutines at once on a pool of 2
// connections: most checks are pipelined behind others (the shared way).
func ProbeShared(n int) {
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			d := make([]int64, 4)
			for i := 0; i < n/32; i++ {
				redisCheck(probeP.be, probeP.top.cmd, key, d, &probeP.conf.Redis, nil)
			}
		}(bucket.HashKey(probeP.conf.HeaderTag + strconv.Itoa(g)))
	}
	wg.Wait()
}

func ProbeKey(n int) {
	for i := 0; i < n; i++ {
		bucket.HashKey(probeT.conf.HeaderTag + probeReq.Header["X-Api-Key"][0])
	}
}

func ProbeRedisCheck(n int) {
	for i := 0; i < n; i++ {
		redisCheck(probeT.be, probeT.top.cmd, probeKey, probeD, &probeT.conf.Redis, probeT.hb)
	}
}

func ProbePoolCheck(n int) {
	c := probeT.be.pool
	for i := 0; i < n; i++ {
		redis.PoolCheck(c, probeT.top.cmd, probeKey, probeD, probeT.conf.Redis.Timeout, 0)
	}
}

func ProbeExchange(n int) {
	redis.ProbeExchange(probeT.be.pool, probeT.top.cmd, probeKey, probeD, probeT.conf.Redis.Timeout, n)
}

func ProbeAppendCall(n int) {
	redis.ProbeAppendCall(probeT.top.cmd, probeKey, n)
}

func ProbeDecode(n int) {
	redis.ProbeDecode(probeLine, probeD, n)
}

func ProbeFallback(n int) {
	for i := 0; i < n; i++ {
		fallback(probeT, probeT.top, probeKey, probeD)
	}
}

func ProbeDecideOpen(n int) {
	b := probeT.be
	atomic.StoreInt32(&b.probing, 1)
	atomic.StoreInt64(&b.breaker.nextProbe, probeMono()+int64(time.Hour))
	for i := 0; i < n; i++ {
		decide(probeT, probeT.top, probeReq, nil, probeD)
	}
	atomic.StoreInt64(&b.breaker.nextProbe, 0)
	atomic.StoreInt32(&b.probing, 0)
}

func ProbeLocalTake(n int) {
	keys := []string{probeKey}
	probeT.top.shareLocals(1)
	lims := probeT.top.locals
	for i := 0; i < n; i++ {
		probeT.local.take(keys, lims, probeD)
	}
}

// ProbeCount is what counting adds to an admitted check, in the
// statements it adds to the hot path: ServeHTTP's near-limit test (an
// operand of a test it makes anyway) and its count, redisCheck's sampling
// test (an operand) and, in one check of metrics.HistSample, the timing (tick).
// ProbeLoop is the same loop and tests without them.
func ProbeCount(n int) {
	t := probeT
	d := []int64{1, 1000, 0, 0}
	how := decidedRedis
	var hb *heartbeat
	for i := 0; i < n; i++ {
		ns := int64(i)
		if how > decidedLocal || d[0] != 1 || d[1] < t.top.nearBelow {
			d[3] = ns
		}
		atomic.AddInt64(t.top.admitted[how], 1)
		if ns < 0 || ns&(metrics.HistSample-1) == 0 || hb != nil && ns < 0 {
			t.be.metrics.Observe(t.be.now() - ns)
		}
	}
}

func ProbeLoop(n int) {
	t := probeT
	d := []int64{1, 1000, 0, 0}
	how := decidedRedis
	var hb *heartbeat
	for i := 0; i < n; i++ {
		ns := int64(i)
		if how > decidedLocal || d[0] != 1 {
			d[3] = ns
		}
		if ns < 0 || hb != nil && ns < 0 {
			t.be.metrics.Observe(t.be.now() - ns)
		}
	}
}

func ProbeTakeAll(n int) {
	probeT.top.shareLocals(1)
	lims := probeT.top.locals
	tats := make([]float64, 1)
	for i := 0; i < n; i++ {
		tats[0] = 0
		bucket.TakeAll(lims, tats, 1e9, probeD)
	}
}
`

// stagesClientSource is added to the copy's internal/redis: the probes of
// the client's own stages, run by stagesSource's.
const stagesClientSource = `package redis

import "time"

func ProbeExchange(c *Pool, cmd *Command, key string, d []int64, timeout time.Duration, n int) {
	cn := c.conns[0]
	for i := 0; i < n; i++ {
		cl := newCall()
		if send(cn, nil, cl, nil, cmd, cmd.shaHead, key, timeout, c.now) == nil {
			cn.mu.Lock()
			await(cn, cl)
			cn.mu.Unlock()
			decode(cl.line, d, cmd)
		}
		releaseCall(cl)
	}
}

func ProbeAppendCall(cmd *Command, key string, n int) {
	b := make([]byte, 0, 256)
	for i := 0; i < n; i++ {
		b = appendCall(b[:0], cmd, cmd.shaHead, key)
	}
}

func ProbeDecode(line []byte, d []int64, n int) {
	cmd := &Command{}
	for i := 0; i < n; i++ {
		decode(line, d, cmd)
	}
}
`

// rootConfigSource is the part of the flat and packages layouts that
// names the configuration and the key scheme where they were, in the root
// package.
const rootConfigSource = `func probeClientKey(id string) string { return clientKey(probeT.set.class, id) }

func probeKeyPrefix() string { return keyPrefix }

func probeConfig(addr string) *Config {
	cfg := CreateConfig()
	cfg.Average = 100000000
	cfg.Period = "1s"
	cfg.Burst = 100000000
	cfg.SourceCriterion = &SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	return cfg
}
func probeWithRegion(cfg *Config) {
	cfg.Region = &RegionConfig{Name: "probe", Peers: []PeerConfig{{Name: "elsewhere", Endpoints: []string{"127.0.0.1:1"}}}}
}
`

// flatSource adapts coreSource to a checkout of one flat package (before
// the client moved to internal/redis).
const flatSource = `package tollgate

func probeCallParts() (head, tail []byte) { return probeT.top.cmd.shaHead, probeT.top.cmd.tail }

func probeMono() int64 { return monotonic() }

` + rootConfigSource

// packagesSource adapts coreSource to a checkout with internal packages.
const packagesSource = `package tollgate

import (
	"bytes"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

// probeCallParts splits the prepared call around the client key.
func probeCallParts() (head, tail []byte) {
	call := probeT.top.cmd.Append(nil, probeKey, false)
	i := bytes.Index(call, []byte(probeKey))
	return call[:i], call[i+len(probeKey):]
}

func probeMono() int64 { return clock.Mono() }

` + rootConfigSource

// configSource adapts coreSource to a checkout whose configuration and
// protocol are packages (internal/config, internal/bucket).
const configSource = `package tollgate

import (
	"bytes"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// probeCallParts splits the prepared call around the client key.
func probeCallParts() (head, tail []byte) {
	call := probeT.top.cmd.Append(nil, probeKey, false)
	i := bytes.Index(call, []byte(probeKey))
	return call[:i], call[i+len(probeKey):]
}

func probeMono() int64 { return clock.Mono() }

func probeClientKey(id string) string { return bucket.ClientKey(probeT.conf.Class, id) }

func probeKeyPrefix() string { return bucket.KeyPrefix }

func probeConfig(addr string) *config.Config {
	cfg := CreateConfig()
	cfg.Average = 100000000
	cfg.Period = "1s"
	cfg.Burst = 100000000
	cfg.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	cfg.Redis.Endpoints = []string{addr}
	return cfg
}
func probeWithRegion(cfg *config.Config) {
	cfg.Region = &config.RegionConfig{Name: "probe", Peers: []config.PeerConfig{{Name: "elsewhere", Endpoints: []string{"127.0.0.1:1"}}}}
}
`
