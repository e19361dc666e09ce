package config

// Leases (Config.Lease), compiled: the root's lease.go says what a lease is.

import (
	"fmt"
	"strings"
	"time"
)

// The bounds of Config.Lease.
const (
	defaultLeaseTTL = time.Second
	maxLeaseTTL     = 10 * time.Second
	minLeaseTTL     = 10 * time.Millisecond
	maxLeaseMax     = 1000000
)

// LeaseShape is a policy's Config.Lease, compiled.
type LeaseShape struct {
	Max int64 // requests per lease; 0: none
	TTL int64 // ns
}

// CompileLease validates a Config.Lease (field names it in errors).
func CompileLease(field string, l Lease) (LeaseShape, error) {
	if l.Max < 0 {
		return LeaseShape{}, fmt.Errorf("%s.max: %d is negative", field, l.Max)
	}
	if l.Max > maxLeaseMax {
		return LeaseShape{}, fmt.Errorf("%s.max: %d is more than %d", field, l.Max, maxLeaseMax)
	}
	ttl := defaultLeaseTTL
	if strings.TrimSpace(l.TTL) != "" {
		d, err := positiveDuration(field+".ttl", l.TTL)
		if err != nil {
			return LeaseShape{}, err
		}
		if d > maxLeaseTTL {
			return LeaseShape{}, fmt.Errorf("%s.ttl: %q is longer than %s", field, l.TTL, maxLeaseTTL)
		}
		if d < minLeaseTTL {
			return LeaseShape{}, fmt.Errorf("%s.ttl: %q is shorter than %s (a lease ending before it is used only holds tokens out)", field, l.TTL, minLeaseTTL)
		}
		ttl = d
	}
	return LeaseShape{Max: l.Max, TTL: int64(ttl)}, nil
}
