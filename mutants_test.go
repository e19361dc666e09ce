package tollgate

// Tests that catch plausible bugs the rest of the fast tier let through
// (a review mutated the code one bug at a time): each names the bug it
// catches.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Catches: the bucket script charging 1, not cost, when it admits. Burst
// 10, cost 3: three requests take 9 tokens, the fourth finds 1.
func TestScriptChargesCostWhenItAdmits(t *testing.T) {
	addr := redistest.Start(t)
	h := handlerWith(t, addr, http.NotFoundHandler(), func(c *config.Config) {
		c.Average, c.Period, c.Burst, c.Cost = 1, "1h", 10, 3
	})
	for i := 1; i <= 4; i++ {
		want := http.StatusNotFound // admitted: the backend's answer
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if rec := serve(h, "k"); rec.Code != want {
			t.Errorf("request %d of cost 3 on a burst of 10: %d, want %d", i, rec.Code, want)
		}
	}
}

// Catches: expired slots never swept (a slot whose deadline passed is
// held until its key expires). The key is kept for an hour here, so only
// the take's sweep frees the slot.
func TestExpiredSlotIsSweptBeforeItsKeyExpires(t *testing.T) {
	addr := redistest.Start(t)
	noop := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {})
	h := capHandler(t, addr, noop, config.Concurrency{Max: 1, Key: "class"}, nil)
	zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
	past := int64(redisNowUS(t, addr)) - 10*1000000 // 10 s ago
	redistest.Do(t, addr, "ZADD", zkey, strconv.FormatInt(past, 10), "123456789012345678")
	redistest.Do(t, addr, "PEXPIRE", zkey, "3600000")
	if rec := serve(h, "k"); rec.Code != http.StatusOK {
		t.Errorf("max 1, the one slot held expired 10 s ago: %d, want 200 (swept)", rec.Code)
	}
}

// Catches: Retry-After taken from the first refusing policy rather than
// the longest wait. The top level refills in a minute, the rule in an
// hour: a request refused by both waits the hour.
func TestRetryAfterIsTheLongestWait(t *testing.T) {
	addr := redistest.Start(t)
	h := handlerWith(t, addr, http.NotFoundHandler(), func(c *config.Config) {
		c.Average, c.Period, c.Burst = 1, "1m", 1
		c.Rules = []config.Rule{{Name: "slow", PathPrefix: "/", Average: 1, Period: "1h", Burst: 1}}
	})
	if rec := serve(h, "k"); rec.Code != http.StatusNotFound {
		t.Fatalf("first request: %d, want admitted", rec.Code)
	}
	rec := serve(h, "k")
	ra, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
	if rec.Code != http.StatusTooManyRequests || ra < 3590 || ra > 3600 {
		t.Errorf("refused by a minute's and an hour's bucket: %d, Retry-After %q; want 429 and the hour (3600)", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// Catches: a set failing closed only when its last policy does. The top
// level fails closed, a matching rule open; Redis is down: 503.
func TestAClosedPolicyClosesTheSet(t *testing.T) {
	h := handlerWith(t, "127.0.0.1:1", http.NotFoundHandler(), func(c *config.Config) {
		c.FailureMode = "closed"
		c.Redis.Timeout = "50ms"
		c.Rules = []config.Rule{{Name: "open", PathPrefix: "/", Average: 100, Period: "1m", Burst: 100, FailureMode: "open"}}
	})
	if rec := serve(h, "k"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("Redis down, the top level closed and a rule open: %d, want 503", rec.Code)
	}
}

// Catches: the local fallback's cap slot not given back when a rate
// refuses in the same decision. Redis down, one pod: a rate of burst 1
// refilling in 500 ms and a cap of 1. A request admitted, one refused by
// the rate (its slot must come back), then, the rate refilled, one more
// admitted.
func TestLocalCapSlotComesBackWhenARateRefuses(t *testing.T) {
	noop := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {})
	h := capHandler(t, "127.0.0.1:1", noop, config.Concurrency{Max: 1}, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 2, "1s", 1
		c.Replicas = 1
		c.Redis.Timeout = "50ms"
	})
	if rec := serve(h, "k"); rec.Code != http.StatusOK || rec.Header().Get("X-Decision") != "local" {
		t.Fatalf("first request, Redis down: %d by %q, want 200 by local", rec.Code, rec.Header().Get("X-Decision"))
	}
	if rec := serve(h, "k"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("second request at once: %d, want 429 (the rate's bucket is empty)", rec.Code)
	}
	time.Sleep(600 * time.Millisecond)
	if rec := serve(h, "k"); rec.Code != http.StatusOK {
		t.Errorf("after the rate refilled: %d %s, want 200 (no slot held by the refused request)", rec.Code, rec.Body.String())
	}
}

// Catches: the exemption guard under excludedIPs. The proxy is inside the
// exempt range and excluded; a request whose X-Forwarded-For is
// unparsable, or all excluded, has no client address by the strategy and
// is never exempt: 2 of 20 admitted (burst 2), not 20.
func TestExemptionNeedsAClientAddressUnderExcludedIPs(t *testing.T) {
	addr := redistest.Start(t)
	for n, xff := range []string{"not-an-address", "10.0.0.7, 10.0.0.8"} {
		h := handlerWith(t, addr, http.NotFoundHandler(), func(c *config.Config) {
			c.Average, c.Period, c.Burst = 1, "1h", 2
			c.Class = fmt.Sprintf("exempt-%d", n)
			c.SourceCriterion = &config.SourceCriterion{IPStrategy: &config.IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}}
			c.ExemptSourceRange = []string{"10.0.0.0/8"}
		})
		admitted := 0
		for i := 0; i < 20; i++ {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = "10.0.0.1:40000"
			req.Header.Set("X-Forwarded-For", xff)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusTooManyRequests {
				admitted++
			}
		}
		if admitted != 2 {
			t.Errorf("X-Forwarded-For %q through an exempt, excluded proxy: %d of 20 admitted, want 2 (never exempt)", xff, admitted)
		}
	}
}

