package bucket

import (
	"strings"
	"testing"
	"time"
)

// zone loads an IANA zone for a test, failing when the machine lacks it.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone("timezone", name)
	if err != nil {
		t.Fatalf("LoadZone(%q): %v", name, err)
	}
	return loc
}

// at parses an RFC 3339 instant (fraction allowed) for a test.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return v
}

// sinceEpoch is t in µs since EpochUS; showUS shows one for failures.
func sinceEpoch(t time.Time) int64 { return t.UnixMicro() - EpochUS }

func showUS(us int64) string {
	return time.UnixMicro(us + EpochUS).UTC().Format("2006-01-02T15:04:05.999999Z")
}

func TestWindowBoundsAtFixedInstants(t *testing.T) {
	cases := []struct {
		desc, zone string
		kind       int
		now        string
		want       [4]string // previous, current, next window's start; next's end
	}{
		{"UTC hour", "UTC", WindowHour, "2026-05-13T10:20:30.5Z", [4]string{"2026-05-13T09:00:00Z", "2026-05-13T10:00:00Z", "2026-05-13T11:00:00Z", "2026-05-13T12:00:00Z"}},
		{"UTC hour at its first µs", "UTC", WindowHour, "2026-05-13T10:00:00Z", [4]string{"2026-05-13T09:00:00Z", "2026-05-13T10:00:00Z", "2026-05-13T11:00:00Z", "2026-05-13T12:00:00Z"}},
		{"UTC day", "UTC", WindowDay, "2026-05-13T10:20:30Z", [4]string{"2026-05-12T00:00:00Z", "2026-05-13T00:00:00Z", "2026-05-14T00:00:00Z", "2026-05-15T00:00:00Z"}},
		{"UTC day at its last µs", "UTC", WindowDay, "2026-05-12T23:59:59.999999Z", [4]string{"2026-05-11T00:00:00Z", "2026-05-12T00:00:00Z", "2026-05-13T00:00:00Z", "2026-05-14T00:00:00Z"}},
		{"UTC week, a Wednesday", "UTC", WindowWeek, "2026-05-13T10:00:00Z", [4]string{"2026-05-04T00:00:00Z", "2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z"}},
		{"UTC week, a Sunday is in the week of the Monday before", "UTC", WindowWeek, "2026-05-17T23:59:59Z", [4]string{"2026-05-04T00:00:00Z", "2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z"}},
		{"UTC week, a Monday", "UTC", WindowWeek, "2026-05-18T00:00:00Z", [4]string{"2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z", "2026-06-01T00:00:00Z"}},
		{"UTC week across the year end, Thursday", "UTC", WindowWeek, "2026-12-31T12:00:00Z", [4]string{"2026-12-21T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", "2027-01-11T00:00:00Z"}},
		{"UTC week across the year end, Sunday", "UTC", WindowWeek, "2027-01-03T12:00:00Z", [4]string{"2026-12-21T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", "2027-01-11T00:00:00Z"}},
		{"UTC month", "UTC", WindowMonth, "2026-05-13T10:00:00Z", [4]string{"2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"}},
		{"UTC month, December to January", "UTC", WindowMonth, "2026-12-15T00:00:00Z", [4]string{"2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"}},
		{"UTC month, January after December", "UTC", WindowMonth, "2027-01-01T00:00:00Z", [4]string{"2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"}},
		{"UTC month, February of a leap year", "UTC", WindowMonth, "2028-02-29T23:00:00Z", [4]string{"2028-01-01T00:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", "2028-04-01T00:00:00Z"}},
		{"UTC month, February of a common year", "UTC", WindowMonth, "2027-02-28T23:00:00Z", [4]string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"}},

		{"New York day of 23 h", "America/New_York", WindowDay, "2026-03-08T12:00:00-04:00", [4]string{"2026-03-07T00:00:00-05:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", "2026-03-10T00:00:00-04:00"}},
		{"New York day of 25 h", "America/New_York", WindowDay, "2026-11-01T12:00:00-05:00", [4]string{"2026-10-31T00:00:00-04:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", "2026-11-03T00:00:00-05:00"}},
		{"New York hour before 02:00 is skipped", "America/New_York", WindowHour, "2026-03-08T01:30:00-05:00", [4]string{"2026-03-08T00:00:00-05:00", "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"New York hour after 02:00 is skipped", "America/New_York", WindowHour, "2026-03-08T03:00:00-04:00", [4]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00", "2026-03-08T05:00:00-04:00"}},
		{"New York 01:30, first time", "America/New_York", WindowHour, "2026-11-01T01:30:00-04:00", [4]string{"2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"New York 01:30, second time", "America/New_York", WindowHour, "2026-11-01T01:30:00-05:00", [4]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		{"New York week with a 23 h day", "America/New_York", WindowWeek, "2026-03-08T23:00:00-04:00", [4]string{"2026-02-23T00:00:00-05:00", "2026-03-02T00:00:00-05:00", "2026-03-09T00:00:00-04:00", "2026-03-16T00:00:00-04:00"}},
		{"New York March, an hour short", "America/New_York", WindowMonth, "2026-03-20T00:00:00-04:00", [4]string{"2026-02-01T00:00:00-05:00", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00", "2026-05-01T00:00:00-04:00"}},
		{"Berlin day of 23 h", "Europe/Berlin", WindowDay, "2026-03-29T12:00:00+02:00", [4]string{"2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"}},
		{"Berlin day of 25 h", "Europe/Berlin", WindowDay, "2026-10-25T02:30:00+01:00", [4]string{"2026-10-24T00:00:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", "2026-10-27T00:00:00+01:00"}},
		{"Berlin week with a 25 h day", "Europe/Berlin", WindowWeek, "2026-10-19T00:00:00+02:00", [4]string{"2026-10-12T00:00:00+02:00", "2026-10-19T00:00:00+02:00", "2026-10-26T00:00:00+01:00", "2026-11-02T00:00:00+01:00"}},
		{"Berlin October, an hour long", "Europe/Berlin", WindowMonth, "2026-10-31T23:59:59+01:00", [4]string{"2026-09-01T00:00:00+02:00", "2026-10-01T00:00:00+02:00", "2026-11-01T00:00:00+01:00", "2026-12-01T00:00:00+01:00"}},
		{"Kolkata hours start at :30 UTC", "Asia/Kolkata", WindowHour, "2026-05-13T10:20:00Z", [4]string{"2026-05-13T08:30:00Z", "2026-05-13T09:30:00Z", "2026-05-13T10:30:00Z", "2026-05-13T11:30:00Z"}},
		{"Kathmandu hours start at :15 UTC", "Asia/Kathmandu", WindowHour, "2026-05-13T10:20:00Z", [4]string{"2026-05-13T09:15:00Z", "2026-05-13T10:15:00Z", "2026-05-13T11:15:00Z", "2026-05-13T12:15:00Z"}},
		{"Kolkata day", "Asia/Kolkata", WindowDay, "2026-05-13T20:00:00Z", [4]string{"2026-05-12T18:30:00Z", "2026-05-13T18:30:00Z", "2026-05-14T18:30:00Z", "2026-05-15T18:30:00Z"}},
		{"Lord Howe day of 24.5 h", "Australia/Lord_Howe", WindowDay, "2026-04-05T12:00:00+10:30", [4]string{"2026-04-04T00:00:00+11:00", "2026-04-05T00:00:00+11:00", "2026-04-06T00:00:00+10:30", "2026-04-07T00:00:00+10:30"}},
		{"Lord Howe day of 23.5 h", "Australia/Lord_Howe", WindowDay, "2026-10-04T12:00:00+11:00", [4]string{"2026-10-03T00:00:00+10:30", "2026-10-04T00:00:00+10:30", "2026-10-05T00:00:00+11:00", "2026-10-06T00:00:00+11:00"}},
		{"Lord Howe hour of 90 min, clocks back", "Australia/Lord_Howe", WindowHour, "2026-04-04T15:10:00Z", [4]string{"2026-04-05T00:00:00+11:00", "2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30", "2026-04-05T03:00:00+10:30"}},
		{"Lord Howe hour of 90 min, clocks forward", "Australia/Lord_Howe", WindowHour, "2026-10-04T02:45:00+11:00", [4]string{"2026-10-04T00:00:00+10:30", "2026-10-04T01:00:00+10:30", "2026-10-04T03:00:00+11:00", "2026-10-04T04:00:00+11:00"}},
		{"Santiago skips midnight: the day starts at 01:00", "America/Santiago", WindowDay, "2026-09-06T12:00:00-03:00", [4]string{"2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00", "2026-09-08T00:00:00-03:00"}},
		{"Santiago, the day before a skipped midnight", "America/Santiago", WindowDay, "2026-09-05T23:59:59-04:00", [4]string{"2026-09-04T00:00:00-04:00", "2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"}},
		{"Santiago week from a skipped midnight", "America/Santiago", WindowWeek, "2026-09-08T12:00:00-03:00", [4]string{"2026-08-31T00:00:00-04:00", "2026-09-07T00:00:00-03:00", "2026-09-14T00:00:00-03:00", "2026-09-21T00:00:00-03:00"}},
		{"Santiago day of 25 h (23:00 twice)", "America/Santiago", WindowDay, "2026-04-04T23:30:00-04:00", [4]string{"2026-04-03T00:00:00-03:00", "2026-04-04T00:00:00-03:00", "2026-04-05T00:00:00-04:00", "2026-04-06T00:00:00-04:00"}},
		{"Beirut skips midnight", "Asia/Beirut", WindowDay, "2026-03-29T00:30:00Z", [4]string{"2026-03-28T00:00:00+02:00", "2026-03-29T01:00:00+03:00", "2026-03-30T00:00:00+03:00", "2026-03-31T00:00:00+03:00"}},
		{"Havana skips midnight", "America/Havana", WindowDay, "2026-03-08T01:00:00-04:00", [4]string{"2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00", "2026-03-10T00:00:00-04:00"}},
		{"Havana midnight twice: one day of 25 h", "America/Havana", WindowDay, "2026-11-01T00:30:00-05:00", [4]string{"2026-10-31T00:00:00-04:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", "2026-11-03T00:00:00-05:00"}},
		{"Havana midnight twice: two hours", "America/Havana", WindowHour, "2026-11-01T00:30:00-05:00", [4]string{"2026-11-01T00:00:00-04:00", "2026-11-01T00:00:00-05:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := WindowBounds(c.kind, zone(t, c.zone), at(t, c.now))
			for i := 0; i < 4; i++ {
				if want := sinceEpoch(at(t, c.want[i])); b[i] != want {
					t.Errorf("b[%d] = %s, want %s", i, showUS(b[i]), showUS(want))
				}
			}
		})
	}
}

// The lengths that the fixed instants above imply, spelled out.
func TestWindowLengths(t *testing.T) {
	cases := []struct {
		desc, zone string
		kind       int
		now        string
		want       int64 // seconds of the current window
	}{
		{"a UTC hour", "UTC", WindowHour, "2026-05-13T10:20:00Z", 3600},
		{"February 2028", "UTC", WindowMonth, "2028-02-10T00:00:00Z", 29 * 86400},
		{"February 2027", "UTC", WindowMonth, "2027-02-10T00:00:00Z", 28 * 86400},
		{"March 2026 in New York", "America/New_York", WindowMonth, "2026-03-10T00:00:00Z", 31*86400 - 3600},
		{"November 2026 in New York", "America/New_York", WindowMonth, "2026-11-10T00:00:00Z", 30*86400 + 3600},
		{"the week of 2026-03-08 in New York", "America/New_York", WindowWeek, "2026-03-08T12:00:00Z", 7*86400 - 3600},
		{"the week of 2026-10-25 in Berlin", "Europe/Berlin", WindowWeek, "2026-10-25T12:00:00Z", 7*86400 + 3600},
		{"2026-11-01 in New York", "America/New_York", WindowDay, "2026-11-01T12:00:00Z", 25 * 3600},
		{"2026-03-29 in Berlin", "Europe/Berlin", WindowDay, "2026-03-29T12:00:00Z", 23 * 3600},
		{"2026-04-05 on Lord Howe", "Australia/Lord_Howe", WindowDay, "2026-04-05T00:00:00Z", 24*3600 + 1800},
		{"2026-09-06 in Santiago", "America/Santiago", WindowDay, "2026-09-06T12:00:00Z", 23 * 3600},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := WindowBounds(c.kind, zone(t, c.zone), at(t, c.now))
			if got := WindowSeconds(b[1], b[2]); got != c.want {
				t.Errorf("WindowSeconds = %d, want %d", got, c.want)
			}
		})
	}
}

// Invariants of windowBounds at instants 73 h apart over 2026 and 2027 and
// around each clock change, in zones with offsets of :00, :30 and :45, DST
// changes of an hour and of 30 minutes, midnights skipped and repeated.
func TestWindowBoundsInvariants(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Asia/Kathmandu",
		"Australia/Lord_Howe", "America/Santiago", "America/Havana", "Asia/Beirut", "Pacific/Chatham"}
	kinds := []int{WindowHour, WindowDay, WindowWeek, WindowMonth}
	from, to := at(t, "2026-01-01T00:00:00Z"), at(t, "2028-01-01T00:00:00Z")
	for _, name := range zones {
		loc := zone(t, name)
		var instants []time.Time
		for x := from.Add(7*time.Hour + 13*time.Minute + 17*time.Second + 123457*time.Microsecond); x.Before(to); x = x.Add(73 * time.Hour) {
			instants = append(instants, x)
		}
		x := from // not a loop variable: Yaegi loses its assignments in the body
		for i := 0; i < 16; i++ {
			_, end := x.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(to) {
				break
			}
			for _, d := range []time.Duration{-time.Hour - time.Second, -time.Microsecond, 0, time.Microsecond, 30 * time.Minute, time.Hour} {
				instants = append(instants, end.Add(d))
			}
			x = end
		}
		for _, kind := range kinds {
			for _, now := range instants {
				checkWindow(t, name, kind, loc, now)
			}
		}
	}
}

func checkWindow(t *testing.T, name string, kind int, loc *time.Location, now time.Time) {
	t.Helper()
	b := WindowBounds(kind, loc, now)
	n := sinceEpoch(now)
	if !(b[0] < b[1] && b[1] <= n && n < b[2] && b[2] < b[3]) {
		t.Fatalf("%s kind %d at %s: bounds %s %s %s %s out of order", name, kind, showUS(n), showUS(b[0]), showUS(b[1]), showUS(b[2]), showUS(b[3]))
	}
	first := time.UnixMicro(b[1] + EpochUS)
	for _, x := range []time.Time{first, time.UnixMicro(b[2] + EpochUS - 1)} {
		if c := WindowBounds(kind, loc, x); c != b {
			t.Fatalf("%s kind %d: at %s the window is %s, at %s it is %s", name, kind, showUS(n), showUS(b[1]), x.UTC(), showUS(c[1]))
		}
	}
	if c := WindowBounds(kind, loc, time.UnixMicro(b[2]+EpochUS)); c[0] != b[1] || c[1] != b[2] || c[2] != b[3] {
		t.Fatalf("%s kind %d at %s: the next window's bounds %s %s %s, want %s %s %s", name, kind, showUS(n),
			showUS(c[0]), showUS(c[1]), showUS(c[2]), showUS(b[1]), showUS(b[2]), showUS(b[3]))
	}
	// It starts at a whole hour, or early in a new date (week: Monday; month: the 1st).
	local, before := first.In(loc), first.Add(-time.Second).In(loc)
	ok := local.Minute() == 0 && local.Second() == 0
	if kind != WindowHour {
		ok = local.Hour() < 2 && local.Day() != before.Day() &&
			(kind != WindowWeek || local.Weekday() == time.Monday) && (kind != WindowMonth || local.Day() == 1)
	}
	if !ok {
		t.Fatalf("%s kind %d at %s: the window starts at %s (a second before: %s)", name, kind, showUS(n), local, before)
	}
	if s := WindowSeconds(b[1], b[2]); s < 1800 || s > 32*86400 {
		t.Fatalf("%s kind %d at %s: a window of %d s", name, kind, showUS(n), s)
	}
}

func TestWindowSecondsAndSecondsLeft(t *testing.T) {
	// nowUS, end, the whole seconds left: a µs, a µs short of a second, a
	// second, a second and a µs, an hour less a µs, at the end, past it.
	cases := [][3]int64{{0, 1, 1}, {0, 999999, 1}, {0, 1000000, 1}, {0, 1000001, 2}, {5, 3600000004, 3600}, {7, 7, 0}, {8, 7, 0}}
	for _, c := range cases {
		if got := SecondsLeft(c[0], c[1]); got != c[2] {
			t.Errorf("SecondsLeft(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
	if got := WindowSeconds(-3600000000, 86400000000-3600000000); got != 86400 {
		t.Errorf("WindowSeconds of a day = %d, want 86400", got)
	}
}

func TestParseWindow(t *testing.T) {
	for s, want := range map[string]int{"hour": WindowHour, "Day": WindowDay, " WEEK ": WindowWeek, "month\t": WindowMonth} {
		if got, err := ParseWindow("quotas[0].window", s); err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "hours", "daily", "year", "minute", "1h"} {
		_, err := ParseWindow("quotas[2].window", s)
		if err == nil || !strings.Contains(err.Error(), "quotas[2].window: ") || !strings.Contains(err.Error(), `"`+s+`"`) {
			t.Errorf("ParseWindow(%q): error %v, want one naming quotas[2].window and the value", s, err)
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"", "UTC"} {
		if loc, err := LoadZone("quotas[0].timezone", name); err != nil || loc != time.UTC {
			t.Errorf("LoadZone(%q) = %v, %v; want UTC", name, loc, err)
		}
	}
	for _, name := range []string{"Europe/Berlin", "America/Argentina/Buenos_Aires", "America/Port-au-Prince", "Etc/GMT+5", "Etc/GMT-14", "Asia/Kolkata"} {
		loc, err := LoadZone("quotas[0].timezone", name)
		if err != nil || loc.String() != name {
			t.Errorf("LoadZone(%q) = %v, %v", name, loc, err)
		}
	}
	bad := []string{"../etc/passwd", "/etc/localtime", "Local", ".hidden", "a b", "Europe/../../x", "Europe/Berlin\x00",
		`Europe\Berlin`, "zone.tab", "Europe/Berlin/", "Europe//Berlin", "America/" + strings.Repeat("x", 57),
		"localtime", "posixrules", "Factory", "posix/Europe/Berlin", "right/UTC", "Europe/berlin"}
	for _, name := range bad {
		_, err := LoadZone("quotas[1].timezone", name)
		if err == nil || !strings.HasPrefix(err.Error(), "quotas[1].timezone: ") || !strings.Contains(err.Error(), "not an IANA time zone name") {
			t.Errorf("LoadZone(%q): error %v, want the name refused before it is loaded", name, err)
		}
	}
	_, err := LoadZone("quotas[1].timezone", "Mars/Olympus")
	if err == nil || !strings.HasPrefix(err.Error(), "quotas[1].timezone: ") || !strings.Contains(err.Error(), `"Mars/Olympus"`) ||
		!strings.Contains(err.Error(), "/usr/share/zoneinfo") {
		t.Errorf("LoadZone(Mars/Olympus): error %v, want one naming the field and what the pod needs", err)
	}
	if name := "America/X" + strings.Repeat("x", 55); len(name) != maxZoneName || !zoneNameOK(name) {
		t.Errorf("a name of %d bytes is refused", len(name))
	}
}
