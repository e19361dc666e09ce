package e2e

// The multi-region suite beyond the scenarios: 1,000 hot keys, a
// configuration without regions, the delaying proxy itself.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRegionHotKeys: 1,000 keys, each pressed in one region (half in each),
// in-process (compiled). What crosses each link per interval is logged;
// the commands per interval stay a small constant.
func TestRegionHotKeys(t *testing.T) {
	w := startRegionWorld(t, twoRegions()...)
	// 2 a second, burst 2: a region's static share is 1 token, so a key
	// sent 3 requests at once presses.
	startRegionPods(t, w, "compiled", "average", 2, "burst", 2)
	a, b := w.Regions[0], w.Regions[1]
	const nKeys = 1000
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fleetKey(t, strconv.Itoa(i))
	}
	var failed, sent int64
	var mu sync.Mutex
	round := func() {
		jobs := make(chan int)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					r := a
					if i >= nKeys/2 {
						r = b
					}
					pods := r.Pods()
					for j := 0; j < 3; j++ {
						rep := pods[j%len(pods)].Do("/", keys[i])
						mu.Lock()
						sent++
						if rep.Err != nil || rep.Status >= 500 {
							failed++
						}
						mu.Unlock()
					}
				}
			}()
		}
		for i := range keys {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
	}
	const rounds, every = 5, 2 * time.Second
	var s0 map[string]ProxyStats
	var from time.Time
	start := time.Now()
	for i := 0; i < rounds; i++ {
		next := start.Add(time.Duration(i+1) * every)
		round()
		if i == 1 {
			s0, from = w.LinkStats(), time.Now()
		}
		time.Sleep(time.Until(next))
	}
	s1, to := w.LinkStats(), time.Now()
	secs := to.Sub(from).Seconds()
	figure(t, "hot_keys_requests", "%d sent, %d failed, %d rounds in %v", sent, failed, rounds, to.Sub(start).Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d requests failed", failed, sent)
	}
	for _, r := range w.Regions {
		p := r.Pods()[0]
		tracked, _, _ := podMetric(p, "tollgate_region_tracked_keys", map[string]string{"region": r.Name})
		rb, _, _ := podMetric(p, "tollgate_region_report_bytes", map[string]string{"region": r.Name})
		rl, _ := r.ReportLen()
		figure(t, "hot_keys_"+r.Name, "tracked_keys=%.0f report_bytes=%.0f STRLEN(report)=%d", tracked, rb, rl)
		if tracked < 1 || rb < 1 {
			t.Errorf("%s: tracked_keys %v, report_bytes %v with %d keys pressing there", r.Name, tracked, rb, nKeys/2)
		}
	}
	for _, link := range []string{a.Name + "->" + b.Name, b.Name + "->" + a.Name} {
		d := s1[link].Sub(s0[link])
		figure(t, "hot_keys_link_"+link, "bytes_down/interval=%.0f bytes_up/interval=%.0f commands/interval=%.2f over %.1fs",
			float64(d.BytesDown)/secs, float64(d.BytesUp)/secs, float64(d.Commands)/secs, secs)
		if float64(d.Commands) > 3*secs+2 {
			t.Errorf("%s: %d commands in %.1f s with %d hot keys, want about one per interval", link, d.Commands, secs, nKeys)
		}
		if float64(d.BytesDown)/secs > 1<<20 {
			t.Errorf("%s: %.0f bytes per interval", link, float64(d.BytesDown)/secs)
		}
	}
	for _, i := range []int{0, nKeys / 2} {
		logShares(t, w, "hot_keys_shares_key"+strconv.Itoa(i), bucketKey("api", keys[i]))
	}
}

