package tollgate

import (
	"testing"
	"time"
)

func TestBreakerSteps(t *testing.T) {
	b := &breaker{}
	threshold, interval := int64(3), int64(3*time.Second)
	ms := int64(time.Millisecond)
	steps := []struct {
		desc  string
		at    int64 // ms
		allow bool
		then  string // "ok", "fail" or ""
	}{
		{"closed", 0, true, "fail"},
		{"one failure", 1, true, "fail"},
		{"two failures", 2, true, "fail"},
		{"open: no call", 1000, false, ""},
		{"open: still no call", 2000, false, ""},
		{"probe due", 3002, true, "fail"},
		{"probe taken, next not due", 3003, false, ""},
		{"probe due again", 6002, true, "ok"},
		{"closed again", 6003, true, "ok"},
		// Failures among many successes do not open it.
		{"ok", 6004, true, "ok"},
		{"ok", 6005, true, "ok"},
		{"ok", 6006, true, "ok"},
		{"fail 1 of 6", 6007, true, "fail"},
		{"fail 2 of 7", 6008, true, "fail"},
		{"fail 3 of 8: under half", 6009, true, "fail"},
		{"fail 4 of 9: under half", 6010, true, "fail"},
		{"still closed; fail 5 of 10: half, opens", 6011, true, "fail"},
		{"open", 6012, false, ""},
		{"probe due", 9011, true, "ok"},
		// A new window forgets the old one's failures.
		{"window 1: fail", 9014, true, "fail"},
		{"window 1: fail", 9015, true, "fail"},
		{"window 2: 1 failure", 10100, true, "fail"},
		{"window 2: 2 failures", 10101, true, "fail"},
		{"window 2: 3rd failure opens", 10102, true, "fail"},
		{"open", 10103, false, ""},
		// The topology changed (a replica promoted): the next check probes.
		{"probeSoon", 10104, true, "probeSoon"},
		{"probe taken", 10105, false, ""},
	}
	for i, s := range steps {
		if s.then == "probeSoon" {
			b.probeSoon()
		}
		got := !b.isOpen() || b.allow(s.at*ms, interval)
		if got != s.allow {
			t.Fatalf("step %d (%s, t=%dms): allow = %t, want %t", i, s.desc, s.at, got, s.allow)
		}
		switch s.then {
		case "ok":
			b.success(s.at * ms)
		case "fail":
			b.failure(s.at*ms, threshold, interval)
		}
	}
}
