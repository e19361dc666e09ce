package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFleetQuotaOneCountAcrossReplicas(t *testing.T) {
	// 30 a day in Tokyo's calendar beside 100 a minute: a burst of 45
	// over 3 replicas admits exactly 30, and every later request is
	// refused until Tokyo's midnight, by Redis or the deny cache.
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	daily := map[string]interface{}{"name": "daily", "limit": "30", "window": "day", "timezone": "Asia/Tokyo"}
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "average", 100, "period", "1m", "burst", 100,
			"class", "api", "failureMode", "closed", "redis.timeout", "1s", "decisionHeader", "X-Tollgate-Decision",
			"quotas", []interface{}{daily})})
	}, "api@file")
	key := fleetKey(t, "q")
	rs := fe.burstOf(45, "GET", "/", key)
	checkHeaders(t, rs)
	if s := statuses(rs); s[200] != 30 || s[429] != 15 {
		t.Fatalf("45 concurrent over 3 replicas: %v, want 30 x 200 (the quota), 15 x 429", s)
	}
	for _, r := range rs {
		if d := r.header.Get("X-Tollgate-Decision"); d != "redis" && d != "cache" {
			t.Errorf("replica %d: decided %q, want by Redis or its refusal cached", r.replica, d)
		}
		if p := r.header.Get("RateLimit-Policy"); p != `"api";q=100;w=60, "daily";q=30;w=86400` {
			t.Errorf("RateLimit-Policy %q", p)
		}
	}
	now := time.Now().In(tokyo)
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, tokyo)
	want := int64(midnight.Sub(now).Seconds())
	for i := 0; i < 3; i++ {
		r := fe.mustSend(i, "GET", "/", key)
		if r.status != 429 {
			t.Fatalf("replica %d after the quota: %d, want 429", i, r.status)
		}
		ra, _ := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		if ra < want-3 || ra > want+3 {
			t.Errorf("replica %d: Retry-After %d, want the seconds to midnight in Tokyo, %d", i, ra, want)
		}
		if !strings.Contains(r.body, `"violated-policies":["daily"]`) {
			t.Errorf("replica %d: problem %s, want it to name the quota", i, r.body)
		}
		rl := r.header.Get("RateLimit")
		var left int
		if _, err := fmt.Sscanf(rl, `"api";r=%d;`, &left); err != nil || left < 70 || left > 73 || !strings.Contains(rl, `"daily";r=0;`) {
			t.Errorf("replica %d: RateLimit %q, want the rate charged 30 times (70 left, plus what a few seconds earn: a quota refusal takes nothing) and the quota spent", i, rl)
		}
	}
	// Another client counts on its own.
	if r := fe.mustSend(0, "GET", "/", fleetKey(t, "other")); r.status != 200 {
		t.Errorf("another client: %d, want 200", r.status)
	}
}

func TestFleetResponseCostDebt(t *testing.T) {
	// 25 tokens a minute; the backend says each request cost 10 tokens:
	// requests 1-3 pass (the third drives the bucket 5 into debt), the
	// 4th is refused until the debt is repaid, on any replica.
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", limitOpts(addr, "class", "api", "average", 25, "period", "1m", "burst", 25,
			"redis.timeout", "1s", "responseCost", map[string]interface{}{"header": "X-Usage-Tokens", "max": "1000"})})
	}, "api@file")
	key := fleetKey(t, "cost")
	send := func(i int) *http.Response {
		req, _ := http.NewRequest("GET", fe.fleet.Replicas[i%3].URL("/"), nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Test-Usage", "10")
		resp, err := fleetClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	bucket := bucketKey("api", key)
	for i := 1; i <= 3; i++ {
		if r := send(i - 1); r.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200", i, r.StatusCode)
		}
		// The charge is sent off the response's path: wait until the
		// bucket holds it (10 i tokens spent, 2.4 s each to refill, less
		// what a second earns).
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := fe.redis.Do("PTTL", bucket)
			ms, _ := v.(int64)
			if err == nil && ms > int64(10*i-1)*2400 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d: the bucket's TTL %v ms within 5 s, want the response's charge (%v)", i, v, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r := send(3)
	if r.StatusCode != 429 {
		t.Fatalf("the 4th: %d, want 429 (in debt)", r.StatusCode)
	}
	if rl := r.Header.Get("RateLimit"); !strings.HasPrefix(rl, `"api";r=0;`) {
		t.Errorf("RateLimit %q, want r=0 while in debt", rl)
	}
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 13 || ra > 15 {
		t.Errorf("Retry-After %d, want about 15 s (5 tokens of debt and one to take at 25 a minute)", ra)
	}
}
