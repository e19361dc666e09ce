package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestEveryRuleMatchingIsDecidedByRedis(t *testing.T) {
	// The most policies one request can match (the top-level limit and 32
	// rules), each with numbers at their widest: the decision is the
	// longest reply line a correct script sends, and Redis decides it.
	forEachKind(t, func(t *testing.T, e *env) {
		var rules []interface{}
		for i := 0; i < 32; i++ {
			rules = append(rules, map[string]interface{}{"name": fmt.Sprintf("rule%02d", i), "average": 1, "period": "8760h", "burst": int64(1) << 40})
		}
		h := e.handler(e.pod(), "api@file", e.opts("average", 1, "period", "8760h", "burst", int64(1)<<40,
			"rules", rules, "decisionHeader", "X-Tollgate-Decision", "failureMode", "closed"))
		for i := 0; i < 3; i++ {
			rec := do(h, "GET", "/", uniqueKey(t))
			items := strings.Split(rec.Header().Get("RateLimit"), ", ")
			if rec.Code != 200 || rec.Header().Get("X-Tollgate-Decision") != "redis" || len(items) != 33 {
				t.Fatalf("request %d: %d, decided %q, %d RateLimit items; want 200 decided by Redis over 33 policies",
					i, rec.Code, rec.Header().Get("X-Tollgate-Decision"), len(items))
			}
		}
	})
}

func TestNineteenDigitNumbersAreDecidedByRedis(t *testing.T) {
	// A burst of 2e18 (the config allows it): the script's reply carries
	// 19-digit numbers, and Redis still decides.
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 1, "period", "1s", "burst", int64(2000000000000000000),
			"decisionHeader", "X-Tollgate-Decision", "failureMode", "closed"))
		rec := do(h, "GET", "/", uniqueKey(t))
		if rec.Code != 200 || rec.Header().Get("X-Tollgate-Decision") != "redis" ||
			!regexp.MustCompile(`;r=\d{19};`).MatchString(rec.Header().Get("RateLimit")) {
			t.Fatalf("%d, decided %q, RateLimit %q: want 200 decided by Redis with 19-digit numbers",
				rec.Code, rec.Header().Get("X-Tollgate-Decision"), rec.Header().Get("RateLimit"))
		}
	})
}
