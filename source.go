package tollgate

// Client identity: who a request belongs to (Traefik's sourceCriterion), and
// the Redis key tag derived from it. Identities are hashed, so API keys never
// reach Redis and key length is bounded whatever the header's size.

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// sourceCriterion is a compiled SourceCriterion.
type sourceCriterion struct {
	header     string // canonical header name; "" when not keyed by header
	host       bool
	depth      int
	excluded   []*net.IPNet
	ipv6Subnet int
}

func compileSource(c *SourceCriterion) (sourceCriterion, error) {
	var s sourceCriterion
	if c == nil {
		return s, nil
	}
	n := 0
	if c.RequestHeaderName != "" {
		n++
		s.header = http.CanonicalHeaderKey(strings.TrimSpace(c.RequestHeaderName))
	}
	if c.RequestHost {
		n++
		s.host = true
	}
	if c.IPStrategy != nil {
		n++
	}
	if n > 1 {
		return s, errors.New("sourceCriterion: set only one of requestHeaderName, requestHost and ipStrategy")
	}
	if ip := c.IPStrategy; ip != nil {
		if ip.Depth < 0 {
			return s, fmt.Errorf("sourceCriterion.ipStrategy.depth: %d is negative", ip.Depth)
		}
		s.depth = int(ip.Depth)
		for i, e := range ip.ExcludedIPs {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if !strings.Contains(e, "/") {
				if parsed := net.ParseIP(e); parsed != nil {
					if parsed.To4() != nil {
						e += "/32"
					} else {
						e += "/128"
					}
				}
			}
			_, cidr, err := net.ParseCIDR(e)
			if err != nil {
				return s, fmt.Errorf("sourceCriterion.ipStrategy.excludedIPs[%d]: %q is not an IP or CIDR", i, e)
			}
			s.excluded = append(s.excluded, cidr)
		}
		if ip.IPv6Subnet < 0 || ip.IPv6Subnet > 128 {
			return s, fmt.Errorf("sourceCriterion.ipStrategy.ipv6Subnet: %d is not between 0 and 128", ip.IPv6Subnet)
		}
		s.ipv6Subnet = int(ip.IPv6Subnet)
	}
	return s, nil
}

// identity returns the request's client identity, typed by its kind so that
// a header value can never collide with an address.
func (s *sourceCriterion) identity(req *http.Request) string {
	if s.header != "" {
		if v := req.Header.Get(s.header); v != "" {
			return "h:" + v
		}
	} else if s.host {
		return "host:" + req.Host
	}
	return "ip:" + s.clientIP(req)
}

// clientIP applies the IP strategy. When the strategy finds nothing (depth
// beyond the X-Forwarded-For list, every address excluded) the connection's
// address is used, so a client can never empty its own key.
func (s *sourceCriterion) clientIP(req *http.Request) string {
	ip := ""
	if s.depth > 0 || len(s.excluded) > 0 {
		xff := strings.Split(strings.Join(req.Header.Values("X-Forwarded-For"), ","), ",")
		if s.depth > 0 {
			if s.depth <= len(xff) {
				ip = strings.TrimSpace(xff[len(xff)-s.depth])
			}
		} else {
			for i := len(xff) - 1; i >= 0; i-- {
				c := strings.TrimSpace(xff[i])
				if c != "" && !s.isExcluded(c) {
					ip = c
					break
				}
			}
		}
	}
	if ip == "" {
		ip = req.RemoteAddr
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
	}
	if s.ipv6Subnet > 0 {
		if parsed := net.ParseIP(ip); parsed != nil && parsed.To4() == nil {
			ip = parsed.Mask(net.CIDRMask(s.ipv6Subnet, 128)).String()
		}
	}
	return ip
}

func (s *sourceCriterion) isExcluded(addr string) bool {
	ip := net.ParseIP(addr)
	if ip == nil {
		return false
	}
	for _, n := range s.excluded {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// keyPrefix starts every Tollgate key (an ACL can be scoped to tg{*).
const keyPrefix = "tg{"

// clientKey returns the Redis key of a client's top-level bucket in a class:
// tg{tag}, where tag is the first 60 bits of SHA-256 over class and
// identity, as 10 characters of URL-safe base64. Rule buckets append
// ":name"; the shared {tag} puts all of one request's keys in one Redis
// Cluster slot.
//
// The key is kept at 14 bytes, the most Redis stores in a 16-byte
// allocation: a bucket then takes 56 bytes (MEMORY USAGE) instead of 72.
// 60 bits make two of 1,000,000 active clients of a class share a bucket
// with probability 4e-7.
func clientKey(class, identity string) string {
	return hashKey(class + "\x00" + identity)
}

// hashKey is clientKey of class and identity joined by a NUL.
func hashKey(classAndIdentity string) string {
	sum := sha256.Sum256([]byte(classAndIdentity))
	return keyPrefix + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
}

// shardKey returns the key of one of the client's sub-buckets, picked at
// random: the shard number, fixed width, inside the hash tag, so that
// shards spread over Redis Cluster slots (tg{tag:07}).
func (s *settings) shardKey(key string) string {
	n := strconv.Itoa(rand.Intn(int(s.shards)))
	for len(n) < s.digits {
		n = "0" + n
	}
	return key[:len(key)-1] + ":" + n + "}"
}
