// Package clock is the pod's clock for the durations the plugin measures
// itself: breaker windows and probes, deny-cache waits, idle connections
// and backends, heartbeat ages, the local fallback buckets, the Redis
// client's deadlines. They all read monotonic nanoseconds (since the
// process loaded the plugin), never the wall clock: a wall clock stepped
// back an hour by NTP or an operator must not keep a breaker open or a
// refusal cached for that hour. (Redis's buckets use Redis's own TIME.)
//
// A component that reads the clock holds a `now func() int64` set to Mono
// by its constructor; tests inject their own. The hot path inlines Mono as
// int64(time.Since(clock.Start)) + clock.Origin.
package clock

import "time"

// Start is the origin of the monotonic clock; time.Since reads the
// monotonic reading time.Now carries.
var Start = time.Now()

// Mono returns the nanoseconds elapsed since Start, on the monotonic
// clock, plus Origin.
func Mono() int64 { return int64(time.Since(Start)) + Origin }

// Origin is where the monotonic clock starts: a day, so that a time never
// set (zero: the last heartbeat, refresh or failure logged) reads as long
// ago from the first instant (Yaegi loads the package just before the
// first New).
const Origin = int64(24 * time.Hour)
