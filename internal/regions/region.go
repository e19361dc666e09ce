// Package regions moves the shares of a limit between regions: a fleet in
// several regions, each with its own Redis, holds a share of every limit,
// moved every interval towards where the clients' traffic is. The model
// (the exchange that moves shares: exchange.go):
//
//   - Each region charges its own buckets at its share s of a limit: rate
//     times s and burst times s, in the same script and round trip as
//     without regions. A bucket's stored state (its TAT) needs no change
//     when s moves: the time a bucket takes to fill, burst/rate, does not
//     depend on s, so a bucket keeps its fill fraction and its tokens scale
//     with s (a share that shrinks takes its tokens at once).
//   - A key no region tracks is charged at the region's static share
//     (weight over the weights' sum). A key that presses against its share
//     (refused, or near the limit) is tracked: its share lives beside its
//     bucket, in the hash <bucket>}s (s: share in parts per million; n:
//     tokens asked since the exchange last read it, counted by the
//     script), and moves with its demand.
//   - A share's target (shares.go) is what the region's demand needs of
//     the limit, at least its floor (a tenth of the static share, so a
//     client that moves region is served while shares follow) and at
//     most its static share, plus a part of what the regions' needs leave.
//     A share shrinks to its target at once (never below what its own
//     demand needs, whatever a peer claims), and grows only into what the
//     other regions claim: at most 1 minus the sum of their published
//     shares (or their needs, when larger), so the shares of a key add up
//     to at most 1 in steady state. A region publishes a share that grows
//     before applying it, and applies one that shrinks before publishing
//     it.
//   - Losing a peer (its report stale, or it no longer acknowledges ours):
//     shares stop growing; after hold (3 intervals of silence) a share above
//     static falls to static; after 6, every share is static. The peer,
//     losing us at the same time, does the same, so the shares' sum stays
//     at most 1 (see silentSteps).
package regions

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Bounds of what one exchange carries.
const (
	MaxPeers        = 8         // peers of a region
	maxTracked      = 2000      // keys one region tracks, and one report carries
	maxReportBytes  = 256 << 10 // a report, read or written
	maxBucketKeyLen = 200
	ppm             = 1000000
)

// Settings are one region's configuration (NewSettings). Read only once
// made.
type Settings struct {
	Name     string
	Interval time.Duration
	Static   int64 // this region's static share, ppm
	Floor    int64 // its floor, ppm: a tenth of static
	Peers    []Peer
	Order    int    // this region's rank among all regions by name
	Regions  int    // how many regions there are
	Key      string // what identifies the exchange (the caller's registry)
}

// Peer is another region.
type Peer struct {
	Name   string
	Static int64 // ppm
	Floor  int64 // ppm
}

// NewSettings returns the settings of region name, exchanging every
// interval, of weight among its peers' (peers and weights, in the same
// order): each region's static share is its weight over the weights' sum,
// its floor a tenth of that. key identifies the configuration: what
// changes the exchange.
func NewSettings(name string, interval time.Duration, weight int64, peers []string, weights []int64, key string) *Settings {
	rs := &Settings{Name: name, Interval: interval, Regions: len(peers) + 1, Key: key}
	sum := weight
	for _, w := range weights {
		sum += w
	}
	rs.Static = weight * ppm / sum
	rs.Floor = rs.Static / 10
	for i, p := range peers {
		static := weights[i] * ppm / sum
		rs.Peers = append(rs.Peers, Peer{Name: p, Static: static, Floor: static / 10})
	}
	sorted := append([]string{name}, peers...)
	sort.Strings(sorted)
	for i, n := range sorted {
		if n == name {
			rs.Order = i
		}
	}
	return rs
}

// The exchange's schedule, in intervals of silence from a peer (its report
// unchanged, or no longer acknowledging ours): up to healthySteps the peer
// counts as heard; up to holdSteps shares are kept but none grows; up to
// staticSteps a share above static falls to static; after it every share
// is static. A share below static grows back only after staticSteps, when
// the peer, which lost us at most an interval apart, has already cut
// every share of its own above static (at holdSteps plus an interval).
const (
	healthySteps = 2
	holdSteps    = 3
	staticSteps  = 6
	// A share the exchange stops refreshing lapses to static: above static
	// after growTTLSteps (a new leader's first exchange comes within 3
	// intervals and three quarters of the old one's last; peers, hearing
	// nothing, grow theirs back only after staticSteps+1), below it after
	// staticSteps+1, when peers have dropped theirs.
	growTTLSteps   = 5
	shrinkTTLSteps = staticSteps + 1
	// A peer must acknowledge one of our last ackSteps reports.
	ackSteps = 4
)

