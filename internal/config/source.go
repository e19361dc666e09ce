package config

import (
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
	IPv6Subnet int
}

// defaultIPv6Subnet groups IPv6 clients by /64 unless ipv6Subnet says
// otherwise: one subscriber or host gets a /64 and can rotate its
// addresses within it at will, so keying each address alone (Traefik's
// default) lets one client multiply its limit by 2^64.
const defaultIPv6Subnet = 64

func CompileSource(c *SourceCriterion) (Source, error) {
	s := Source{IPv6Subnet: defaultIPv6Subnet}
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
			s.IPv6Subnet = int(ip.IPv6Subnet)
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
