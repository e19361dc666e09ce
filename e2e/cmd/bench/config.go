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

// addrs is where dynamicConf points the limiters and the routes: the
// Redis of each limiter that has one of its own (see redisOf) and the
// backend.
type addrs struct {
	redis  string // the shared one: /redis, /tollgate, /minimal, the body routes through /tollgate, the override routes
	leased string // /leased's
	quota  string // /quota's
	capped string // /capped's
	before string // /before's; "": no such route
	cost   string // the response-cost routes' (responsecost.go); "": the shared one
	refuse string // the harness shape's refusal routes' (shape.go); "": the shared one
	// backend is the bench's backend (bodies.go), host:port, that every
	// router's service "backend" points at; "": the fleet's (WriteDynamic
	// adds it).
	backend string
}

// sameRedis is every limiter on the Redis at addr, the fleet's backend.
func sameRedis(addr string) addrs {
	return addrs{redis: addr, leased: addr, quota: addr, capped: addr, cost: addr, refuse: addr}
}

// dynamicConf is the routers and their limiters, l's limits in each but
// the harness shape's refusal routes, always rejectMost's (the empty
// middleware refuses all in rejectMost, else passes all); each limiter on
// its Redis in a; every router's service on a.backend; and the metrics
// and admin endpoints (the admin one names the override routes' classes,
// overrides.go).
func dynamicConf(a addrs, l limits) map[string]interface{} {
	if a.cost == "" {
		a.cost = a.redis
	}
	if a.refuse == "" {
		a.refuse = a.redis
	}
	routers := map[string]interface{}{}
	router := func(name string, middlewares ...string) {
		rt := map[string]interface{}{"rule": "PathPrefix(`/" + name + "`)", "service": "backend", "entryPoints": []interface{}{"web"}}
		if len(middlewares) > 0 {
			var mws []interface{}
			for _, m := range middlewares {
				mws = append(mws, m)
			}
			rt["middlewares"] = mws
		}
		routers[name] = rt
	}
	for _, r := range append(append(append([]string(nil), routes...), leased, quota, capped, refuseTollgate, refuseRedis), overrideRoutes...) {
		if r == "none" {
			router(r)
		} else {
			router(r, r+"-limit")
		}
	}
	for _, c := range costRoutes {
		router(c.route, c.middleware())
	}
	// Tollgate's counters (responsecost.go reads the response costs'),
	// served by a Tollgate middleware with serveMetrics.
	routers[metricsRoute] = map[string]interface{}{"rule": "Path(`/" + metricsRoute + "`)", "service": "noop@internal",
		"entryPoints": []interface{}{"web"}, "middlewares": []interface{}{metricsRoute}}
	// The admin endpoint, whose adminClasses make the override routes'
	// classes sync (overrides.go).
	routers[adminRoute] = map[string]interface{}{"rule": "PathPrefix(`/" + adminRoute + "`)", "service": "noop@internal",
		"entryPoints": []interface{}{"web"}, "middlewares": []interface{}{adminRoute}}
	middlewares := map[string]interface{}{
		"inmem-limit":    rateLimitConf(l, ""),
		"redis-limit":    rateLimitConf(l, a.redis),
		"tollgate-limit": tollgateConf(l, "tollgate", a.redis, nil),
		"leased-limit":   tollgateConf(l, "tollgate", a.leased, map[string]interface{}{"lease": map[string]interface{}{"max": leaseMax}}),
		"quota-limit":    tollgateConf(l, "tollgate", a.quota, map[string]interface{}{"quotas": quotaConf()}),
		"capped-limit":   tollgateConf(l, "tollgate", a.capped, map[string]interface{}{"concurrency": cappedConf()}),
		"minimal-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"average": l.average, "period": l.period, "burst": l.burst, "redis": a.redis,
		}}},
		"empty-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"empty": true, "refuse": l == rejectMost,
		}}},
		refuseTollgate + "-limit": tollgateConf(rejectMost, "tollgate", a.refuse, nil),
		refuseRedis + "-limit":    rateLimitConf(rejectMost, a.refuse),
		headerCost + "-limit":     tollgateConf(l, "tollgate", a.cost, map[string]interface{}{"responseCost": headerCostConf()}),
		bodyCost + "-limit":       tollgateConf(l, "tollgate", a.cost, map[string]interface{}{"responseCost": bodyCostConf()}),
		metricsRoute:              map[string]interface{}{"plugin": map[string]interface{}{"tollgate": map[string]interface{}{"serveMetrics": true}}},
		adminRoute:                adminConf(),
	}
	for _, c := range overrideRoutes { // /tollgate's, in a class of its own that adminRoute names
		middlewares[c+"-limit"] = tollgateConf(l, "tollgate", a.redis, map[string]interface{}{"class": c})
	}
	if a.before != "" {
		middlewares["before-limit"] = tollgateConf(l, beforePlugin, a.before, nil)
	}
	h := map[string]interface{}{"routers": routers, "middlewares": middlewares}
	if a.backend != "" {
		h["services"] = map[string]interface{}{"backend": map[string]interface{}{"loadBalancer": map[string]interface{}{
			"servers": []interface{}{map[string]interface{}{"url": "http://" + a.backend}}}}}
	}
	return map[string]interface{}{"http": h}
}

