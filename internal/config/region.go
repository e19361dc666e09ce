package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/regions"
)

// CompileRegion validates c (nil: no region) against this region's own
// Redis.
func CompileRegion(c *RegionConfig, own RedisSettings) (*regions.Settings, []RedisSettings, error) {
	if c == nil {
		return nil, nil, nil
	}
	if err := CheckName("region.name", strings.TrimSpace(c.Name)); err != nil {
		return nil, nil, err
	}
	name := strings.TrimSpace(c.Name)
	iv := c.Interval
	if strings.TrimSpace(iv) == "" {
		iv = DefaultInterval.String()
	}
	interval, err := positiveDuration("region.interval", iv)
	if err != nil {
		return nil, nil, err
	}
	if interval < minInterval || interval > maxInterval {
		return nil, nil, fmt.Errorf("region.interval: %q is not between %s and %s", c.Interval, minInterval, maxInterval)
	}
	if len(c.Peers) == 0 {
		return nil, nil, errors.New("region.peers: at least one other region is required")
	}
	if len(c.Peers) > regions.MaxPeers {
		return nil, nil, fmt.Errorf("region.peers: %d regions, at most %d", len(c.Peers), regions.MaxPeers)
	}
	weight, err := regionWeight("region.weight", c.Weight)
	if err != nil {
		return nil, nil, err
	}
	var peerNames []string
	var weights []int64
	var peers []RedisSettings
	names := []string{name}
	conns := map[string]string{own.ConnKey(): "this region's redis"}
	for i, pc := range c.Peers {
		field := fmt.Sprintf("region.peers[%d]", i)
		name := strings.TrimSpace(pc.Name)
		if err := CheckName(field+".name", name); err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			if n == name {
				return nil, nil, fmt.Errorf("%s.name: %q names two regions", field, name)
			}
		}
		w, err := regionWeight(field+".weight", pc.Weight)
		if err != nil {
			return nil, nil, err
		}
		to := pc.Timeout
		if strings.TrimSpace(to) == "" {
			to = defaultPeerTimeout
		}
		r, err := CompileRedis(&RedisConfig{Mode: pc.Mode, Endpoints: pc.Endpoints, MasterName: pc.MasterName,
			SentinelUsername: pc.SentinelUsername, SentinelPassword: pc.SentinelPassword, SentinelPasswordFile: pc.SentinelPasswordFile,
			Username: pc.Username, Password: pc.Password, PasswordFile: pc.PasswordFile, DB: pc.DB, TLS: pc.TLS, Timeout: to})
		if err != nil {
			return nil, nil, errors.New(strings.Replace(err.Error(), "redis.", field+".", 1))
		}
		if other, ok := conns[r.ConnKey()]; ok {
			return nil, nil, fmt.Errorf("%s: its Redis is %s too: each region needs its own", field, other)
		}
		conns[r.ConnKey()] = field
		r.PoolSize = 0 // the exchange's own connection only (redisClient.onSide)
		r.HeartbeatNS = 0
		r.Name = "region:" + name
		peers = append(peers, r)
		peerNames = append(peerNames, name)
		weights = append(weights, w)
		names = append(names, name)
	}
	keyParts := []string{name, strconv.FormatInt(int64(interval), 10), strconv.FormatInt(weight, 10), own.ConnKey()}
	for i, p := range peers {
		keyParts = append(keyParts, peerNames[i], strconv.FormatInt(weights[i], 10), p.ConnKey(), p.Timeout.String())
	}
	return regions.NewSettings(name, interval, weight, peerNames, weights, strings.Join(keyParts, "\x00")), peers, nil
}

// regionWeight validates a weight (0: the default, 1).
func regionWeight(field string, w int64) (int64, error) {
	if w < 0 || w > maxRegionWeight {
		return 0, fmt.Errorf("%s: %d is not between 1 and %d", field, w, maxRegionWeight)
	}
	if w == 0 {
		return 1, nil
	}
	return w, nil
}

// Bounds of the region configuration.
const (
	maxRegionWeight    = 1000
	DefaultInterval    = 5 * time.Second
	minInterval        = 100 * time.Millisecond
	maxInterval        = time.Hour
	defaultPeerTimeout = "1s"
)
