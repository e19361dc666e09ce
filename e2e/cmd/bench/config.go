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
// empty middleware refuses all in rejectMost, else passes all); beforeAddr is the Redis of Tollgate at the earlier revision ("": no such
// route), configured as Tollgate is.
func dynamicConf(redisAddr, beforeAddr string, l limits) map[string]interface{} {
	routers := map[string]interface{}{}
	for _, r := range routes {
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
	tollgate := func(plugin, addr string) map[string]interface{} {
		return map[string]interface{}{"plugin": map[string]interface{}{plugin: map[string]interface{}{
			"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source,
			"redis": map[string]interface{}{"endpoints": []interface{}{addr}},
		}}}
	}
	middlewares := map[string]interface{}{
		"inmem-limit":    rateLimit(false),
		"redis-limit":    rateLimit(true),
		"tollgate-limit": tollgate("tollgate", redisAddr),
		"minimal-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"average": l.average, "period": l.period, "burst": l.burst, "redis": redisAddr,
		}}},
		"empty-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
			"empty": true, "refuse": l == rejectMost,
		}}},
	}
	if beforeAddr != "" {
		middlewares["before-limit"] = tollgate(beforePlugin, beforeAddr)
	}
	return map[string]interface{}{"http": map[string]interface{}{"routers": routers, "middlewares": middlewares}}
}

type bench struct {
	dir     string
	redis   *e2e.Redis
	before  *e2e.Redis // Tollgate at the earlier revision's alone (nil without -before)
	fleet   *e2e.Fleet
	traefik *e2e.Traefik
	script  string // wrk Lua script
	wrkDur  time.Duration
	conns   int
	gc      bool        // profile every saturation run (profiles)
	profile string      // -profile: where /tollgate's first admitted run's profile goes
	prof    []cpuSample // the profiles taken, in order
}

// redisOf is the Redis that route's limiter uses: the earlier revision's
// has one of its own, so that its keys, connections and command counts are
// its alone; the others share b.redis.
func (b *bench) redisOf(route string) *e2e.Redis {
	if route == "before" {
		return b.before
	}
	return b.redis
}

// apply writes l and waits until the plugins answer with it (a fresh key
// each probe, so that the probe is admitted whatever the limits), and the
// empty middleware refuses or passes as l says.
func (b *bench) apply(l limits) error {
	beforeAddr := ""
	probes := []string{"/tollgate", "/minimal", "/empty"}
	if b.before != nil {
		beforeAddr = b.before.Addr
		probes = append(probes, "/before")
	}
	if err := b.fleet.WriteDynamic(dynamicConf(b.redis.Addr, beforeAddr, l)); err != nil {
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