// TestRegionAbsentChangesNothing: without region, one budget as before,
// and no region key in Redis.
func TestRegionAbsentChangesNothing(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("class", "api", "average", 20, "period", "1h", "burst", 20, "failureMode", "closed"))
		key := uniqueKey(t)
		var ok int
		var pol string
		for i := 0; i < 30; i++ {
			rec := do(h, "GET", "/", key)
			if rec.Code == 200 {
				ok++
			}
			pol = rec.Header().Get("RateLimit-Policy")
		}
		if ok != 20 || pol != `"api";q=20;w=3600` {
			t.Fatalf("no region: %d of 30 admitted, RateLimit-Policy %q; want 20, \"api\";q=20;w=3600", ok, pol)
		}
		for _, pat := range []string{"tg{rg:*", "*}s"} {
			if keys, err := redisStrings(e.redis.Do("KEYS", pat)); err != nil || len(keys) > 0 {
				t.Fatalf("no region: KEYS %s = %v (%v), want none", pat, keys, err)
			}
		}
	})
}

// TestRegionDelayProxy: the harness's link. Its delay, order, counters,
// cut and restore.
func TestRegionDelayProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	const delay = 40 * time.Millisecond
	p, err := StartDelayProxy(echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := p.Addr()
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		return c, bufio.NewReader(c)
	}
	roundTrip := func(c net.Conn, rd *bufio.Reader, msg string) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(rd, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo through the proxy: %q, %v; want %q", buf, err, msg)
		}
		return time.Since(start)
	}
	c, rd := dial()
	// Four commands: an inline one, an array, an array whose bulk string
	// looks like an array header, and one split across two writes.
	msgs := []string{"PING\r\n", "*1\r\n$4\r\nPING\r\n", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n*2\r\n\r\n", "*2\r\n$3\r\nGET", "\r\n$1\r\nk\r\n"}
	var rtts []time.Duration
	var total int
	for _, m := range msgs {
		rtts = append(rtts, roundTrip(c, rd, m))
		total += len(m)
	}
	sortDurations(rtts)
	figure(t, "delay_proxy_rtt", "min=%v max=%v (delay %v each way)", rtts[0].Round(time.Millisecond), rtts[len(rtts)-1].Round(time.Millisecond), delay)
	if rtts[0] < 2*delay || rtts[0] > 2*delay+100*time.Millisecond {
		t.Errorf("round trip through the proxy %v, want about 2 x %v", rtts[0], delay)
	}
	if s := p.Stats(); s.Commands != 4 || s.BytesUp != int64(total) || s.BytesDown != int64(total) || s.Accepted != 1 {
		t.Errorf("stats %+v, want 4 commands, %d bytes each way, 1 connection", s, total)
	}
	// The same stream a byte at a time.
	var rc respCounter
	var n int64
	for _, b := range []byte(strings.Join(msgs, "")) {
		n += rc.feed([]byte{b})
	}
	if n != 4 {
		t.Errorf("the RESP counter fed byte by byte counted %d commands, want 4", n)
	}
	// Order kept under a stream of small writes.
	var want strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&want, "%d,", i)
	}
	go func() {
		for _, part := range strings.SplitAfter(want.String(), ",") {
			_, _ = c.Write([]byte(part))
		}
	}()
	got := make([]byte, want.Len())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(rd, got); err != nil || string(got) != want.String() {
		t.Fatalf("200 small writes came back as %q (%v)", got, err)
	}
	// Cut: the open connection is closed, a new dial refused.
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := rd.ReadByte(); err == nil {
		t.Errorf("a connection open at the cut still reads")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("a connection open at the cut was not closed (read timed out)")
	}
	c.Close()
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c2.Close()
		t.Errorf("dial %s while cut: accepted, want refused", addr)
	}
	// Restore: the same port serves again.
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Errorf("address %s after restore, was %s", p.Addr(), addr)
	}
	c, rd = dial()
	defer c.Close()
	if d := roundTrip(c, rd, "*1\r\n$4\r\nPING\r\n"); d < 2*delay {
		t.Errorf("after restore: round trip %v, want at least 2 x %v", d, delay)
	}
	if s := p.Stats(); s.Commands != 5 || s.Accepted != 2 {
		t.Errorf("after restore: stats %+v, want 5 commands over 2 connections", s)
	}
}
