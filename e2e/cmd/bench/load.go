package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

var wrkRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
var wrkTotal = regexp.MustCompile(`(\d+) requests in`)
var wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)

type wrkResult struct {
	rps          float64
	requests     int64
	non2xx       int64
	redisCmds    int64
	redisBytes   int64
	redisScripts int64
	tgConns      int        // connections named tollgate, sampled during the run
	minConns     int        // named minimal (the reference limiter's), sampled alike
	otherConns   int        // the others (Traefik's Redis limiter's), sampled alike
	alloc        memStats   // Traefik's allocations over the run
	allocOK      bool       // alloc was read
	slots        slotCounts // /capped's slots (slotCalls), else zero
}

// redisConns counts rd's connected clients: Tollgate's (CLIENT SETNAME
// tollgate, either revision's), the reference limiter's (minimal) and the
// others, this query's excepted; -1 when it cannot.
func redisConns(rd *e2e.Redis) (tollgate, minimal, others int) {
	byName, err := rd.ClientNames()
	if err != nil {
		return -1, -1, -1
	}
	for name, n := range byName {
		switch name {
		case "tollgate":
			tollgate += n
		case "minimal":
			minimal += n
		default:
			others += n
		}
	}
	return tollgate, minimal, others
}

// saturate runs wrk against route and records Redis's counters and
// Traefik's allocations around it.
func (b *bench) saturate(route string) (wrkResult, error) {
	return b.saturateWith(route, b.conns)
}

// saturateWith is saturate with conns wrk connections.
func (b *bench) saturateWith(route string, conns int) (wrkResult, error) {
	return b.run(route, conns, b.script)
}

// leaseSettle is how long Redis's counters wait after a run of /leased:
// its leases' ttl and two give-back intervals, so that what they give back
// counts in the run that leased it.
const leaseSettle = 1400 * time.Millisecond

// load is the shape of a wrk run: threads, connections, length, and the
// script that names each request's key.
type load struct {
	threads, conns int
	dur            time.Duration
	script         string
}

// run runs wrk with script and conns connections against route for
// b.wrkDur, from two threads (runLoad).
func (b *bench) run(route string, conns int, script string) (wrkResult, error) {
	return b.runLoad(route, load{threads: 2, conns: conns, dur: b.wrkDur, script: script})
}

// runLoad runs wrk with l against route and records Redis's counters and
// Traefik's allocations around it; it also samples Redis's connections
// 60% into the run. Redis is route's (redisOf).
func (b *bench) runLoad(route string, l load) (wrkResult, error) {
	var r wrkResult
	rd := b.redisOf(route)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		time.Sleep(l.dur * 6 / 10)
		r.tgConns, r.minConns, r.otherConns = redisConns(rd)
	}()
	defer func() { <-sampled }()
	before, err := rd.Info("stats")
	if err != nil {
		return r, err
	}
	s0, _ := rd.ScriptCalls()
	var c0 slotCounts
	if route == capped {
		c0, _ = slotCalls(rd)
	}
	m0, err0 := b.memStats()
	cmd := exec.Command("wrk", "-t"+strconv.Itoa(l.threads), "-c"+strconv.Itoa(l.conns), "-d"+l.dur.String(), "-s", l.script, b.traefik.URL("/"+route))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	m1, err1 := b.memStats()
	switch c, _ := costRouteOf(route); {
	case route == leased:
		time.Sleep(leaseSettle)
	case route == capped:
		time.Sleep(cappedSettle)
	case c.reads != readsNothing:
		time.Sleep(chargeSettle)
	}
	after, err := rd.Info("stats")
	if err != nil {
		return r, err
	}
	s1, _ := rd.ScriptCalls()
	if route == capped {
		c1, _ := slotCalls(rd)
		c1.held, _ = heldSlots(rd)
		r.slots = c1.sub(c0)
	}
	if err0 == nil && err1 == nil {
		r.alloc = memStats{TotalAlloc: m1.TotalAlloc - m0.TotalAlloc, Mallocs: m1.Mallocs - m0.Mallocs}
		r.allocOK = true
	}
	m := wrkRPS.FindSubmatch(out)
	t := wrkTotal.FindSubmatch(out)
	if m == nil || t == nil {
		return r, fmt.Errorf("wrk output: %s", out)
	}
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	r.requests, _ = strconv.ParseInt(string(t[1]), 10, 64)
	if n := wrkNon2xx.FindSubmatch(out); n != nil {
		r.non2xx, _ = strconv.ParseInt(string(n[1]), 10, 64)
	}
	delta := func(k string) int64 {
		a, _ := strconv.ParseInt(after[k], 10, 64)
		b, _ := strconv.ParseInt(before[k], 10, 64)
		return a - b
	}
	r.redisCmds = delta("total_commands_processed") - 2 // the two INFO calls
	r.redisBytes = delta("total_net_input_bytes") + delta("total_net_output_bytes")
	r.redisScripts = s1 - s0
	<-sampled
	return r, nil
}

// fixedRate sends rate requests/s to url for d from workers connections and
// returns each request's latency measured from when it was due.
func fixedRate(url string, rate float64, d time.Duration, workers int, keys int) (lat []time.Duration, errs int64) {
	n := int(rate * d.Seconds())
	lat = make([]time.Duration, n)
	interval := time.Duration(float64(time.Second) / rate)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	start := time.Now().Add(50 * time.Millisecond)
	errs = forEach(n, workers, func(i int) error {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		err := get(client, url, "k"+strconv.Itoa(i%keys))
		lat[i] = time.Since(due)
		return err
	})
	client.CloseIdleConnections()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, errs
}

// seqWarmup is how many requests sequential sends before it starts timing.
const seqWarmup = 300

// sequential sends seqWarmup and then n timed requests to url, one after
// another from one client on one keep-alive connection, keys cycling over
// keys API keys. It returns the timed requests' latencies, sorted, each from
// sending the request to reading the last byte of its reply; how many failed
// (transport errors and replies other than 2xx, as the limits admit all);
// and how many connections the timed requests opened (0 when the one
// connection held).
func sequential(url string, n, keys int) (lat []time.Duration, errs int64, dials int) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
		if !c.Reused {
			dials++
		}
	}}
	one := func(i int) error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	for i := 0; i < seqWarmup; i++ {
		_ = one(i)
	}
	dials = 0
	lat = make([]time.Duration, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if one(i) != nil {
			errs++
		}
		lat[i] = time.Since(t0)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, errs, dials
}

// forEach calls f(0), ..., f(n-1) from workers goroutines, each taking the
// next index, and returns how many calls failed.
func forEach(n, workers int, f func(i int) error) (errs int64) {
	var next int64 = -1
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= n {
					return
				}
				if f(i) != nil {
					atomic.AddInt64(&errs, 1)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// get sends GET url with the X-API-Key key and reads the reply.
func get(client *http.Client, url, key string) error {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func pct(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(lat[int(float64(len(lat)-1)*p/100)]) / float64(time.Millisecond)
}

// fill sends n requests with distinct keys to route, as fast as workers allow.
func fill(url string, n, workers int, prefix string) (errs int64) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	errs = forEach(n, workers, func(i int) error { return get(client, url, prefix+strconv.Itoa(i)) })
	client.CloseIdleConnections()
	return errs
}
