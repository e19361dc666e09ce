package tollgate

// The plugin with regions: requests of two regions' middlewares, each on
// its own Redis, and the shares their exchanges move (the model and the
// exchange's mechanics: internal/regions' tests).

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// regionPair builds one middleware per region, A and B, each on its own
// redis-server and naming the other as its peer.
func regionPair(t *testing.T, class string, mutate func(*config.Config)) (a, b *Tollgate, ra, rb string) {
	t.Helper()
	ra, rb = redistest.Start(t), redistest.Start(t)
	mk := func(own, name, peer, peerAddr string) *Tollgate {
		return handlerOn(t, own, func(c *config.Config) {
			c.Class = class
			c.Average, c.Period, c.Burst = 50, "1s", 50
			c.Redis.Username = ""
			c.Region = &config.RegionConfig{Name: name, Interval: "200ms", Peers: []config.PeerConfig{{Name: peer, Endpoints: []string{peerAddr}}}}
			if mutate != nil {
				mutate(c)
			}
		})
	}
	return mk(ra, "a", "b", rb), mk(rb, "b", "a", ra), ra, rb
}

// exchangerOf is the region exchange t's requests note keys for.
func exchangerOf(t *Tollgate) *regions.Exchanger {
	shared.regionsMu.Lock()
	defer shared.regionsMu.Unlock()
	return shared.regions[t.conf.Region.Key]
}

// shareIn reads a bucket's share in a region's Redis, ppm; 0: untracked.
func shareIn(t *testing.T, addr, bucket string) int64 {
	t.Helper()
	v := redistest.Do(t, addr, "HGET", bucket+"}s", "s")
	if len(v) != 1 {
		return 0
	}
	n, _ := strconv.ParseInt(v[0], 10, 64)
	return n
}

// drive sends requests for key to h every gap for d, and returns the
// admitted count in the last second.
func drive(h http.Handler, key string, gap, d time.Duration) (total, lastSecond int) {
	end := time.Now().Add(d)
	for now := time.Now(); now.Before(end); now = time.Now() {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == 200 {
			total++
			if end.Sub(now) <= time.Second {
				lastSecond++
			}
		}
		time.Sleep(gap)
	}
	return total, lastSecond
}

func TestRegionSharesFollowTraffic(t *testing.T) {
	class := uniqueName("region")
	a, b, ra, rb := regionPair(t, class, nil)
	bucket := bucket.HashKey(class + "\x00h:" + "hot")
	_, last := drive(a, "hot", 5*time.Millisecond, 3*time.Second)
	sa, sb := shareIn(t, ra, bucket), shareIn(t, rb, bucket)
	t.Logf("shares a=%d b=%d; admitted in a's last second %d", sa, sb, last)
	if sa != 950000 || sb != 50000 {
		t.Errorf("shares a=%d b=%d, want 950000 and 50000", sa, sb)
	}
	if last < 45 || last > 50 {
		t.Errorf("a admitted %d in its last second, want 45-50 (95%% of 50/s)", last)
	}
	// The client moves to b.
	_, last = drive(b, "hot", 5*time.Millisecond, 3*time.Second)
	sa, sb = shareIn(t, ra, bucket), shareIn(t, rb, bucket)
	t.Logf("after the move: shares a=%d b=%d; b admitted %d in its last second", sa, sb, last)
	if sb < 900000 || sa+sb > ppm {
		t.Errorf("after the move: shares a=%d b=%d", sa, sb)
	}
}

func TestRegionStaticShares(t *testing.T) {
	rs, peers, err := config.CompileRegion(&config.RegionConfig{Name: "eu", Weight: 3, Peers: []config.PeerConfig{{Name: "us", Endpoints: []string{"127.0.0.1:2"}}}}, config.RedisSettings{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Static != 750000 || rs.Floor != 75000 || rs.Peers[0].Static != 250000 || rs.Interval != config.DefaultInterval || peers[0].Timeout != time.Second {
		t.Errorf("weights 3:1: static %d floor %d, peer %d; interval %s, peer timeout %s", rs.Static, rs.Floor, rs.Peers[0].Static, rs.Interval, peers[0].Timeout)
	}
	if rs, _, err := config.CompileRegion(&config.RegionConfig{Name: "eu", Interval: "2", Peers: []config.PeerConfig{{Name: "us", Endpoints: []string{"127.0.0.1:2"}}}}, config.RedisSettings{Addr: "127.0.0.1:1"}); err != nil || rs.Interval != 2*time.Second {
		t.Errorf("interval \"2\" (bare seconds): %v, %v", rs, err)
	}
}

// Policies that fail closed hold the static split, and the local fallback
// divides the static share, not the limit.
func TestRegionStaticForFailClosedAndFallback(t *testing.T) {
	class := uniqueName("region")
	a, _, ra, _ := regionPair(t, class, func(c *config.Config) {
		c.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 10, Period: "1m", Burst: 10, FailureMode: "closed"}}
	})
	got := admitted(a, 20, "POST", "/login", "X-API-Key", "hot")
	time.Sleep(600 * time.Millisecond) // three intervals: an exchange would have moved it
	got += admitted(a, 20, "POST", "/login", "X-API-Key", "hot")
	if got != 5 {
		t.Errorf("fail-closed login, 10 a minute, two regions: %d admitted, want 5 (the static half)", got)
	}
	if s := shareIn(t, ra, bucket.HashKey(class+"\x00h:hot")+":login"); s != 0 {
		t.Errorf("the fail-closed rule's share is tracked: %d", s)
	}
	// Redis unreachable: the fallback's bucket is half the limit (one pod).
	down := handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("region")
		c.Average, c.Period, c.Burst = 50, "1m", 50
		c.Region = &config.RegionConfig{Name: "a", Interval: "200ms", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}
	})
	if got := admitted(down, 60, "GET", "/", "X-API-Key", "k"); got != 25 {
		t.Errorf("local fallback in one of two regions: %d admitted of a burst of 50, want 25", got)
	}
}