// source is every limiter's client: the X-API-Key header.
func source() map[string]interface{} {
	return map[string]interface{}{"requestHeaderName": "X-API-Key"}
}

// rateLimitConf is Traefik's rateLimit middleware with l's limits, on the
// Redis at redisAddr ("": in memory).
func rateLimitConf(l limits, redisAddr string) map[string]interface{} {
	m := map[string]interface{}{"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source()}
	if redisAddr != "" {
		m["redis"] = map[string]interface{}{"endpoints": []interface{}{redisAddr}}
	}
	return map[string]interface{}{"rateLimit": m}
}

// tollgateConf is Tollgate's middleware (plugin: Tollgate's name in
// Traefik's configuration) with l's limits on the Redis at addr, with
// more options.
func tollgateConf(l limits, plugin, addr string, more map[string]interface{}) map[string]interface{} {
	m := map[string]interface{}{
		"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source(),
		"redis": map[string]interface{}{"endpoints": []interface{}{addr}},
	}
	for k, v := range more {
		m[k] = v
	}
	return map[string]interface{}{"plugin": map[string]interface{}{plugin: m}}
}

type bench struct {
	dir     string
	redis   *e2e.Redis
	leased  *e2e.Redis // Tollgate with leases' alone
	quota   *e2e.Redis // Tollgate with a quota's alone
	capped  *e2e.Redis // Tollgate with a cap's alone
	before  *e2e.Redis // Tollgate at the earlier revision's alone (nil without -before)
	cost    *e2e.Redis // the response-cost routes' (responsecost.go)
	refuse  *e2e.Redis // the harness shape's refusal routes' (shape.go)
	backend *backend   // every route's (bodies.go)
	// overrides is how many overrides /ovr10k's class holds on redis
	// (-overrides; overrides.go).
	overrides int
	fleet     *e2e.Fleet
	traefik   *e2e.Traefik
	script    string // wrk Lua script
	hot       string // wrk Lua script of the hot-key load
	wrkDur    time.Duration
	conns     int
	gc        bool        // profile every saturation run (profiles)
	profile   string      // -profile: where /tollgate's first admitted run's profile goes
	prof      []cpuSample // the profiles taken, in order
}

// redisOf is the Redis that route's limiter uses: the earlier revision's,
// Tollgate with leases, with a quota and with a cap have one each, so that
// their keys, connections and command counts (a lease's give-back after a
// run included) are their own; so do the response-cost routes with
// responseCost (together) and the harness shape's refusal routes
// (together, its limits never change); the others share b.redis.
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
	case refuseTollgate, refuseRedis:
		return b.refuse
	}
	if c, ok := costRouteOf(route); ok && c.reads != readsNothing {
		return b.cost
	}
	return b.redis
}

// addrs is where b's limiters and routes point (dynamicConf).
func (b *bench) addrs() addrs {
	a := addrs{redis: b.redis.Addr, leased: b.leased.Addr, quota: b.quota.Addr, capped: b.capped.Addr,
		cost: b.cost.Addr, refuse: b.refuse.Addr, backend: b.backend.addr}
	if b.before != nil {
		a.before = b.before.Addr
	}
	return a
}

// apply writes l and waits until the plugins answer with it (a fresh key
// each probe, so that the probe is admitted whatever the limits), and the
// empty middleware refuses or passes as l says.
func (b *bench) apply(l limits) error {
	probes := []string{"/tollgate", "/" + leased, "/" + quota, "/" + capped, "/minimal", "/empty",
		"/" + costRouteFor(bodyJSON, readsHeader), "/" + costRouteFor(bodyJSON, readsBody), "/" + ovr0, "/" + ovr10k}
	if b.before != nil {
		probes = append(probes, "/before")
	}
	if err := b.fleet.WriteDynamic(dynamicConf(b.addrs(), l)); err != nil {
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
