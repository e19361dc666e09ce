package tollgate

// The middleware as New builds it (plugin.go): what one router's request
// path reads.

import (
	"net/http"
	"sync"

	"github.com/tollgate-dev/tollgate/internal/regions"
)

// Tollgate is the middleware handler built by New.
//
// Model: each request belongs to a client (sourceCriterion) and takes cost
// tokens from the client's bucket of the class (average tokens per period,
// at most burst; its plan's, with plans) and from the bucket of every rule
// it matches (under the rule's own identity, when it has one), all or
// nothing, in Redis on Redis's clock; the buckets are shared by every
// replica and every router of the class. Without a top-level limit and with
// no matching rule a request passes untouched; so does a client in
// exemptSourceRange.
//
// Safe for concurrent use. A Tollgate owns nothing that needs closing: its
// Redis pool, breaker and fallback buckets belong to the registry, so
// Traefik may drop it at any reload. Invariant: ServeHTTP calls next with
// the ResponseWriter it was given (never a wrapper), or answers itself.
type Tollgate struct {
	next   http.Handler
	set    *Settings
	be     *backend
	local  *localBuckets
	top    *policySet     // the set when no rule matches; nil without a top-level limit
	hb     *heartbeat     // the class's pod count; nil with the heartbeat off
	notes  *regions.Notes // where requests note keys for the region exchange; nil without regions (internal/regions)
	plain  bool           // ServeHTTP's common case applies: top alone, plain (see policySet)
	capped bool           // top alone, with a concurrency cap and nothing else of the general path's (serveCapped)

	mu   sync.Mutex // guards sets
	sets map[uint64]*policySet
}
