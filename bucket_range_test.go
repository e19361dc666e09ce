package tollgate

// Buckets of long periods on a real redis-server and in the Go twin: the
// script stored a TAT in 1/64 µs with Lua's %d, a C long, which a TAT some
// 4,500 years ahead overflowed into a negative number: a full bucket. A
// configuration asks at most 100 years of refill (maxRefillUS); a region's
// small share stretches a bucket further.

import (
	"bufio"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// TestRefillBound: a bucket that takes over 100 years to refill is refused
// at New, the error naming the field and the bound (1 per 8760h with burst
// 5000 overflowed the script).
func TestRefillBound(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		average int64
		period  string
		burst   int64
		err     string
	}{
		{"1 per 8760h, burst 5000", 1, "8760h", 5000, "burst: 5000 tokens at 1 per 8760h0m0s refill in 4997 years, more than the 100 years a bucket may take"},
		{"1 per 8760h, burst 100", 1, "8760h", 100, ""},
		{"1 per 2562047h (the longest duration), burst 1", 1, "2562047h", 1, "refill in 292 years"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := CreateConfig()
			cfg.Average, cfg.Period, cfg.Burst = tc.average, tc.period, tc.burst
			_, err := config.Compile(cfg, "api@file")
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("compile: %v, want %q", err, tc.err)
			}
			cfg = CreateConfig()
			cfg.Rules = []config.Rule{{Name: "r", Average: tc.average, Period: tc.period, Burst: tc.burst}}
			_, err = config.Compile(cfg, "api@file")
			if tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), "rules[0].burst: ")) {
				t.Fatalf("a rule: %v, want rules[0].burst refused", err)
			}
		})
	}
}

// TestLongestBucketOnRedis: a bucket at the bound (100 tokens at 1 per
// 8760h, emptied by one request) refuses the next request.
func TestLongestBucketOnRedis(t *testing.T) {
	addr := redistest.Start(t)
	h := handlerOn(t, addr, func(c *config.Config) {
		c.Class = uniqueName("long")
		c.Average, c.Period, c.Burst, c.Cost = 1, "8760h", 100, 100
	})
	for i, want := range []int{200, 429} {
		if rec := serve(h, "k"); rec.Code != want {
			t.Fatalf("request %d: %d (%q), want %d", i, rec.Code, rec.Header().Get("RateLimit"), want)
		}
	}
}

// TestRegionShareOfLongBucketOnRedis: a region holding 124 ppm of a limit
// of 1 per 8760h (weights 1 and 8 x 1000) gets its burst raised to one
// request at 1/share of the rate: a TAT some 8,000 years ahead, which the
// script's %d stored as a negative number, so that every request found a
// full bucket. The script and its Go twin refuse the second request, with
// waits cut at MaxWaitMS.
func TestRegionShareOfLongBucketOnRedis(t *testing.T) {
	addr := redistest.Start(t)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	interval := float64(8760*time.Hour/time.Microsecond) / 1
	call := func() string {
		args := []string{bucket.BucketScript, "1", "tg{region-long}", strconv.FormatFloat(interval, 'g', -1, 64), "1", "1", "-124"}
		if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(redis.AppendCommand(nil, "EVAL", args...)); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(line, "\r\n")
	}
	// The twin, at the share the script charges.
	sh := 124.0 / ppm
	lims := []bucket.Limit{{Interval: interval / sh, Burst: 1, Cost: 1}}
	tats := []float64{0}
	d := make([]int64, bucket.DecisionLen(1))
	max := strconv.FormatInt(bucket.MaxWaitMS, 10)
	for i, want := range []string{"+1 0 " + max + " " + max, "+0 0 " + max + " " + max} {
		got := call()
		if got != want {
			t.Fatalf("call %d: %q, want %q", i, got, want)
		}
		bucket.TakeAll(lims, tats, 1e14, d)
		if twin := "+" + strconv.FormatInt(d[0], 10) + " " + strconv.FormatInt(d[1], 10) + " " + strconv.FormatInt(d[2], 10) + " " + strconv.FormatInt(d[3], 10); twin != want {
			t.Fatalf("call %d: the twin says %q, want %q", i, twin, want)
		}
	}
}

// TestCeilMSBounded: the twin cuts waits at MaxWaitMS, as the script does;
// beyond an int64, Go's conversion of a float is undefined.
func TestCeilMSBounded(t *testing.T) {
	for _, us := range []float64{bucket.MaxWaitMS * 1000, bucket.MaxWaitMS*1000 + 1, 1e25, math.Inf(1)} {
		if got := bucket.CeilMS(us); got != bucket.MaxWaitMS {
			t.Errorf("CeilMS(%g) = %d, want %d", us, got, int64(bucket.MaxWaitMS))
		}
	}
	if got := bucket.CeilMS(1500); got != 2 {
		t.Errorf("CeilMS(1500) = %d, want 2", got)
	}
}
