package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestEveryRuleMatchingIsDecidedByRedis(t *testing.T) {
	// The most policies one request can match (the top-level limit and 32
	// rules), each with numbers at their widest within the 100 years a
	// bucket may take to refill: 1 token per ns, a burst of 3e18 (95
	// years), a cost of half of it, so that a fresh bucket answers 19
	// digits of tokens left and 13 of ms until full. The decision is the
	// longest reply line a correct script sends, and Redis decides it.
	forEachKind(t, func(t *testing.T, e *env) {
		const burst, cost = int64(3000000000000000000), int64(1500000000000000000)
		var rules []interface{}
		for i := 0; i < 32; i++ {
			rules = append(rules, map[string]interface{}{"name": fmt.Sprintf("rule%02d", i), "average": 1000000000, "period": "1s", "burst": burst})
		}
		h := e.handler(e.pod(), "api@file", e.opts("average", 1000000000, "period", "1s", "burst", burst, "cost", cost,
			"rules", rules, "decisionHeader", "X-Tollgate-Decision", "failureMode", "closed"))
		for i := 0; i < 3; i++ {
			rec := do(h, "GET", "/", uniqueKey(t))
			items := strings.Split(rec.Header().Get("RateLimit"), ", ")
			if rec.Code != 200 || rec.Header().Get("X-Tollgate-Decision") != "redis" || len(items) != 33 ||
				!regexp.MustCompile(`;r=\d{19};`).MatchString(items[32]) {
				t.Fatalf("request %d: %d, decided %q, %d RateLimit items (the last %q); want 200 decided by Redis over 33 policies, 19 digits left",
					i, rec.Code, rec.Header().Get("X-Tollgate-Decision"), len(items), items[len(items)-1])
			}
		}
	})
}

func TestNineteenDigitNumbersAreDecidedByRedis(t *testing.T) {
	// A burst of 2e18 (the config allows it at 1 token per ns: 63 years to
	// refill): the script's reply carries 19-digit numbers, and Redis still
	// decides.
	forEachKind(t, func(t *testing.T, e *env) {
		h := e.handler(e.pod(), "api@file", e.opts("average", 1000000000, "period", "1s", "burst", int64(2000000000000000000),
			"decisionHeader", "X-Tollgate-Decision", "failureMode", "closed"))
		rec := do(h, "GET", "/", uniqueKey(t))
		if rec.Code != 200 || rec.Header().Get("X-Tollgate-Decision") != "redis" ||
			!regexp.MustCompile(`;r=\d{19};`).MatchString(rec.Header().Get("RateLimit")) {
			t.Fatalf("%d, decided %q, RateLimit %q: want 200 decided by Redis with 19-digit numbers",
				rec.Code, rec.Header().Get("X-Tollgate-Decision"), rec.Header().Get("RateLimit"))
		}
	})
}
