package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

var routes = []string{"none", "inmem", "redis", "tollgate", "minimal"}

var labels = map[string]string{
	"none":     "no middleware",
	"inmem":    "Traefik rateLimit (memory)",
	"redis":    "Traefik rateLimit (redis)",
	"tollgate": "Tollgate",
	"minimal":  "minimal plugin (1 round trip)",
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

func dynamicConf(redisAddr string, l limits) map[string]interface{} {
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
	return map[string]interface{}{"http": map[string]interface{}{
		"routers": routers,
		"middlewares": map[string]interface{}{
			"inmem-limit": rateLimit(false),
			"redis-limit": rateLimit(true),
			"tollgate-limit": map[string]interface{}{"plugin": map[string]interface{}{"tollgate": map[string]interface{}{
				"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source,
				"redis": map[string]interface{}{"endpoints": []interface{}{redisAddr}},
			}}},
			"minimal-limit": map[string]interface{}{"plugin": map[string]interface{}{"minimal": map[string]interface{}{
				"average": l.average, "period": l.period, "burst": l.burst, "redis": redisAddr,
			}}},
		},
	}}
}

type bench struct {
	dir     string
	redis   *e2e.Redis
	fleet   *e2e.Fleet
	traefik *e2e.Traefik
	script  string // wrk Lua script
	wrkDur  time.Duration
	conns   int
	gc      bool        // profile every saturation run (profiles)
	profile string      // -profile: where /tollgate's first admitted run's profile goes
	prof    []cpuSample // the profiles taken, in order
}

// apply writes l and waits until both plugins answer with it (a fresh key
// each probe, so that the probe is admitted whatever the limits).
func (b *bench) apply(l limits) error {
	if err := b.fleet.WriteDynamic(dynamicConf(b.redis.Addr, l)); err != nil {
		return err
	}
	want := fmt.Sprintf(";q=%d;", l.average)
	deadline := time.Now().Add(20 * time.Second)
	for _, rt := range []string{"/tollgate", "/minimal"} {
		for {
			if time.Now().After(deadline) {
				return fmt.Errorf("configuration %+v not applied to %s", l, rt)
			}
			req, _ := http.NewRequest("GET", b.traefik.URL(rt), nil)
			req.Header.Set("X-API-Key", fmt.Sprintf("apply-probe-%d", time.Now().UnixNano()))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if strings.Contains(resp.Header.Get("RateLimit-Policy"), want) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)
	return nil
}
