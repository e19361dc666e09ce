package config

// The Redis settings compiled from RedisConfig: where the shared store is,
// how to reach it, and what identifies a connection in the registry.

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// RedisSettings is a validated RedisConfig.
type RedisSettings struct {
	Name             string   // the redis label of the metrics (RedisConfig.Name)
	Mode             int      // redis.Standalone, redis.Sentinel, redis.Cluster
	Endpoints        []string // sentinels or seed nodes
	MasterName       string
	SentinelUser     string
	SentinelPass     string
	Addr             string // standalone: the server; a node's client: the node
	Username         string
	Password         string
	Db               int64
	Tls              TLSConfig
	UseTLS           bool
	Timeout          time.Duration
	PoolSize         int
	Pipeline         int // ignored (RedisConfig.Pipeline)
	BreakerThreshold int64
	ProbeInterval    time.Duration
	ProbeNS          int64 // probeInterval in ns, for the breaker
	HeartbeatNS      int64 // heartbeat interval in ns; 0: off
}

// ConnKey identifies a Redis connection in the registry: what changes the
// connection, not how a check uses it (timeout, pool size, breaker
// settings), so reloads that change limits or timeouts share one pool.
func (r RedisSettings) ConnKey() string {
	return fmt.Sprintf("%d|%s|%s|%s|%s|%s|%s|%s|%d|%t|%s|%s|%s|%t", r.Mode, strings.Join(r.Endpoints, ","), r.MasterName,
		r.SentinelUser, r.SentinelPass, r.Addr, r.Username, r.Password, r.Db,
		r.UseTLS, r.Tls.CA, r.Tls.Cert, r.Tls.Key, r.Tls.InsecureSkipVerify)
}

func CompileRedis(c *RedisConfig) (RedisSettings, error) {
	r := RedisSettings{Username: c.Username, Password: c.Password, Db: c.DB, Tls: c.TLS}
	var eps []string
	for _, e := range c.Endpoints {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return r, errors.New("redis.endpoints: at least one host:port is required")
	}
	for i, e := range eps {
		if _, port, err := net.SplitHostPort(e); err != nil || port == "" || !printable(e) {
			return r, fmt.Errorf("redis.endpoints[%d]: %q is not host:port", i, e)
		}
	}
	r.Addr = eps[0]
	r.Endpoints = eps
	r.Name = strings.Join(eps, ",")
	switch strings.ToLower(strings.TrimSpace(c.Mode)) {
	case "", "standalone":
		r.Mode = redis.Standalone
	case "sentinel":
		r.Mode = redis.Sentinel
		if r.MasterName = strings.TrimSpace(c.MasterName); r.MasterName == "" {
			return r, errors.New("redis.masterName: required in sentinel mode")
		}
		r.Name = r.MasterName
		r.SentinelUser, r.SentinelPass = c.SentinelUsername, c.SentinelPassword
	case "cluster":
		r.Mode = redis.Cluster
		if c.DB != 0 {
			return r, fmt.Errorf("redis.db: %d, but Redis Cluster has only database 0", c.DB)
		}
	default:
		return r, fmt.Errorf("redis.mode: %q is not standalone, sentinel or cluster", c.Mode)
	}
	if n := strings.TrimSpace(c.Name); n != "" {
		if err := CheckName("redis.name", n); err != nil {
			return r, err
		}
		r.Name = n
	}
	if c.SentinelPassword != "" && c.SentinelPasswordFile != "" {
		return r, errors.New("redis.sentinelPassword and redis.sentinelPasswordFile are both set: use one")
	}
	if c.SentinelPasswordFile != "" {
		if r.Mode != redis.Sentinel {
			return r, errors.New("redis.sentinelPasswordFile: set, but redis.mode is not sentinel")
		}
		pass, err := readPasswordFile("redis.sentinelPasswordFile", c.SentinelPasswordFile)
		if err != nil {
			return r, err
		}
		r.SentinelPass = pass
	}
	if c.Password != "" && c.PasswordFile != "" {
		return r, errors.New("redis.password and redis.passwordFile are both set: use one")
	}
	if c.PasswordFile != "" {
		pass, err := readPasswordFile("redis.passwordFile", c.PasswordFile)
		if err != nil {
			return r, err
		}
		r.Password = pass
	}
	if c.DB < 0 {
		return r, fmt.Errorf("redis.db: %d is negative", c.DB)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return r, errors.New("redis.tls: cert and key must be set together")
	}
	r.UseTLS = c.TLS.Enabled || c.TLS.CA != "" || c.TLS.Cert != "" || c.TLS.InsecureSkipVerify
	var err error
	to := c.Timeout
	if strings.TrimSpace(to) == "" {
		to = defaultTimeout
	}
	if r.Timeout, err = positiveDuration("redis.timeout", to); err != nil {
		return r, err
	}
	pi := c.ProbeInterval
	if strings.TrimSpace(pi) == "" {
		pi = defaultProbeInterval
	}
	if r.ProbeInterval, err = positiveDuration("redis.probeInterval", pi); err != nil {
		return r, err
	}
	hb := c.Heartbeat
	if strings.TrimSpace(hb) == "" {
		hb = defaultHeartbeat
	}
	beat, err := ParseDuration("redis.heartbeat", hb)
	if err != nil {
		return r, err
	}
	if beat != 0 && beat < 100*time.Millisecond {
		return r, fmt.Errorf("redis.heartbeat: %q is shorter than 100ms (0 turns it off)", c.Heartbeat)
	}
	r.HeartbeatNS = int64(beat)
	if err := nonNegative("redis.poolSize", c.PoolSize); err != nil {
		return r, err
	}
	if err := nonNegative("redis.breakerThreshold", c.BreakerThreshold); err != nil {
		return r, err
	}
	if err := nonNegative("redis.pipeline", c.Pipeline); err != nil {
		return r, err
	}
	if c.Pipeline > 64 {
		return r, fmt.Errorf("redis.pipeline: %d lanes, at most 64", c.Pipeline)
	}
	r.Pipeline = int(c.Pipeline)
	r.PoolSize = int(orDefault(c.PoolSize, defaultPoolSize))
	r.BreakerThreshold = orDefault(c.BreakerThreshold, defaultBreakerThreshold)
	r.ProbeNS = int64(r.ProbeInterval)
	return r, nil
}
