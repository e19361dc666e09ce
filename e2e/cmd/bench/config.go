package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// routes are the bench's routers, in the tables' order; -before adds
// "before" after "tollgate" (enableBefore).
var routes = []string{"none", "inmem", "redis", "tollgate", "minimal", "empty"}

var labels = map[string]string{
	"none":     "no middleware",
	"inmem":    "Traefik rateLimit (memory)",
	"redis":    "Traefik rateLimit (redis)",
	"tollgate": "Tollgate",
	"minimal":  "minimal plugin (1 round trip)",
	"empty":    "empty interpreted middleware",
	leased:     "Tollgate with leases",
	quota:      "Tollgate with a quota",
	capped:     "Tollgate with a cap",
}

// leased is the route of Tollgate with leases (leaseMax), configured as
// /tollgate otherwise, on a Redis of its own. It is not one of routes: it
// runs in the admitted pass and the hot-key pass only (withLeased).
const leased = "leased"

// leaseMax is /leased's lease: 50 requests, for the default ttl (1s). On
// the hot-key load (some 400 requests/s per key) a lease lasts about a
// tenth of its ttl, so it is spent, not given back, and about one request
// in 50 goes to Redis, well under the target of one in 5; a larger one
// saves little more and under-admits a client more (up to max per pod
// for a ttl), and a client needs 2 x max x pods left to get one.
const leaseMax = 50

// withLeased is rts with /leased next to /tollgate (beside).
func withLeased(rts []string, rep int) []string { return beside(rts, rep, leased) }

// beside is rts with route next to /tollgate: after it in odd reps,
// before it in even ones, so that neither always runs first.
func beside(rts []string, rep int, route string) []string {
	var out []string
	for _, rt := range rts {
		if rt == "tollgate" && rep%2 == 0 {
			out = append(out, route)
		}
		out = append(out, rt)
		if rt == "tollgate" && rep%2 == 1 {
			out = append(out, route)
		}
	}
	return out
}

// enableBefore adds the route of Tollgate at rev (its short hash).
func enableBefore(rev string) {
	for i, rt := range routes {
		if rt == "tollgate" {
			routes = append(routes[:i+1], append([]string{"before"}, routes[i+1:]...)...)
			break
		}
	}
	labels["before"] = "Tollgate at " + rev
}

// enabled reports whether rt is one of this bench's routes.
func enabled(rt string) bool {
	for _, r := range routes {
		if r == rt {
			return true
		}
	}
	return false
}

// order is the routes in the order rep runs them: with -before, Tollgate
// and Tollgate before swap places every other rep, so that neither always
// runs right after the other.
func order(rep int) []string {
	o := append([]string(nil), routes...)
	if rep%2 == 0 && enabled("before") {
		for i := range o {
			switch o[i] {
			case "tollgate":
				o[i] = "before"
			case "before":
				o[i] = "tollgate"
			}
		}
	}
	return o
}

// limits is one pass's configuration of the four limiters.
type limits struct {
	average int64
	period  string
	burst   int64
}

var (
	admitAll   = limits{100000000, "1s", 100000000} // nothing is rejected
	rejectMost = limits{1, "1m", 1}                 // one request per key and minute
	memory     = limits{100, "24h", 20}             // keys live through the measurement
)

