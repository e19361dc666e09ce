// Package bucket is the protocol of Tollgate's buckets: the math, the
// Lua scripts, the Redis key scheme and the decision's layout.
//
// Token-bucket math, in Go (for the per-pod fallback) and in Lua (for the
// shared bucket in Redis). Both compute the same thing the same way.
//
// Model. A bucket holds at most burst tokens and refills at average tokens
// per period, one token every interval µs. A request takes cost tokens; it
// passes when the bucket holds at least cost tokens, and is then charged.
//
// State. A bucket is stored as one number, its theoretical arrival time
// (TAT, the GCRA form of a token bucket): the instant, in µs since EpochUS,
// at which the bucket will be full again. With d = TAT - now the bucket holds
// (capacity - d)/interval tokens, where capacity = burst*interval. A missing
// bucket, or one whose TAT has passed, is full; keys expire at TAT.
//
// Clocks. One clock per decision: the shared bucket uses Redis's TIME (never
// a pod's clock), counted in µs from EpochUS; the local fallback uses the
// pod's monotonic clock (internal/clock), counted in µs from the process's start,
// smaller numbers with the same precision. Both clamp time
// that runs backwards: a TAT further ahead than capacity (a clock that jumped
// back, e.g. after a failover to a Redis whose clock is behind) is clamped to
// capacity, i.e. an empty bucket, never to a longer wait.
//
// Precision. Times are float64 µs counted from EpochUS (2023-11-14) in Redis
// (from the process's start locally), so they
// stay below 2^47 µs for years and carry 1/64 µs resolution. Each charge adds
// at most one rounding of 1/128 µs, so a decision allows a slack of
// 1 + burst/64 µs: a request that would fit within that much refill time
// passes. Exact for every practical limit; documented in the README.
package bucket

import (
	"math"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// EpochUS is the origin of bucket time, in µs since the Unix epoch. The Lua
// script subtracts the same origin (in seconds) from TIME.
const EpochUS = 1700000000 * 1000000

// Limit is one compiled bucket shape. All fields are in µs or tokens.
type Limit struct {
	Interval float64 // µs per token (period/average)
	Burst    float64 // tokens the bucket holds when full
	Cost     float64 // tokens one request takes
}

// A decision is kept flat, in the layout of the script's reply, so the
// Redis path has nothing to convert (a rate's slots; a quota's and a
// cap's: Kind):
//
//	d[0]      1 if the request passes (every bucket charged), else 0
//	d[1+3i]   bucket i's whole tokens left after this request (before it,
//	          when refused)
//	d[2+3i]   ms until a request of this cost fits bucket i; 0 if it fits now
//	d[3+3i]   ms until bucket i is full again (when its key expires)
func DecisionLen(buckets int) int { return 1 + 3*buckets }

// TakeAll is the all-or-nothing decision over several buckets at instant now
// (µs since EpochUS): tats[i] is bucket i's stored TAT (0 when missing). When
// every bucket fits, each is charged and tats is updated in place; otherwise
// nothing is charged (a TAT clamped because the clock ran backwards is still
// stored clamped). d receives the decision. It is the Go twin of
// BucketScript for rate buckets (Kind Rate, without regions, leases or a
// response's debt, which only the script knows): the same arithmetic in
// the same order, held to the script's replies by script_redis_test.go,
// which runs both on the same state against a real redis-server.
func TakeAll(lims []Limit, tats []float64, now float64, d []int64) bool {
	ok := true
	for i := range lims {
		l := &lims[i]
		capacity := l.Interval * l.Burst
		tat := tats[i]
		if tat < now {
			tat = now
		} else if tat > now+capacity {
			tat = now + capacity
			tats[i] = tat // persist the clamp
		}
		if tat+l.Interval*l.Cost-now > capacity+1+l.Burst/64 {
			ok = false
		}
	}
	d[0] = 0
	if ok {
		d[0] = 1
	}
	for i := range lims {
		l := &lims[i]
		capacity, slack := l.Interval*l.Burst, 1+l.Burst/64
		tat := tats[i]
		if tat < now {
			tat = now
		}
		if ok {
			tat += l.Interval * l.Cost
			tats[i] = tat
		}
		r := math.Floor((now + capacity - tat + slack) / l.Interval)
		if r < 0 {
			r = 0
		} else if r > l.Burst {
			r = l.Burst
		}
		w := tat + l.Interval*l.Cost - now - capacity
		if w <= slack {
			w = 0
		}
		f := tat - now
		if f < 0 {
			f = 0
		}
		d[1+3*i] = int64(r)
		d[2+3*i] = CeilMS(w)
		d[3+3*i] = CeilMS(f)
	}
	return ok
}

// MaxWaitMS bounds every wait and time to full, in ms: 100 years (of
// 365.25 days), the longest refill a configuration may ask (maxRefillUS).
// Only a region's small share stretches a bucket further (its burst raised
// to one request's cost at 1/share of the rate); its times are cut there,
// so that no number overflows (the deny cache counts waits in ns).
const MaxWaitMS = 3155760000000

// CeilMS converts µs to whole milliseconds, rounding up, at most
// MaxWaitMS; the nanosecond taken off absorbs float rounding (1e6/3 µs
// times 3 is 1000 ms, not 1001).
func CeilMS(us float64) int64 {
	ms := math.Ceil((us - 1e-3) / 1000)
	if ms > MaxWaitMS {
		return MaxWaitMS
	}
	return int64(ms)
}

// CheckDecision refuses a decision no correct script sends (the client
// checked its shape: DecisionLen numbers): d[0] not 0 or 1, or a refusal
// that names no wait. Called for a decision that is not an admission.
func CheckDecision(d []int64) error {
	if d[0] > 1 || (d[0] == 0 && !NamesWait(d)) {
		return redis.ErrBadReply
	}
	return nil
}

// NamesWait reports whether a decision names a wait; a refusal that does
// not is a reply no correct script produces.
func NamesWait(d []int64) bool {
	for i := 2; i < len(d); i += 3 {
		if d[i] > 0 {
			return true
		}
	}
	return false
}
