package tollgate

// The plugin's binding to its Redis client (internal/redis): a backend's
// deployment made from the compiled settings, its hooks wired to the
// backend's breaker and logs, and the bucket script's prepared call.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// connect makes b's deployment for set (TLS files read now) and starts
// it: the first connection (standalone) or the topology (Sentinel,
// Cluster) sought off the caller's clock. A failed dial counts against b's
// breaker (dialFailed), a topology change lets its next probe through, a
// failed refresh is logged as a failure.
func connect(b *backend, set config.RedisSettings) error {
	opts := redis.Options{
		Mode: set.Mode, Addr: set.Addr, Endpoints: set.Endpoints, MasterName: set.MasterName,
		SentinelUser: set.SentinelUser, SentinelPass: set.SentinelPass,
		Username: set.Username, Password: set.Password, DB: set.Db,
		Timeout: set.Timeout, PoolSize: set.PoolSize, Script: bucketScr,
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

// tlsConfig builds the TLS configuration of set: the server verified by
// set.addr's host against tls.ca, or the system's roots when ca is empty,
// and the client certificate when cert and key are set.
func tlsConfig(set config.RedisSettings) (*tls.Config, error) {
	conf := &tls.Config{InsecureSkipVerify: set.Tls.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if host, _, err := net.SplitHostPort(set.Addr); err == nil {
		conf.ServerName = host
	}
	if set.Tls.CA != "" {
		pem, err := config.ReadConfigFile("redis.tls.ca", set.Tls.CA, config.MaxPEMFile)
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
		cert, err := config.ReadConfigFile("redis.tls.cert", set.Tls.Cert, config.MaxPEMFile)
		if err != nil {
			return nil, err
		}
		key, err := config.ReadConfigFile("redis.tls.key", set.Tls.Key, config.MaxPEMFile)
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
