package tollgate

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Windows are contiguous and hold the instant they are asked for, in zones
// with DST at midnight, 30-minute changes and a skipped day.
func TestReviewQuotaWindowsContiguous(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago",
		"America/Havana", "Pacific/Apia", "Asia/Tehran", "Africa/Casablanca", "Pacific/Chatham"}
	from := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	to := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	step := int64(5*86400 + 7*3600 + 13*60 + 7)
	if testing.Short() {
		step *= 8
	}
	bad := 0
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Skip("no tzdata:", err)
		}
		for kind := bucket.WindowHour; kind <= bucket.WindowMonth; kind++ {
			for x := from; x < to && bad < 10; x += step {
				b := bucket.WindowBounds(kind, loc, time.Unix(x, 0))
				us := x*1000000 - bucket.EpochUS
				if !(b[0] < b[1] && b[1] <= us && us < b[2] && b[2] < b[3]) {
					t.Errorf("%s kind %d at %s: bounds %v do not hold it", z, kind, time.Unix(x, 0).In(loc), b)
					bad++
					continue
				}
				end := (b[2] + bucket.EpochUS) / 1000000
				nb := bucket.WindowBounds(kind, loc, time.Unix(end, 0))
				pb := bucket.WindowBounds(kind, loc, time.Unix(end-1, 0))
				if nb[1] != b[2] || nb[0] != b[1] || nb[2] != b[3] || pb[2] != b[2] || pb[1] != b[1] {
					t.Errorf("%s kind %d at %s: window %v, at its end %v, a second before %v: not contiguous",
						z, kind, time.Unix(x, 0).In(loc), b, nb, pb)
					bad++
				}
				if secs := bucket.WindowSeconds(b[1], b[2]); kind == bucket.WindowDay && (secs < 22*3600 || secs > 26*3600) ||
					kind == bucket.WindowHour && (secs < 1800 || secs > 7200) {
					t.Errorf("%s kind %d at %s: a window of %d s", z, kind, time.Unix(x, 0).In(loc), secs)
					bad++
				}
			}
		}
	}
}

// 200 requests at once for one client through 3 pods, a quota of 50 a day
// and a rate that never refuses: exactly 50 pass.
func TestReviewQuotaExactUnderConcurrency(t *testing.T) {
	addr := redistest.Start(t)
	var hs []*Tollgate
	for i := 0; i < 3; i++ {
		hs = append(hs, quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 50, Window: "day"}}, func(c *config.Config) {
			c.Average, c.Burst = 100000, 100000
		}))
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rec := serve(hs[i%3], "k")
			mu.Lock()
			codes[rec.Code]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if codes[http.StatusOK] != 50 || codes[http.StatusTooManyRequests] != 150 {
		t.Errorf("codes %v, want 50 admitted and 150 refused", codes)
	}
}

// A client refused by a quota until the window's end is admitted again
// once a reload raises the limit (the new instance has its own deny cache).
func TestReviewQuotaReloadRaisesLimit(t *testing.T) {
	addr := redistest.Start(t)
	h := quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 2, Window: "day"}}, nil)
	if passed, _ := sendAll(h, "k", 4); passed != 2 {
		t.Fatalf("%d passed, want 2", passed)
	}
	h2 := quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 5, Window: "day"}}, nil)
	if rec := serve(h2, "k"); rec.Code != http.StatusOK {
		t.Errorf("after the reload to a limit of 5: %d by %q, want 200", rec.Code, rec.Header().Get("X-Decision"))
	}
}

// A shadow rule's quota lets a request through when full; the enforcing
// top-level rate is still charged for every request (its enforce call).
func TestReviewQuotaShadowRule(t *testing.T) {
	addr := redistest.Start(t)
	h := quotaHandler(t, addr, nil, func(c *config.Config) {
		c.Burst = 4
		c.Rules = []config.Rule{{Name: "trial", PathPrefix: "/", Average: 100000, Period: "1m", Burst: 100000, Shadow: "true",
			Quotas: []config.Quota{{Name: "trialday", Limit: 2, Window: "day"}}}}
	})
	// The enforcing rate (burst 4) admits 4: the 2 the quota counted and 2
	// it would have refused.
	if passed, _ := sendAll(h, "k", 6); passed != 4 {
		t.Errorf("%d passed, want the enforcing rate's burst, 4", passed)
	}
}

