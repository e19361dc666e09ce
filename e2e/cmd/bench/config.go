package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

var routes = []string{"none", "inmem", "redis", "tollgate"}

var labels = map[string]string{
	"none":     "no middleware",
	"inmem":    "Traefik rateLimit (memory)",
	"redis":    "Traefik rateLimit (redis)",
	"tollgate": "Tollgate",
}

// limits is one pass's configuration of the three limiters.
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
}

// apply writes l and waits until Tollgate answers with it.
func (b *bench) apply(l limits) error {
	if err := b.fleet.WriteDynamic(dynamicConf(b.redis.Addr, l)); err != nil {
		return err
	}
	want := fmt.Sprintf(";q=%d;", l.average)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", b.traefik.URL("/tollgate"), nil)
		req.Header.Set("X-API-Key", "apply-probe")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if strings.Contains(resp.Header.Get("RateLimit-Policy"), want) {
				time.Sleep(500 * time.Millisecond)
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("configuration %+v not applied", l)
}
