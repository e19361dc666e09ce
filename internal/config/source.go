package config

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Source is a compiled SourceCriterion: who a client is. A request is
// keyed by one header's value (Header), by several headers' values
// together (Headers, with Composite), or by its Host; at most one of the
// three is set. Without any, or when the request lacks a key header's
// value, it is keyed by its client IP under the IP strategy (Depth,
// Excluded, IPv6Subnet). The root's identity reads it on every request;
// it is not modified after CompileSource.
type Source struct {
	Header     string   // canonical header name; "" when not keyed by one header
	Headers    []string // canonical header names of a composite key (requestHeaderNames), 2 to MaxKeyHeaders; nil otherwise
	Composite  bool     // Headers is set: what identity tests (under Yaegi, one value fewer in its frame than Headers != nil)
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
	if c.RequestHost && (c.RequestHeaderName != "" || len(c.RequestHeaderNames) > 0 || c.IPStrategy != nil) {
		return s, errors.New("sourceCriterion: requestHost keys by the Host alone: set no requestHeaderName, requestHeaderNames or ipStrategy with it")
	}
	if len(c.RequestHeaderNames) > 0 {
		if c.RequestHeaderName != "" {
			return s, fmt.Errorf("sourceCriterion: requestHeaderName (%q) and requestHeaderNames are two keys: set one (a single header may be either)", c.RequestHeaderName)
		}
		names, err := compileHeaderNames(c.RequestHeaderNames)
		if err != nil {
			return s, err
		}
		if len(names) == 1 {
			s.Header = names[0] // a tuple of one header is its value: requestHeaderName's key
		} else {
			s.Headers, s.Composite = names, true
		}
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

// MaxKeyHeaders is the most headers a composite key
// (sourceCriterion.requestHeaderNames) may name.
const MaxKeyHeaders = 8

// compileHeaderNames returns the canonical names of requestHeaderNames,
// in their order, refusing an empty name, one that is not a header name
// (a control character, a space) and one named twice (canonically: x-user
// is X-User).
func compileHeaderNames(names []string) ([]string, error) {
	const field = "sourceCriterion.requestHeaderNames"
	if len(names) > MaxKeyHeaders {
		return nil, fmt.Errorf("%s: %d headers, at most %d are allowed", field, len(names), MaxKeyHeaders)
	}
	out := make([]string, 0, len(names))
	for i, n := range names {
		h := strings.TrimSpace(n)
		if h == "" {
			return nil, fmt.Errorf("%s[%d]: empty: name a header (labels: no empty item between commas)", field, i)
		}
		if !ValidHeaderName(h) {
			return nil, fmt.Errorf("%s[%d]: %q is not a header name", field, i, n)
		}
		h = http.CanonicalHeaderKey(h)
		for j, prev := range out {
			if prev == h {
				return nil, fmt.Errorf("%s[%d]: %q is also requestHeaderNames[%d] (%q): name each header once", field, i, n, j, names[j])
			}
		}
		out = append(out, h)
	}
	return out, nil
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