// Headers stay truthful: RateLimit-Policy keeps the global quota, RateLimit
// counts what this region can still admit.
func TestRegionHeaders(t *testing.T) {
	a, _, _, _ := regionPair(t, uniqueName("region"), nil)
	rec := serve(a, "k")
	if p := rec.Header().Get("RateLimit-Policy"); !strings.Contains(p, "q=50") {
		t.Errorf("RateLimit-Policy %q, want the global q=50", p)
	}
	if r := rec.Header().Get("RateLimit"); !strings.Contains(r, "r=24;") {
		t.Errorf("RateLimit %q, want r=24 (half the burst of 50, less this request)", r)
	}
}

// A share that grows adds rate and capacity, not tokens: the bucket keeps
// the tokens it had; a share that shrinks keeps the bucket's fill
// fraction (its tokens shrink with it). The real script on redis-server.
func TestRegionGrowthKeepsTokens(t *testing.T) {
	addr := redistest.Start(t)
	key := "tg{growth-test}"
	charge := func() (ok, remaining string) {
		// 50 a second, burst 50, cost 1, static share 0.5.
		v := redistest.Do(t, addr, "EVAL", bucket.BucketScript, "1", key, "20000", "50", "1", "500000")
		f := strings.Fields(v[0])
		return f[0], f[1]
	}
	redistest.Do(t, addr, "HSET", key+"}s", "s", "500000")
	if ok, r := charge(); ok != "1" || r != "24" {
		t.Fatalf("at the static share: %s %s, want 1 24 (25 tokens, one taken)", ok, r)
	}
	redistest.Do(t, addr, "HSET", key+"}s", "s", "950000")
	if ok, r := charge(); ok != "1" || r != "23" {
		t.Errorf("after growing to 0.95: %s %s, want 1 23 (the 24 tokens kept, not 0.95 x 50)", ok, r)
	}
	redistest.Do(t, addr, "HSET", key+"}s", "s", "100000")
	if ok, r := charge(); ok != "1" || r != "1" {
		// 23 of 47.5 tokens is a fill fraction of 0.48; at 0.1 (5 tokens)
		// that is 2.4, less this request: 1.4.
		t.Errorf("after shrinking to 0.1: %s %s, want 1 1 (the fill fraction kept)", ok, r)
	}
}

// A key whose traffic falls to under half of every region's static share
// of the rate is no longer tracked: shares back to static, its hash gone
// above static and static below until it lapses.
func TestRegionQuietKeyRetires(t *testing.T) {
	class := uniqueName("region")
	a, b, ra, rb := regionPair(t, class, nil)
	bucket := bucket.HashKey(class + "\x00h:" + "quiet")
	drive(a, "quiet", 5*time.Millisecond, 1500*time.Millisecond)
	if sa := shareIn(t, ra, bucket); sa != 950000 {
		t.Fatalf("while hot: a's share %d, want 950000", sa)
	}
	drive(a, "quiet", 100*time.Millisecond, 3*time.Second) // 10/s: under half of 25/s
	sa, sb := shareIn(t, ra, bucket), shareIn(t, rb, bucket)
	ta, tb := exchangerOf(a).Stats().Tracked, exchangerOf(b).Stats().Tracked
	t.Logf("quiet: shares a=%d b=%d, tracked a=%d b=%d", sa, sb, ta, tb)
	if sa != 0 || (sb != 0 && sb != 500000) || ta != 0 || tb != 0 {
		t.Errorf("a key gone quiet: shares a=%d b=%d (want none, and none or static), tracked a=%d b=%d (want 0)", sa, sb, ta, tb)
	}
}
