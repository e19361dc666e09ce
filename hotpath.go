package tollgate

// What the request path reads that other packages define, as its own:
// under Yaegi a read of another package's variable or constant allocates,
// so the request reads these copies (TestRequestPathReadsItsOwn), each
// defined as its original, or written out and held to it by a test.

import (
	"encoding/base64"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// processStart, monoOrigin and histSample are clock.Start, clock.Origin
// and metrics.HistSample: the inlined monotonic clock is
// int64(time.Since(processStart)) + monoOrigin.
var processStart = clock.Start

// rawURL is base64.RawURLEncoding, the client key's (bucket.HashKey).
var rawURL = base64.RawURLEncoding

// noHeader is Tollgate.keyHeader when clients are not keyed by a header
// ServeHTTP hashes: no request has a header of that name.
const noHeader = "\x00"

const (
	monoOrigin = clock.Origin
	histSample = metrics.HistSample
)

// Canonical header names, for map assignment (the hot path's headers).
const (
	hdrPolicy    = "Ratelimit-Policy"
	hdrRateLimit = "Ratelimit"
)

// Other packages' constants, each defined as its original (they cannot
// drift).
const (
	keyPrefix      = bucket.KeyPrefix
	clientKeyLen   = bucket.ClientKeyLen
	epochUS        = bucket.EpochUS
	kindQuota      = bucket.Quota
	kindCap        = bucket.Cap
	nResults       = metrics.NResults
	resAllowed     = metrics.Allowed
	resLimited     = metrics.Limited
	resUnavailable = metrics.Unavailable
	resShadow      = metrics.ShadowLimited
	headersIETF    = config.HeadersIETF
	headersLegacy  = config.HeadersLegacy
	headersDraft07 = config.HeadersDraft07
	modeCluster    = redis.Cluster
	modeStandalone = redis.Standalone
	kindDial       = redis.KindDial
	maxRules       = config.MaxRules
	costInvalid    = usage.Invalid
	costMissing    = usage.Missing
	costEncoded    = usage.Encoded
)

// How a request was decided (DecisionHeader), by value. Each equals the
// metrics decision it is counted under (metrics.ByRedis, ...; held by
// TestDecidedMatchesMetrics); decidedAnswered, one past them, is a
// refusal already answered from its prepared form.
const (
	decidedRedis       = 0
	decidedLocal       = 1
	decidedLease       = 2 // admitted from the pod's lease (lease.go)
	decidedUnavailable = 3
	decidedCache       = 4 // a refusal from Redis still in force (denycache.go)
	decidedAnswered    = 5 // the same, already answered from its prepared refusal
)

// decisionValues are the DecisionHeader values by decision, assigned to the
// header map as they are (each has no spare capacity: an append copies).
var decisionValues = [...][]string{{"redis"}, {"local"}, {"lease"}, {"unavailable"}, {"cache"}}
