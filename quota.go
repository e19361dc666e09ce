package tollgate

// Calendar quotas (Config.Quotas): a counter per client and calendar
// window, charged in the bucket script beside the rates, all or nothing.
//
// A quota is one more policy of its owner's sets (the top level's, a
// plan's, a rule's), after the owner, keyed as the owner keys its
// clients. Its call passes the limit, the request's cost and the bounds
// of the previous, current and next windows (internal/bucket/window.go, from the
// pod's clock); the script picks the window that holds Redis's TIME, so
// a pod whose clock is off by less than a window counts in the right
// one. Its counter is the key <policy key>@<window start, s> and expires
// a minute after its window ends. A set's call and RateLimit-Policy are
// made again when a window rolls over (policyset.go). Here: a quota's
// shape and its windows. Redis unavailable, a quota is not counted
// (failureMode open admits, closed answers 503).

import (
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// quotaShiftUS moves the quotas' clock, the pod's and the script's alike,
// by that many µs: for tests (a DST day on a real redis-server). No
// configuration sets it.
var quotaShiftUS int64

// quotaNow is the quotas' clock: the wall clock, shifted by quotaShiftUS.
func quotaNow() time.Time {
	return time.Now().Add(time.Duration(quotaShiftUS) * time.Microsecond)
}

// quotaWindow returns the bounds of q's windows around now (bucket.WindowBounds),
// computed again only when now has left the current one.
func quotaWindow(q *config.QuotaShape, now time.Time) []int64 {
	us := quotaUS(now)
	q.Mu.Lock()
	defer q.Mu.Unlock()
	if q.Bounds == nil || us < q.Bounds[1] || us >= q.Bounds[2] {
		b := bucket.WindowBounds(q.Kind, q.Loc, now)
		q.Bounds = []int64{b[0], b[1], b[2], b[3]}
	}
	return q.Bounds
}

// quotaUS is now in µs since EpochUS, as the scripts count time.
func quotaUS(now time.Time) int64 { return now.UnixMicro() - epochUS }
