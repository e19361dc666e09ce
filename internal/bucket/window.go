package bucket

// Calendar windows of the quotas, computed on the pod from its time zone
// database and passed to the script, which picks the window that holds
// Redis's TIME.
//
// Model. A window is the stretch of time between two local boundaries of
// its zone: an hour starts at each instant whose clock reads a whole hour
// (so a repeated hour is two windows, and across a 30-minute offset change
// a window runs from one whole hour to the next that exists); a day, an ISO
// week (from Monday) and a month start at the first instant of their first
// local date: midnight, or the instant the clocks jump to when they skip
// midnight. A DST day is 23 or 25 hours; a repeated midnight does not start
// a second day.
//
// Units. Bounds are whole seconds, returned in µs since EpochUS like every
// bucket time, so the script compares them with TIME directly.

import (
	"fmt"
	"strings"
	"time"
)

// Window kinds of a quota.
const (
	WindowHour = iota + 1
	WindowDay
	WindowWeek // ISO: Monday 00:00 local
	WindowMonth
)

// ParseWindow parses a quota's window ("hour", "day", "week", "month", any
// case); field is the config path for the error, e.g. "quotas[0].window".
func ParseWindow(field, s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "hour":
		return WindowHour, nil
	case "day":
		return WindowDay, nil
	case "week":
		return WindowWeek, nil
	case "month":
		return WindowMonth, nil
	}
	return 0, fmt.Errorf("%s: %q is not hour, day, week or month", field, s)
}

// maxZoneName bounds a zone name; the longest IANA name is 32 bytes.
const maxZoneName = 64

// LoadZone returns the IANA zone name ("" or "UTC": UTC). The name is
// checked before the time package sees it, so that it can only name a
// file under the tz database: letters, digits, "_", "+", "-" and "/"
// between names (no ".", so no ".."), each name starting with a capital
// letter, and never "Local", "localtime" or "Factory" (the pod's own zone
// would make a limit depend on the pod; Factory is no zone).
func LoadZone(field, name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if !zoneNameOK(name) {
		return nil, fmt.Errorf("%s: %q is not an IANA time zone name (e.g. Europe/Berlin; at most %d bytes of letters, digits, _ + - /)", field, name, maxZoneName)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%s: loading time zone %q: %w (check the name, and that the pod has the IANA tz database: /usr/share/zoneinfo, e.g. the tzdata package, or ZONEINFO naming a zoneinfo.zip)", field, name, err)
	}
	return loc, nil
}

// zoneNameOK reports whether name is shaped like an IANA zone name.
func zoneNameOK(name string) bool {
	if len(name) > maxZoneName || name == "Local" || name[0] == '/' || name[len(name)-1] == '/' ||
		strings.Contains(name, "//") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '+' || c == '-' || c == '/'
		if !ok {
			return false
		}
		// Every part of an IANA zone name starts with a capital letter:
		// so "localtime" (the pod's own zone, a link to /etc/localtime),
		// "posixrules", and the "posix/" and "right/" copies (the latter
		// counting leap seconds: wrong windows) are refused.
		if (i == 0 || name[i-1] == '/') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return name != "Factory"
}

// WindowBounds returns, in µs since EpochUS, the starts of the previous,
// the current and the next window of kind in loc at now, and the end of the
// next: b[0] < b[1] <= now < b[2] < b[3].
func WindowBounds(kind int, loc *time.Location, now time.Time) [4]int64 {
	x := now.Unix() // whole seconds, rounded down: bounds are whole seconds
	var s [4]int64
	if kind == WindowHour {
		s[1] = prevHour(loc, x)
		s[2] = nextHour(loc, x)
		s[0] = prevHour(loc, s[1]-1)
		s[3] = nextHour(loc, s[2])
	} else {
		s[1] = windowStart(kind, loc, x)
		s[2] = windowAfter(kind, loc, x)
		s[0] = windowStart(kind, loc, s[1]-1)
		s[3] = windowAfter(kind, loc, s[2])
	}
	var b [4]int64
	for i := 0; i < 4; i++ {
		b[i] = s[i]*1000000 - EpochUS
	}
	return b
}

// WindowSeconds is the length of the window [start, end) in whole seconds,
// both in µs since EpochUS.
func WindowSeconds(start, end int64) int64 { return (end - start) / 1000000 }

// SecondsLeft is the whole seconds from nowUS to end, rounded up (0 once
// end has passed).
func SecondsLeft(nowUS, end int64) int64 {
	if end <= nowUS {
		return 0
	}
	return (end - nowUS + 999999) / 1000000
}

// The helpers below work in Unix seconds. A reading is the local clock at
// an instant, taken as if it were UTC: instant + offset.

// zoneAt returns loc's offset at instant x and the bounds of the period in
// which it holds: start (0 and false when it has none), end likewise.
func zoneAt(loc *time.Location, x int64) (int64, int64, bool, int64, bool) {
	t := time.Unix(x, 0).In(loc)
	_, off := t.Zone()
	start, end := t.ZoneBounds()
	return int64(off), start.Unix(), !start.IsZero(), end.Unix(), !end.IsZero()
}

// prevHour is the last instant at or before x whose reading is a whole hour.
func prevHour(loc *time.Location, x int64) int64 {
	for i := 0; i < 16; i++ {
		off, start, bounded, _, _ := zoneAt(loc, x)
		c := x - mod(x+off, 3600)
		if !bounded || c >= start {
			return c
		}
		x = start - 1 // no whole hour in [start, x]: look before start
	}
	return x
}

// nextHour is the first instant after x whose reading is a whole hour.
func nextHour(loc *time.Location, x int64) int64 {
	x++
	for i := 0; i < 16; i++ {
		off, _, _, end, bounded := zoneAt(loc, x)
		c := x + mod(-(x+off), 3600)
		if !bounded || c < end {
			return c
		}
		x = end
	}
	return x
}

// windowStart is the start of the window of kind that holds instant x.
func windowStart(kind int, loc *time.Location, x int64) int64 {
	off, _, _, _, _ := zoneAt(loc, x)
	return firstReading(loc, nominal(kind, x+off, 0), x)
}

// windowAfter is the start of the window of kind that follows the one that
// holds instant x.
func windowAfter(kind int, loc *time.Location, x int64) int64 {
	off, _, _, _, _ := zoneAt(loc, x)
	n := nominal(kind, x+off, 1)
	return firstReading(loc, n, n+2*86400) // offsets are under a day
}

// nominal is the reading at which the window of kind holding reading r
// starts (next = 0) or the one after it (next = 1).
func nominal(kind int, r int64, next int) int64 {
	y, m, d := time.Unix(r, 0).UTC().Date()
	switch kind {
	case WindowWeek:
		d -= (int(time.Unix(r, 0).UTC().Weekday()) + 6) % 7
		d += 7 * next
	case WindowMonth:
		d = 1
		m += time.Month(next)
	default:
		d += next
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
}

// firstReading is the first instant of the stretch ending at x in which
// loc's clock reads at least n; x must read at least n. When the clocks
// skip n, it is the instant they jump to.
func firstReading(loc *time.Location, n, x int64) int64 {
	for i := 0; i < 16; i++ {
		off, start, bounded, _, _ := zoneAt(loc, x)
		if !bounded || n-off > start {
			return n - off
		}
		x = start - 1 // all of [start, x] reads at least n
		if off, _, _, _, _ = zoneAt(loc, x); x+off < n {
			return start
		}
	}
	return x
}

// mod is a mod b in [0, b).
func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}
