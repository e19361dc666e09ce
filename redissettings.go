package tollgate

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

// redisSettings is a validated RedisConfig.
type redisSettings struct {
	name             string   // the redis label of the metrics (RedisConfig.Name)
	mode             int      // redis.Standalone, redis.Sentinel, redis.Cluster
	endpoints        []string // sentinels or seed nodes
	masterName       string
	sentinelUser     string
	sentinelPass     string
	addr             string // standalone: the server; a node's client: the node
	username         string
	password         string
	db               int64
	tls              TLSConfig
	useTLS           bool
	timeout          time.Duration
	poolSize         int
	pipeline         int // ignored (RedisConfig.Pipeline)
	breakerThreshold int64
	probeInterval    time.Duration
	probeNS          int64 // probeInterval in ns, for the breaker
	heartbeatNS      int64 // heartbeat interval in ns; 0: off
}

// connKey identifies a Redis connection in the registry: what changes the
// connection, not how a check uses it (timeout, pool size, breaker
// settings), so reloads that change limits or timeouts share one pool.
func (r redisSettings) connKey() string {
	return fmt.Sprintf("%d|%s|%s|%s|%s|%s|%s|%s|%d|%t|%s|%s|%s|%t", r.mode, strings.Join(r.endpoints, ","), r.masterName,
		r.sentinelUser, r.sentinelPass, r.addr, r.username, r.password, r.db,
		r.useTLS, r.tls.CA, r.tls.Cert, r.tls.Key, r.tls.InsecureSkipVerify)
}

func compileRedis(c *RedisConfig) (redisSettings, error) {
	r := redisSettings{username: c.Username, password: c.Password, db: c.DB, tls: c.TLS}
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
	r.addr = eps[0]
	r.endpoints = eps
	r.name = strings.Join(eps, ",")
	switch strings.ToLower(strings.TrimSpace(c.Mode)) {
	case "", "standalone":
		r.mode = redis.Standalone
	case "sentinel":
		r.mode = redis.Sentinel
		if r.masterName = strings.TrimSpace(c.MasterName); r.masterName == "" {
			return r, errors.New("redis.masterName: required in sentinel mode")
		}
		r.name = r.masterName
		r.sentinelUser, r.sentinelPass = c.SentinelUsername, c.SentinelPassword
	case "cluster":
		r.mode = redis.Cluster
		if c.DB != 0 {
			return r, fmt.Errorf("redis.db: %d, but Redis Cluster has only database 0", c.DB)
		}
	default:
		return r, fmt.Errorf("redis.mode: %q is not standalone, sentinel or cluster", c.Mode)
	}
	if n := strings.TrimSpace(c.Name); n != "" {
		if err := checkName("redis.name", n); err != nil {
			return r, err
		}
		r.name = n
	}
	if c.SentinelPassword != "" && c.SentinelPasswordFile != "" {
		return r, errors.New("redis.sentinelPassword and redis.sentinelPasswordFile are both set: use one")
	}
	if c.SentinelPasswordFile != "" {
		if r.mode != redis.Sentinel {
			return r, errors.New("redis.sentinelPasswordFile: set, but redis.mode is not sentinel")
		}
		pass, err := readPasswordFile("redis.sentinelPasswordFile", c.SentinelPasswordFile)
		if err != nil {
			return r, err
		}
		r.sentinelPass = pass
	}
	if c.Password != "" && c.PasswordFile != "" {
		return r, errors.New("redis.password and redis.passwordFile are both set: use one")
	}
	if c.PasswordFile != "" {
		pass, err := readPasswordFile("redis.passwordFile", c.PasswordFile)
		if err != nil {
			return r, err
		}
		r.password = pass
	}
	if c.DB < 0 {
		return r, fmt.Errorf("redis.db: %d is negative", c.DB)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return r, errors.New("redis.tls: cert and key must be set together")
	}
	r.useTLS = c.TLS.Enabled || c.TLS.CA != "" || c.TLS.Cert != "" || c.TLS.InsecureSkipVerify
	var err error
	to := c.Timeout
	if strings.TrimSpace(to) == "" {
		to = defaultTimeout
	}
	if r.timeout, err = positiveDuration("redis.timeout", to); err != nil {
		return r, err
	}
	pi := c.ProbeInterval
	if strings.TrimSpace(pi) == "" {
		pi = defaultProbeInterval
	}
	if r.probeInterval, err = positiveDuration("redis.probeInterval", pi); err != nil {
		return r, err
	}
	hb := c.Heartbeat
	if strings.TrimSpace(hb) == "" {
		hb = defaultHeartbeat
	}
	beat, err := parseDuration("redis.heartbeat", hb)
	if err != nil {
		return r, err
	}
	if beat != 0 && beat < 100*time.Millisecond {
		return r, fmt.Errorf("redis.heartbeat: %q is shorter than 100ms (0 turns it off)", c.Heartbeat)
	}
	r.heartbeatNS = int64(beat)
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
	r.pipeline = int(c.Pipeline)
	r.poolSize = int(orDefault(c.PoolSize, defaultPoolSize))
	r.breakerThreshold = orDefault(c.BreakerThreshold, defaultBreakerThreshold)
	r.probeNS = int64(r.probeInterval)
	return r, nil
}