// A rate's refusal is not remembered for as long as a quota's window.
func TestReviewRateRefusalNotExtendedByQuota(t *testing.T) {
	addr := redistest.Start(t)
	h := quotaHandler(t, addr, []config.Quota{{Name: "monthly", Limit: 1000, Window: "month"}}, func(c *config.Config) { c.Burst = 1 })
	serve(h, "k")
	rec := serve(h, "k")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("%d, want the rate's 429", rec.Code)
	}
	if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra < 1 || ra > 60 {
		t.Errorf("Retry-After %d, want the rate's wait (at most 60 s)", ra)
	}
	e := h.top.denied.entries[bucket.ClientKey(h.conf.Class, "h:k")]
	if e == nil {
		for k := range h.top.denied.entries {
			e = h.top.denied.entries[k]
		}
	}
	if e == nil {
		t.Fatal("no deny cache entry")
	}
	if d := time.Duration(e.until - e.at); d > time.Minute {
		t.Errorf("deny cache entry for %s, want at most the rate's minute", d)
	}
}

// A rule keyed its own way with a quota, on Redis Cluster: the quota
// counts per rule identity, exactly, and refuses past its limit.
func TestReviewQuotaOwnKeysCluster(t *testing.T) {
	addr := redistest.StartCluster(t)
	h := quotaHandler(t, addr, []config.Quota{{Name: "topday", Limit: 100, Window: "day"}}, func(c *config.Config) {
		c.Redis.Mode = "cluster"
		c.Rules = []config.Rule{{Name: "byip", PathPrefix: "/", Average: 100000, Period: "1m", Burst: 100000,
			SourceCriterion: &config.SourceCriterion{RequestHeaderName: "X-Tenant"},
			Quotas:          []config.Quota{{Name: "tenantday", Limit: 3, Window: "day"}}}}
	})
	send := func(key, tenant string) int {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Tenant", tenant)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if d := rec.Header().Get("X-Decision"); d != "redis" && d != "cache" {
			t.Logf("%s %s: %d by %s", key, tenant, rec.Code, d)
		}
		return rec.Code
	}
	// Wait (bounded) until the cluster's slots are known.
	for i := 0; i < 500; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "warm")
		req.Header.Set("X-Tenant", "warm")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("X-Decision") == "redis" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	passed := 0
	for i := 0; i < 6; i++ {
		if send("k"+strconv.Itoa(i), "t1") == http.StatusOK {
			passed++
		}
	}
	if passed != 3 {
		t.Errorf("%d passed for one tenant over 6 API keys, want its quota, 3", passed)
	}
	if send("k9", "t2") != http.StatusOK {
		t.Error("another tenant refused")
	}
}

// Two quotas with different names count apart: the top level's "x:y" and
// rule x's "y" do not share one counter (key suffixes ":x:y" both).
func TestReviewQuotaNamesDoNotShareCounters(t *testing.T) {
	addr := redistest.Start(t)
	h, err := New(nil, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(200) }), func() *config.Config {
		c := CreateConfig()
		c.Average, c.Period, c.Burst = 100000, "1m", 100000
		c.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
		c.Redis.Endpoints = []string{addr}
		c.Redis.Username = "names"
		c.Quotas = []config.Quota{{Name: "x:y", Limit: 100, Window: "day"}}
		c.Rules = []config.Rule{{Name: "x", PathPrefix: "/", Average: 100000, Period: "1m", Burst: 100000,
			Quotas: []config.Quota{{Name: "y", Limit: 100, Window: "day"}}}}
		return c
	}(), "api")
	if err != nil {
		t.Logf("refused at compile (a fix): %v", err)
		return
	}
	for i := 0; i < 10; i++ {
		serve(h, "k")
	}
	rl := serve(h, "k").Header().Get("RateLimit")
	t.Logf("RateLimit %s", rl)
	if !strings.Contains(rl, `"x:y";r=89;`) || !strings.Contains(rl, `"y";r=89;`) {
		t.Errorf("RateLimit %q: want each quota charged 11 times (r=89), not one counter charged twice a request", rl)
	}
}

