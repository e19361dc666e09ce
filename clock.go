package tollgate

// The pod's clock for the durations the plugin measures itself: breaker
// windows and probes, deny-cache waits, idle connections and backends,
// heartbeat ages, the local fallback buckets. They all read monotonic
// nanoseconds (since the process loaded the plugin), never the wall clock:
// a wall clock stepped back an hour by NTP or an operator must not keep a
// breaker open or a refusal cached for that hour. (Redis's buckets use
// Redis's own TIME: bucket.go.)
//
// A component that reads the clock holds a `now func() int64` set to
// monotonic by its constructor; tests inject their own.

import "time"

// processStart is the origin of the monotonic clock; time.Since reads the
// monotonic reading time.Now carries.
var processStart = time.Now()

// monotonic returns the nanoseconds elapsed since processStart, on the
// monotonic clock, plus monoOrigin.
func monotonic() int64 { return int64(time.Since(processStart)) + monoOrigin }

// monoOrigin is where the monotonic clock starts: a day, so that a time
// never set (zero: the last heartbeat, refresh or failure logged) reads as
// long ago from the first instant (Yaegi loads the package just before
// the first New).
const monoOrigin = int64(24 * time.Hour)
