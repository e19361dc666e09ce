package tollgate

// The request's side of the bucket: the scripts as the Redis client loads
// and names them, and a policy set's call to them (commandParts,
// newCommand, leaseCommand). The bucket math, the scripts' text, the key
// scheme and the decision's layout are internal/bucket's.

import (
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// The scripts, loaded by the client (EVALSHA, reloaded on NOSCRIPT).
var (
	bucketScr   = redis.NewScript(bucket.BucketScript)      // a check: every bucket of a policy set, all or nothing
	leaseBucket = redis.NewScript(bucket.LeaseScript)       // a check over buckets that leases hold tokens of
	giveBack    = redis.NewScript(bucket.LeaseReturnScript) // a lease's unspent tokens back to its bucket
	giveScr     = redis.NewScript(bucket.SlotReturnScript)  // a concurrency slot given back
	chargeScr   = redis.NewScript(bucket.ChargeScript)      // a response's cost charged
)

// cmdParts is the shape of a script call over policies: each key's
// length (keyLen; ClientKeyLen for a rule keyed its own way, never
// sharded) and suffix, and the interval, burst and cost of every bucket
// (a quota's: -limit, its windows, cost; quota.go) (then, with regions,
// each bucket's static share).
type cmdParts struct {
	lens     []int
	suffixes []string
	args     []string
}

// commandParts returns the call's shape over ps for client keys of keyLen.
func commandParts(ps []*config.Policy, keyLen int) cmdParts {
	var c cmdParts
	for _, p := range ps {
		n := keyLen
		if p.Source != nil {
			n = clientKeyLen
		}
		switch p.Kind {
		case kindCap: // key#member (capCall)
			if p.Cap.Class != "" {
				n = len(p.Cap.Class)
			}
			c.lens = append(c.lens, n+1+memberLen)
			c.args = append(c.args, bucket.CapArgs(p.Cap.Max, p.Cap.DurUS)...)
		case kindQuota: // the windows: quotaViewAt
			c.lens = append(c.lens, n)
			c.args = append(c.args, bucket.QuotaArgs(p.Quota.Limit, p.Lim.Cost)...)
		default:
			c.lens = append(c.lens, n)
			c.args = append(c.args, bucket.RateArgs(p.Shard)...)
		}
		c.suffixes = append(c.suffixes, p.KeySuffix)
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
func newCommand(ps []*config.Policy, keyLen int) *redis.Command {
	c := commandParts(ps, keyLen)
	return redis.NewCommand(bucketScr, c.lens, c.suffixes, c.args, bucket.CheckDecision)
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
	verify := bucket.CheckDecision
	if ask {
		verify = func(d []int64) error { return bucket.CheckDecision(d[:len(d)-2]) } // the grant's numbers are not a bucket's
	}
	return redis.NewCommand(leaseBucket, c.lens, c.suffixes, args, verify)
}

// maxDecisionLine is the longest decision a correct script sends: "+",
// then 1+3(maxRules+1) numbers of at most 20 characters each, separated
// by spaces, and CRLF. It fits in redis.MaxLine (TestDecisionFits).
const maxDecisionLine = 1 + (1+3*(config.MaxRules+1))*21 + 2