// A report: what a region's exchange publishes in its own Redis for the
// others to read, one line each, fields split by a space:
//
//	tollgate-region 1 <region> <seq>
//	ack <peer> <the peer's seq last read>
//	k <bucket key> <demand, millitokens per second> <share, ppm> <the limit's rate, millitokens per second; 0: unknown>
//
// seq is the interval's number (Unix time over the interval), so it moves
// on when the exchange changes hands. A key a region does not list holds
// its static share there.
type report struct {
	region string
	seq    int64
	acks   map[string]int64
	keys   map[string]reportKey
}

type reportKey struct {
	demand float64 // tokens per second
	share  int64   // ppm
	rate   float64 // the limit's, tokens per second; 0: unknown
}

// encodeReport writes r, its keys sorted (at most maxTracked, and at most
// maxReportBytes: keys past it are left out, holding their static share).
func encodeReport(r *report) []byte {
	b := []byte("tollgate-region 1 " + r.region + " " + strconv.FormatInt(r.seq, 10) + "\n")
	peers := make([]string, 0, len(r.acks))
	for p := range r.acks {
		peers = append(peers, p)
	}
	sort.Strings(peers)
	for _, p := range peers {
		b = append(b, "ack "+p+" "+strconv.FormatInt(r.acks[p], 10)+"\n"...)
	}
	keys := make([]string, 0, len(r.keys))
	for k := range r.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i == maxTracked {
			break
		}
		v := r.keys[k]
		line := "k " + k + " " + strconv.FormatInt(int64(v.demand*1000), 10) + " " + strconv.FormatInt(v.share, 10) + " " + strconv.FormatInt(int64(v.rate*1000), 10) + "\n"
		if len(b)+len(line) > maxReportBytes {
			break
		}
		b = append(b, line...)
	}
	return b
}

// errBadReport is a report that is not one: the peer's data is ignored as
// if it could not be read.
// keyPrefix starts every bucket key of the plugin (the root package's own
// keyPrefix: were they to differ, every key would be refused and no share
// would move, which TestRegionSharesFollowTraffic catches).
const keyPrefix = "tg{"

var errBadReport = errors.New("tollgate: malformed region report")

// parseReport reads a report written by encodeReport, as untrusted input:
// bounded in size and lines, every number in range, every key a bucket's.
func parseReport(b []byte) (*report, error) {
	if len(b) > maxReportBytes {
		return nil, errBadReport
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 {
		return nil, errBadReport
	}
	head := strings.Split(lines[0], " ")
	if len(head) != 4 || head[0] != "tollgate-region" || head[1] != "1" {
		return nil, errBadReport
	}
	seq, err := strconv.ParseInt(head[3], 10, 64)
	if err != nil || seq < 0 {
		return nil, errBadReport
	}
	r := &report{region: head[2], seq: seq, acks: map[string]int64{}, keys: map[string]reportKey{}}
	for _, line := range lines[1:] {
		if line == "" {
			continue
		}
		f := strings.Split(line, " ")
		switch {
		case f[0] == "ack" && len(f) == 3 && len(r.acks) < MaxPeers:
			v, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || v < 0 {
				return nil, errBadReport
			}
			r.acks[f[1]] = v
		case f[0] == "k" && len(f) == 5 && len(r.keys) < maxTracked:
			if !bucketKeyOK(f[1]) {
				return nil, errBadReport
			}
			d, err1 := strconv.ParseInt(f[2], 10, 64)
			s, err2 := strconv.ParseInt(f[3], 10, 64)
			g, err3 := strconv.ParseInt(f[4], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || d < 0 || d > 1e15 || s <= 0 || s > ppm || g < 0 || g > 1e15 {
				return nil, errBadReport
			}
			r.keys[f[1]] = reportKey{demand: float64(d) / 1000, share: s, rate: float64(g) / 1000}
		default:
			return nil, errBadReport
		}
	}
	return r, nil
}

// bucketKeyOK reports whether s can be one of Tollgate's bucket keys: it
// starts with the key prefix, is short, and holds printable ASCII without
// spaces.
func bucketKeyOK(s string) bool {
	if len(s) > maxBucketKeyLen || !strings.HasPrefix(s, keyPrefix) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