// A quota counter of another type (WRONGTYPE) for one client: that
// client's checks fail, but no other client leaves Redis for the fallback.
func TestReviewQuotaWrongTypeCounter(t *testing.T) {
	addr := redistest.Start(t)
	h := quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 5, Window: "day"}}, nil)
	b := bucket.WindowBounds(bucket.WindowDay, time.UTC, quotaNow())
	key := bucket.ClientKey("api", "h:k") + ":daily@" + strconv.FormatInt(b[1]/1000000, 10)
	redistest.Do(t, addr, "HSET", key, "f", "v")
	codes := map[string]int{}
	for i := 0; i < 30; i++ {
		rec := serve(h, "k")
		codes[strconv.Itoa(rec.Code)+" "+rec.Header().Get("X-Decision")]++
	}
	t.Logf("the client with a broken counter: %v", codes)
	if d := serve(h, "other").Header().Get("X-Decision"); d != "redis" {
		t.Errorf("another client decided by %q, want redis: one client's broken key sent every client to the fallback", d)
	}
	if codes["200 local"] > 0 {
		t.Errorf("%d requests admitted uncounted by the fallback past a counter Redis cannot read", codes["200 local"])
	}
}

// 200 at once through 2 pods, a burst of 30 and a quota of 50: 30 pass,
// and the quota counts exactly those 30 (all or nothing).
func TestReviewQuotaRateAllOrNothingConcurrent(t *testing.T) {
	addr := redistest.Start(t)
	var hs []*Tollgate
	for i := 0; i < 2; i++ {
		hs = append(hs, quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 50, Window: "day"}}, func(c *config.Config) {
			c.Average, c.Period, c.Burst = 1, "1h", 30
		}))
	}
	var mu sync.Mutex
	passed := 0
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if serve(hs[i%2], "k").Code == http.StatusOK {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	b := bucket.WindowBounds(bucket.WindowDay, time.UTC, quotaNow())
	key := bucket.ClientKey("api", "h:k") + ":daily@" + strconv.FormatInt(b[1]/1000000, 10)
	got := redistest.Do(t, addr, "GET", key)
	if passed != 30 || len(got) != 1 || got[0] != "30" {
		t.Errorf("%d passed, the quota's counter %v: want 30 and 30", passed, got)
	}
}

// A quota's refusal remembered in the deny cache is checked against Redis
// again within quotaRecheckMS: a counter reset (or lost) in Redis takes
// effect on the pod within it. Seen before: refused from the cache until
// the window ended.
func TestQuotaRefusalIsRecheckedWithinSeconds(t *testing.T) {
	addr := redistest.Start(t)
	h := quotaHandler(t, addr, []config.Quota{{Name: "daily", Limit: 2, Window: "day"}}, nil)
	for i := 0; i < 3; i++ {
		serve(h, "k")
	}
	rec := serve(h, "k")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-Decision") != "cache" {
		t.Fatalf("over the quota: %d by %q, want 429 from the cache", rec.Code, rec.Header().Get("X-Decision"))
	}
	if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra <= quotaRecheckMS/1000 {
		t.Errorf("Retry-After %d from the cache, want the window's end, not the recheck", ra)
	}
	for _, k := range redistest.Do(t, addr, "KEYS", "*@*") {
		redistest.Do(t, addr, "DEL", k) // the operator resets the counter
	}
	start := time.Now()
	for serve(h, "k").Code != http.StatusOK {
		if time.Since(start) > quotaRecheckMS*time.Millisecond+2*time.Second {
			t.Fatalf("the counter reset in Redis: still refused after %v", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
