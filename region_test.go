package tollgate

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// regionPair builds one middleware per region, A and B, each on its own
// redis-server and naming the other as its peer.
func regionPair(t *testing.T, class string, mutate func(*Config)) (a, b *Tollgate, ra, rb string) {
	t.Helper()
	ra, rb = startLiveRedis(t), startLiveRedis(t)
	mk := func(own, name, peer, peerAddr string) *Tollgate {
		return handlerOn(t, own, func(c *Config) {
			c.Class = class
			c.Average, c.Period, c.Burst = 50, "1s", 50
			c.Redis.Username = ""
			c.Region = &RegionConfig{Name: name, Interval: "200ms", Peers: []PeerConfig{{Name: peer, Endpoints: []string{peerAddr}}}}
			if mutate != nil {
				mutate(c)
			}
		})
	}
	return mk(ra, "a", "b", rb), mk(rb, "b", "a", ra), ra, rb
}

// redisCmd runs one command on addr and returns its reply's strings.
func redisCmd(t *testing.T, addr string, args ...string) []string {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(appendCommand(nil, args[0], args[1:]...)); err != nil {
		t.Fatal(err)
	}
	v, err := readValues(bufio.NewReader(nc))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// shareIn reads a bucket's share in a region's Redis, ppm; 0: untracked.
func shareIn(t *testing.T, addr, bucket string) int64 {
	v := redisCmd(t, addr, "HGET", bucket+"!r", "s")
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
	bucket := hashKey(class + "\x00h:" + "hot")
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