// dynamicConf is the routers and their limiters, l's limits in each (the
// empty middleware refuses all in rejectMost, else passes all); leasedAddr
// is /leased's Redis, quotaAddr /quota's, cappedAddr /capped's; beforeAddr is the Redis of
// Tollgate at the earlier revision ("": no such route), configured as
// Tollgate is.
func dynamicConf(redisAddr, leasedAddr, quotaAddr, cappedAddr, beforeAddr string, l limits) map[string]interface{} {
	routers := map[string]interface{}{}
	for _, r := range append(append([]string(nil), routes...), leased, quota, capped) {
		rt := map[string]interface{}{"rule": "PathPrefix(`/" + r + "`)", "service": "backend", "entryPoints": []interface{}{"web"}}
		if r != "none" {
			rt["middlewares"] = []interface{}{r + "-limit"}
		}
		routers[r] = rt
	}
	source := map[string]interface{}{"requestHeaderName": "X-API-Key"}
	rateLimit := func(withRedis bool) map[string]interface{} {
		m := map[string]interface{}{"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source}
		if withRedis {
			m["redis"] = map[string]interface{}{"endpoints": []interface{}{redisAddr}}
		}
		return map[string]interface{}{"rateLimit": m}
	}
	// tollgate is Tollgate's middleware on addr, with more options.
	tollgate := func(plugin, addr string, more map[string]interface{}) map[string]interface{} {
		m := map[string]interface{}{
			"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source,
			"redis": map[string]interface{}{"endpoints": []interface{}{addr}},
		}
		for k, v := range more {
			m[k] = v
		}
		return map[string]interface{}{"plugin": map[string]interface{}{plugin: m}}
	}
	middlewares := map[string]interface{}{
		"inmem-limit":    rateLimit(false),
		"redis-limit":    rateLimit(true),
		"tollgate-limit": tollgate("tollgate", redisAddr, nil),
		"leased-limit":   tollgate("tollgate", leasedAddr, map[string]interface{}{"lease": map[string]interface{}{"max": leaseMax}}),
		"quota-limit":    tollgate("tollgate", quotaAddr, map[string]interface{}{"quotas": quotaConf()}),
		"capped-limit":   tollgate("tollgate", cappedAddr, map[string]interface{}{"concurrency": cappedConf()}),
		"minimal-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"average": l.average, "period": l.period, "burst": l.burst, "redis": redisAddr,
		}}},
		"empty-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"empty": true, "refuse": l == rejectMost,
		}}},
	}
	if beforeAddr != "" {
		middlewares["before-limit"] = tollgate(beforePlugin, beforeAddr, nil)
	}
	return map[string]interface{}{"http": map[string]interface{}{"routers": routers, "middlewares": middlewares}}
}

type bench struct {
	dir     string
	redis   *e2e.Redis
	leased  *e2e.Redis // Tollgate with leases' alone
	quota   *e2e.Redis // Tollgate with a quota's alone
	capped  *e2e.Redis // Tollgate with a cap's alone
	before  *e2e.Redis // Tollgate at the earlier revision's alone (nil without -before)
	fleet   *e2e.Fleet
	traefik *e2e.Traefik
	script  string // wrk Lua script
	hot     string // wrk Lua script of the hot-key load
	wrkDur  time.Duration
	conns   int
	gc      bool        // profile every saturation run (profiles)
	profile string      // -profile: where /tollgate's first admitted run's profile goes
	prof    []cpuSample // the profiles taken, in order
}

// redisOf is the Redis that route's limiter uses: the earlier revision's,
// Tollgate with leases, with a quota and with a cap have one each, so that
// their keys, connections and command counts (a lease's give-back after a
// run included) are their own; the others share b.redis.
func (b *bench) redisOf(route string) *e2e.Redis {
	switch route {
	case "before":
		return b.before
	case leased:
		return b.leased
	case quota:
		return b.quota
	case capped:
		return b.capped
	}
	return b.redis
}

// apply writes l and waits until the plugins answer with it (a fresh key
// each probe, so that the probe is admitted whatever the limits), and the
// empty middleware refuses or passes as l says.
func (b *bench) apply(l limits) error {
	beforeAddr := ""
	probes := []string{"/tollgate", "/" + leased, "/" + quota, "/" + capped, "/minimal", "/empty"}
	if b.before != nil {
		beforeAddr = b.before.Addr
		probes = append(probes, "/before")
	}
	if err := b.fleet.WriteDynamic(dynamicConf(b.redis.Addr, b.leased.Addr, b.quota.Addr, b.capped.Addr, beforeAddr, l)); err != nil {
		return err
	}
	want := fmt.Sprintf(";q=%d;", l.average)
	deadline := time.Now().Add(20 * time.Second)
	for _, rt := range probes {
		for {
			if time.Now().After(deadline) {
				return fmt.Errorf("configuration %+v not applied to %s", l, rt)
			}
			req, _ := http.NewRequest("GET", b.traefik.URL(rt), nil)
			req.Header.Set("X-API-Key", fmt.Sprintf("apply-probe-%d", time.Now().UnixNano()))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if rt == "/empty" && (resp.StatusCode == http.StatusTooManyRequests) == (l == rejectMost) ||
					rt != "/empty" && strings.Contains(resp.Header.Get("RateLimit-Policy"), want) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	return nil
}

// only is those of rts that are among names, in rts's order.
func only(rts []string, names ...string) []string {
	var out []string
	for _, rt := range rts {
		for _, n := range names {
			if rt == n {
				out = append(out, rt)
			}
		}
	}
	return out
}
