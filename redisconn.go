package tollgate

// The plugin's binding to its Redis client (internal/redis): a backend's
// deployment made from the compiled settings, its hooks wired to the
// backend's breaker and logs, and the bucket script's prepared call.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// The scripts as the client loads and names them.
var (
	bucket      = redis.NewScript(bucketScript)
	leaseBucket = redis.NewScript(leaseScript)
	giveBack    = redis.NewScript(giveBackScript)
)

// connect makes b's deployment for set (TLS files read now) and starts
// it: the first connection (standalone) or the topology (Sentinel,
// Cluster) sought off the caller's clock. A failed dial counts against b's
// breaker (dialFailed), a topology change lets its next probe through, a
// failed refresh is logged as a failure.
func connect(b *backend, set RedisSettings) error {
	opts := redis.Options{
		Mode: set.Mode, Addr: set.Addr, Endpoints: set.Endpoints, MasterName: set.MasterName,
		SentinelUser: set.SentinelUser, SentinelPass: set.SentinelPass,
		Username: set.Username, Password: set.Password, DB: set.Db,
		Timeout: set.Timeout, PoolSize: set.PoolSize, Script: bucket,
	}
	if set.UseTLS {
		conf, err := tlsConfig(set)
		if err != nil {
			return err
		}
		if set.Mode != redis.Standalone {
			conf.ServerName = "" // each node is verified by its own address
		}
		opts.TLS = conf
	}
	b.rc = redis.New(opts, redis.Hooks{
		DialFailed:    func(err error) { b.dialFailed(err) },
		Changed:       func() { b.breaker.probeSoon() },
		RefreshFailed: func(err error) { b.logFailure(b.now(), err, &b.base) },
	})
	b.pool = b.rc.Pool()
	b.rc.Start()
	return nil
}

// cmdParts is the shape of a script call over policies: each key's
// length (keyLen; clientKeyLen for a rule keyed its own way, never
// sharded) and suffix, and the interval, burst and cost of every bucket
// (a quota's: -limit, its windows, cost; quota.go) (then, with regions,
// each bucket's static share).
type cmdParts struct {
	lens     []int
	suffixes []string
	args     []string
}

// commandParts returns the call's shape over ps for client keys of keyLen.
func commandParts(ps []*Policy, keyLen int) cmdParts {
	var c cmdParts
	for _, p := range ps {
		n := keyLen
		if p.Source != nil {
			n = clientKeyLen
		}
		if p.Cap != nil { // key#member (heldCall), the cap, maxDuration
			if p.Cap.Class != "" {
				n = len(p.Cap.Class)
			}
			c.lens = append(c.lens, n+1+memberLen)
			c.suffixes = append(c.suffixes, p.KeySuffix)
			c.args = append(c.args, "0", strconv.FormatInt(p.Cap.Max, 10), strconv.FormatInt(p.Cap.DurUS, 10))
			continue
		}
		c.lens = append(c.lens, n)
		c.suffixes = append(c.suffixes, p.KeySuffix)
		if p.Quota != nil { // -limit, the windows (quotaViewAt), cost
			c.args = append(c.args, strconv.FormatInt(-p.Quota.Limit, 10), "", strconv.FormatFloat(p.Lim.Cost, 'g', -1, 64))
			continue
		}
		c.args = append(c.args, strconv.FormatFloat(p.Shard.Interval, 'g', -1, 64),
			strconv.FormatFloat(p.Shard.Burst, 'g', -1, 64), strconv.FormatFloat(p.Shard.Cost, 'g', -1, 64))
	}
	if ps[0].RegionPPM != 0 {
		for _, p := range ps {
			c.args = append(c.args, strconv.FormatInt(p.RegionPPM, 10))
		}
	}
	return c
}

// newCommand prepares the bucket script's call for policies ps, whose
// keys are a client key of keyLen bytes plus each policy's keySuffix.
func newCommand(ps []*Policy, keyLen int) *redis.Command {
	c := commandParts(ps, keyLen)
	return redis.NewCommand(bucket, c.lens, c.suffixes, c.args, checkDecision)
}

// leaseCommand prepares the lease script's call of shape c (lease.go):
// this pod's lease field, max requests per lease, its ttl in µs, the pods
// counted, and whether it asks for a lease (its reply then ends with the
// requests granted and the lease's end).
func leaseCommand(c cmdParts, field string, max, ttlUS, pods int64, ask bool) *redis.Command {
	flag := "0"
	if ask {
		flag = "1"
	}
	args := append(append([]string(nil), c.args...), field, strconv.FormatInt(max, 10), strconv.FormatInt(ttlUS, 10), strconv.FormatInt(pods, 10), flag)
	verify := checkDecision
	if ask {
		verify = func(d []int64) error { return checkDecision(d[:len(d)-2]) } // the grant's numbers are not a bucket's
	}
	return redis.NewCommand(leaseBucket, c.lens, c.suffixes, args, verify)
}

// tlsConfig builds the TLS configuration of set: the server verified by
// set.addr's host against tls.ca, or the system's roots when ca is empty,
// and the client certificate when cert and key are set.
func tlsConfig(set RedisSettings) (*tls.Config, error) {
	conf := &tls.Config{InsecureSkipVerify: set.Tls.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if host, _, err := net.SplitHostPort(set.Addr); err == nil {
		conf.ServerName = host
	}
	if set.Tls.CA != "" {
		pem, err := readConfigFile("redis.tls.ca", set.Tls.CA, maxPEMFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.ca: %q holds no PEM certificate", set.Tls.CA)
		}
		conf.RootCAs = pool
	}
	if set.Tls.Cert != "" {
		cert, err := readConfigFile("redis.tls.cert", set.Tls.Cert, maxPEMFile)
		if err != nil {
			return nil, err
		}
		key, err := readConfigFile("redis.tls.key", set.Tls.Key, maxPEMFile)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert/key: loading %q and %q: %w", set.Tls.Cert, set.Tls.Key, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}
