package tollgate

// Client identity: who a request belongs to (Traefik's sourceCriterion), and
// the Redis key tag derived from it. Identities are hashed, so API keys never
// reach Redis and key length is bounded whatever the header's size.

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Source is a compiled SourceCriterion.
type Source struct {
	Header     string // canonical header name; "" when not keyed by header
	Host       bool
	Depth      int
	Excluded   []*net.IPNet
	Ipv6Subnet int
}

// defaultIPv6Subnet groups IPv6 clients by /64 unless ipv6Subnet says
// otherwise: one subscriber or host gets a /64 and can rotate its
// addresses within it at will, so keying each address alone (Traefik's
// default) lets one client multiply its limit by 2^64.
const defaultIPv6Subnet = 64

func compileSource(c *SourceCriterion) (Source, error) {
	s := Source{Ipv6Subnet: defaultIPv6Subnet}
	if c == nil {
		return s, nil
	}
	if c.RequestHeaderName != "" {
		s.Header = http.CanonicalHeaderKey(strings.TrimSpace(c.RequestHeaderName))
	}
	if c.RequestHost {
		s.Host = true
	}
	if c.RequestHost && (c.RequestHeaderName != "" || c.IPStrategy != nil) {
		return s, errors.New("sourceCriterion: requestHost keys by the Host alone: set no requestHeaderName or ipStrategy with it")
	}
	if ip := c.IPStrategy; ip != nil {
		if ip.Depth < 0 {
			return s, fmt.Errorf("sourceCriterion.ipStrategy.depth: %d is negative", ip.Depth)
		}
		s.Depth = int(ip.Depth)
		var err error
		if s.Excluded, err = parseCIDRs("sourceCriterion.ipStrategy.excludedIPs", ip.ExcludedIPs); err != nil {
			return s, err
		}
		if ip.IPv6Subnet < 0 || ip.IPv6Subnet > 128 {
			return s, fmt.Errorf("sourceCriterion.ipStrategy.ipv6Subnet: %d is not between 0 and 128", ip.IPv6Subnet)
		}
		if ip.IPv6Subnet != 0 {
			s.Ipv6Subnet = int(ip.IPv6Subnet)
		}
	}
	return s, nil
}

// parseCIDRs parses a list of IPs and CIDRs (field names it in errors); an
// IP alone is its /32 or /128.
func parseCIDRs(field string, list []string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for i, e := range list {
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
			return nil, fmt.Errorf("%s[%d]: %q is not an IP or CIDR", field, i, e)
		}
		out = append(out, cidr)
	}
	return out, nil
}

// identity returns the request's client identity, typed by its kind so that
// a header value can never collide with an address. Of several lines of
// the key header the first is keyed: what Header.Get, most backends and
// Traefik's own rateLimit read, so lines added after it change nothing (a
// join of all lines would be a fresh identity per junk line while the
// backend still authenticates the first). A request without the header,
// or whose first line is empty, is keyed by its client IP under the IP
// strategy.
func (s *Source) identity(req *http.Request) string {
	if s.Header != "" {
		if v := req.Header[s.Header]; len(v) > 0 && v[0] != "" {
			return "h:" + v[0]
		}
	} else if s.Host {
		return "host:" + req.Host
	}
	return "ip:" + s.clientIP(req)
}

// clientIP applies the IP strategy and returns the address in canonical
// form (an IPv4-mapped IPv6 address as IPv4), an IPv6 address reduced to
// its ipv6Subnet prefix. An X-Forwarded-For entry that is not an IP is
// skipped like an excluded one (with depth, it is as if the list were too
// short). When the strategy finds nothing (depth beyond the list, every
// address excluded) the connection's address is used, so a client can
// never empty its own key.
func (s *Source) clientIP(req *http.Request) string {
	ip, addr := s.clientAddr(req)
	if ip == nil {
		return addr // not an IP (a Unix socket): as it is
	}
	if ip.To4() == nil && s.Ipv6Subnet < 128 {
		ip = ip.Mask(net.CIDRMask(s.Ipv6Subnet, 128))
	}
	return ip.String()
}

// clientAddr is the client IP by the strategy (see clientIP), whole, and
// "" when the strategy found it; else the connection's address, with its
// IP (nil when it is none).
func (s *Source) clientAddr(req *http.Request) (net.IP, string) {
	var ip net.IP
	if s.Depth > 0 || len(s.Excluded) > 0 {
		xff := strings.Split(strings.Join(req.Header.Values("X-Forwarded-For"), ","), ",")
		if s.Depth > 0 {
			if s.Depth <= len(xff) {
				ip = forwardedIP(xff[len(xff)-s.Depth])
			}
		} else {
			for i := len(xff) - 1; i >= 0; i-- {
				if c := forwardedIP(xff[i]); c != nil && !s.isExcluded(c) {
					ip = c
					break
				}
			}
		}
	}
	if ip == nil {
		addr := req.RemoteAddr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		return net.ParseIP(addr), addr
	}
	return ip, ""
}

// forwardedIP parses an X-Forwarded-For entry: an IP, an IP with a port
// (1.2.3.4:5678, [2001:db8::1]:443, as some proxies write them) or a
// bracketed IPv6; nil for anything else.
func forwardedIP(e string) net.IP {
	e = strings.TrimSpace(e)
	if ip := net.ParseIP(e); ip != nil {
		return ip
	}
	if host, _, err := net.SplitHostPort(e); err == nil {
		return net.ParseIP(host)
	}
	if strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]") {
		return net.ParseIP(e[1 : len(e)-1])
	}
	return nil
}

// exempt reports whether req's client IP (by the strategy) is in one of
// ranges. When a strategy reads an X-Forwarded-For and finds no address
// there, the connection's (a proxy's) is not the client's: not exempt.
func (s *Source) exempt(req *http.Request, ranges []*net.IPNet) bool {
	ip, addr := s.clientAddr(req)
	if ip == nil || addr != "" && (s.Depth > 0 || len(s.Excluded) > 0) && len(req.Header["X-Forwarded-For"]) > 0 {
		return false
	}
	for _, n := range ranges {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

func (s *Source) isExcluded(ip net.IP) bool {
	for _, n := range s.Excluded {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// keyPrefix starts every Tollgate key (an ACL can be scoped to tg{*).
const keyPrefix = "tg{"

// clientKeyLen is the length of clientKey's keys (unsharded).
const clientKeyLen = len(keyPrefix) + 10 + 1

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
