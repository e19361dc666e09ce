package main

import (
	"fmt"
	"strconv"
	"time"
)

// memoryPerKey fills route with n distinct keys on an empty Redis and
// returns used_memory delta per key, the mean MEMORY USAGE of sampled keys,
// and the number of keys (route's Redis: see redisOf).
func (b *bench) memoryPerKey(route string, n int, rep int) (perKey, usage float64, keys int64, err error) {
	rd := b.redisOf(route)
	if _, err = rd.Do("FLUSHALL"); err != nil {
		return
	}
	time.Sleep(200 * time.Millisecond)
	m0, err := rd.Info("memory")
	if err != nil {
		return
	}
	if errs := fill(b.traefik.URL("/"+route), n, 32, fmt.Sprintf("mem%d-", rep)); errs > 0 {
		err = fmt.Errorf("%d requests failed", errs)
		return
	}
	m1, err := rd.Info("memory")
	if err != nil {
		return
	}
	v, err := rd.Do("DBSIZE")
	if err != nil {
		return
	}
	keys = v.(int64)
	u0, _ := strconv.ParseFloat(m0["used_memory"], 64)
	u1, _ := strconv.ParseFloat(m1["used_memory"], 64)
	if keys > 0 {
		perKey = (u1 - u0) / float64(keys)
	}
	var sum float64
	var sampled int
	for i := 0; i < 200; i++ {
		k, err := rd.Do("RANDOMKEY")
		if err != nil || k == nil {
			break
		}
		u, err := rd.Do("MEMORY", "USAGE", k, "SAMPLES", "0")
		if n, ok := u.(int64); err == nil && ok {
			sum += float64(n)
			sampled++
		}
	}
	if sampled > 0 {
		usage = sum / float64(sampled)
	}
	return perKey, usage, keys, nil
}