// Catches: the admitted path's t rounded down, not up, on either way an
// admitted request's headers are written: near the limit (answer) and
// not (ServeHTTP's own). Burst 10, cost 5, a token a second: the first
// request leaves 5, and 1.5 s later the second leaves 1.5; a request of 5
// fits in 3.5 s: t=4, not 3. Burst 100, cost 30, 10 tokens a second: 70,
// 40, then 1.5 s later 25 left (not near the limit, a fifth of the
// burst): 30 fit in 0.5 s, t=1, not 0.
func TestAdmittedTIsRoundedUp(t *testing.T) {
	addr := redistest.Start(t)
	for _, tc := range []struct {
		burst, cost, before int64
		want                string
	}{
		{10, 5, 1, ";r=1;t=4"},
		{100, 30, 2, ";r=25;t=1"},
	} {
		// A pod stalled for 0.4 s between the last two requests would
		// change the wait by a second: such a try is made again.
		for try := 0; ; try++ {
			h := handlerWith(t, addr, http.NotFoundHandler(), func(c *config.Config) {
				c.Average, c.Period, c.Burst, c.Cost = tc.burst, "10s", tc.burst, tc.cost
				c.Class = fmt.Sprintf("round-%d-%d", tc.burst, try)
			})
			var last time.Time
			for i := int64(0); i < tc.before; i++ {
				last = time.Now()
				if rec := serve(h, "k"); rec.Code != http.StatusNotFound {
					t.Fatalf("burst %d: request %d: %d, want admitted", tc.burst, i+1, rec.Code)
				}
			}
			time.Sleep(1500 * time.Millisecond)
			rec := serve(h, "k")
			if time.Since(last) > 1900*time.Millisecond && try < 2 {
				continue
			}
			if got := rec.Header().Get("RateLimit"); rec.Code != http.StatusNotFound || !strings.HasSuffix(got, tc.want) {
				t.Errorf("burst %d, cost %d, after 1.5 s: %d, RateLimit %q; want admitted and %s (rounded up)", tc.burst, tc.cost, rec.Code, got, tc.want)
			}
			break
		}
	}
}

// Catches: a quota never counting in the previous window when Redis's
// clock is behind the pod's (the pod has entered a window Redis's TIME
// has not reached yet): the count goes to the window that holds TIME.
func TestQuotaCountsInTheWindowThatHoldsRedisTime(t *testing.T) {
	addr := redistest.Start(t)
	now := int64(redisNowUS(t, addr))
	hour := int64(3600 * 1000000)
	b := []int64{now + 10000000 - hour, now + 10000000, now + 10000000 + hour, now + 10000000 + 2*hour} // the pod 10 s ahead
	win := fmt.Sprintf("%d %d %d %d 0", b[0], b[1], b[2], b[3])
	redistest.Do(t, addr, "EVAL", bucket.BucketScript, "1", "tg{q}", "-5", win, "1")
	prev := redistest.Do(t, addr, "GET", fmt.Sprintf("tg{q}@%d", b[0]/1000000))
	cur := redistest.Do(t, addr, "GET", fmt.Sprintf("tg{q}@%d", b[1]/1000000))
	if len(prev) != 1 || prev[0] != "1" || len(cur) == 1 && cur[0] != "" {
		t.Errorf("Redis's TIME 10 s before the window the pod is in: previous window's count %q, current's %q; want 1 in the previous", prev, cur)
	}
}

// Redis's TIME outside the four bounds the pod sent (the pod's clock off
// by more than a window): the script refuses with an error and counts
// nothing, never in an ended window.
func TestQuotaOutsideThePodsWindowsIsRefused(t *testing.T) {
	addr := redistest.Start(t)
	now := int64(redisNowUS(t, addr))
	hour := int64(3600 * 1000000)
	for _, tc := range []struct {
		desc  string
		start int64 // the previous window's start
	}{
		{"the pod 3 hours behind", now - 3*hour - 5*hour},
		{"the pod 3 hours ahead", now + 3*hour},
	} {
		b := []int64{tc.start, tc.start + hour, tc.start + 2*hour, tc.start + 3*hour}
		win := fmt.Sprintf("%d %d %d %d 0", b[0], b[1], b[2], b[3])
		v := redistest.Do(t, addr, "EVAL", bucket.BucketScript, "1", "tg{skew}", "-5", win, "1")
		if len(v) != 1 || !strings.HasPrefix(v[0], "-") || !strings.Contains(v[0], "outside the quota windows") {
			t.Errorf("%s: %q, want the script's error", tc.desc, v)
		}
		if keys := redistest.Do(t, addr, "KEYS", "tg{skew}*"); len(keys) != 0 && keys[0] != "" {
			t.Errorf("%s: counted in %v", tc.desc, keys)
		}
	}
}
