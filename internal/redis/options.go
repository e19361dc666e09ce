package redis

// What a caller says of a deployment: where it is, how to reach it, the
// script the checks run, and the dial budget its timeout gives.

import (
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"time"
)

// Modes of a deployment (Options.Mode).
const (
	Standalone = iota // one server at Addr
	Sentinel          // the primary the sentinels at Endpoints name for MasterName
	Cluster           // the node that owns the key's slot, learnt from the seeds at Endpoints
)

// Options say where a deployment is and how to reach it. A Client copies
// them at New; a topology's node gets them with Addr set to its own.
type Options struct {
	Mode       int
	Addr       string   // Standalone: the server (host:port)
	Endpoints  []string // Sentinel: the sentinels; Cluster: the seed nodes
	MasterName string   // Sentinel

	SentinelUser, SentinelPass string // AUTH on the sentinels

	Username, Password string // AUTH (ACL with Username) on the servers
	DB                 int64  // SELECT (not in Cluster)

	// TLS, when not nil, wraps every connection; a config without
	// ServerName verifies each node by the host of its own address.
	TLS *tls.Config

	Timeout  time.Duration // a check's budget; dials get DialTimeout(Timeout)
	PoolSize int           // connections open or being dialled per node, at most

	// Script, when not nil, is loaded (SCRIPT LOAD) by every dial, so
	// that the first EVALSHA of a burst on a fresh connection finds it.
	Script *Script
}

// Script is a Lua script and the SHA1 that EVALSHA names it by.
type Script struct {
	Body string
	SHA  string
}

// NewScript returns body with its SHA1.
func NewScript(body string) *Script {
	sum := sha1.Sum([]byte(body))
	return &Script{Body: body, SHA: hex.EncodeToString(sum[:])}
}

// A dial (connect, TLS, AUTH, SELECT) does not run on a request's clock (see
// dialAsync); it has 100 times the check's timeout, within these bounds. A
// Redis that cannot complete one in that time is unavailable: the failure
// counts toward the breaker (onDialError).
const (
	minDialTimeout = 250 * time.Millisecond
	maxDialTimeout = 2 * time.Second
)

// DialTimeout returns the dial budget for a check timeout.
func DialTimeout(timeout time.Duration) time.Duration {
	d := 100 * timeout
	if d < minDialTimeout {
		return minDialTimeout
	}
	if d > maxDialTimeout {
		return maxDialTimeout
	}
	return d
}
