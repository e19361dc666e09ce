package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// Per-key overrides (admin.go): what they cost a request whose key has
// none. Two routes of the harness's shape, Tollgate configured as
// /tollgate but each in a class of its own that the admin middleware of
// the same Traefik (/tgadmin) names, so that the class syncs: every
// request reads the clock, and the pod re-reads the class's hash of
// overrides every 300 ms while requests come. /ovr0's class has no
// override; /ovr10k's has -overrides of them (10,000), for API keys that
// are not the load's, loaded into the shared Redis before the runs.

// The override routes, and the admin endpoint's router (its middleware
// has its name, as the metrics endpoint's).
const (
	ovr0       = "ovr0"
	ovr10k     = "ovr10k"
	adminRoute = "tgadmin"
)

// overrideRoutes are the routes whose class the admin middleware names;
// each route's class is its name.
var overrideRoutes = []string{ovr0, ovr10k}

// defaultOverrides is -overrides' default: /ovr10k's overrides, as many
// as a class keeps by default (maxOverrides).
const defaultOverrides = 10000

// The overrides loaded: average and burst 1,000,000 a second, expiring a
// day after the bench starts; overrideBatch fields an HSET.
const (
	overrideRate   = 1000000
	overridePeriod = time.Second
	overrideTTL    = 24 * time.Hour
	overrideBatch  = 1000
)

// adminConf is the admin endpoint's middleware: it names the override
// routes' classes (they sync from then on).
func adminConf() map[string]interface{} {
	classes := make([]interface{}, len(overrideRoutes))
	for i, c := range overrideRoutes {
		classes[i] = c
	}
	return map[string]interface{}{"plugin": map[string]interface{}{"tollgate": map[string]interface{}{
		"serveAdmin": true, "adminClasses": classes,
	}}}
}

// overridesLabel is /ovr10k's label with n overrides.
func overridesLabel(n int) string {
	return fmt.Sprintf("Tollgate, its class synced, %s overrides (other keys)", thousands(n))
}

// setOverrides makes n the overrides of /ovr10k's class (-overrides).
func setOverrides(n int) { shapeLabels[ovr10k] = overridesLabel(n) }

// overridesKey is a class's hash of overrides and resets (admin.go's
// adminKey).
func overridesKey(class string) string { return "tg{hb:" + class + "}adm" }

// overrideKey is the i-th API key given an override: none is the load's
// (k0, k1, ...).
func overrideKey(i int) string { return "other-" + strconv.Itoa(i) }

// overrideField is the hash field of API key apiKey's override in class,
// for a middleware keyed by the X-API-Key header (source).
func overrideField(class, apiKey string) string {
	return "o:" + bucket.ClientKey(class, "h:"+apiKey)
}

// loadOverrides replaces class's hash on rd with n overrides, of API keys
// other-0 to other-(n-1), expiring at expiresMS (Unix ms), overrideBatch
// fields an HSET, checks that the hash holds n fields, then (n > 0)
// counts the overrides' version up in field v, as the admin endpoint
// does: pods read them again.
func loadOverrides(rd *e2e.Redis, class string, n int, expiresMS int64) error {
	key := overridesKey(class)
	if _, err := rd.Do("DEL", key); err != nil {
		return err
	}
	v := config.EncodeOverride(config.Override{Average: overrideRate, Burst: overrideRate, Period: overridePeriod, ExpiresMS: expiresMS})
	for i := 0; i < n; i += overrideBatch {
		args := []interface{}{key}
		for j := i; j < n && j < i+overrideBatch; j++ {
			args = append(args, overrideField(class, overrideKey(j)), v)
		}
		if _, err := rd.Do("HSET", args...); err != nil {
			return fmt.Errorf("HSET %s: %v", key, err)
		}
	}
	got, err := redis.Int(rd.Do("HLEN", key))
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%s holds %d fields, want %d", key, got, n)
	}
	if n == 0 {
		return nil
	}
	_, err = rd.Do("HINCRBY", key, "v", 1) // the overrides' version (a field more): pods read them again
	return err
}

// loadOverrides loads b.overrides overrides into /ovr10k's class on the
// shared Redis (b.redis), expiring overrideTTL from now.
func (b *bench) loadOverrides() error {
	if err := loadOverrides(b.redis, ovr10k, b.overrides, time.Now().Add(overrideTTL).UnixMilli()); err != nil {
		return err
	}
	fmt.Printf("overrides: %d in %s (class %s), on the shared Redis\n", b.overrides, overridesKey(ovr10k), ovr10k)
	return nil
}

// readyOverrides, before the harness's shape, loads the overrides again
// when the shared Redis lost them (the memory pass flushes it), and waits
// until Traefik honours them: an override's key through /ovr10k gets its
// override's policy.
func (b *bench) readyOverrides() error {
	if n, err := redis.Int(b.redis.Do("HEXISTS", overridesKey(ovr10k), overrideField(ovr10k, overrideKey(0)))); err != nil {
		return err
	} else if n != 1 && b.overrides > 0 {
		fmt.Printf("overrides: none in %s (the shared Redis was flushed): loading them again\n", overridesKey(ovr10k))
		if err := b.loadOverrides(); err != nil {
			return err
		}
	}
	if b.overrides == 0 {
		return nil
	}
	want := fmt.Sprintf(";q=%d;", overrideRate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", b.traefik.URL("/"+ovr10k), nil)
		req.Header.Set("X-API-Key", overrideKey(0))
		policy := ""
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			policy = resp.Header.Get("RateLimit-Policy")
			if strings.Contains(policy, want) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/%s: %s's override not honoured (RateLimit-Policy %q, want %s)", ovr10k, overrideKey(0), policy, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
