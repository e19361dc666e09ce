package main

import (
	"net/http"
	"testing"
	"time"
)

// TestTableShapes: the table of states with no quota, no cap, no policy,
// odd numbers: each section says what it lacks, and times keep their
// units.
func TestTableShapes(t *testing.T) {
	f := newFakeAdmin(t)
	f.setReply(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write([]byte(`{"class":"api","key":"K","policies":[` +
			`{"name":"api","limit":20,"window":86400,"remaining":0,"reset":5430,"override":{"average":3,"burst":1,"period":"1s"}},` +
			`{"name":"login-burst","limit":5,"window":1,"remaining":-1,"reset":0,"override":null,"shadow":true}],` +
			`"quotas":[],"concurrency":null}`))
	})
	want := `class:  api
key:    K

POLICY       LIMIT  WINDOW  REMAINING  RESET     OVERRIDE
api          20     24h     0          1h30m30s  3/1s burst 1 until removed
login-burst  5      1s      -1         0s        -

quotas: none

concurrency: no cap
`
	code, stdout, stderr := runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", "K")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	f.setReply(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"class":"api","key":"K","policies":[]}`))
	})
	want = "class:  api\nkey:    K\n\npolicies: none\n\nquotas: none\n\nconcurrency: no cap\n"
	if _, stdout, _ = runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", "K"); stdout != want {
		t.Errorf("no policy: stdout:\n%s\nwant:\n%s", stdout, want)
	}
}

// TestSeconds: seconds formats whole seconds as a Go duration without its
// zero units, and parses back to the same value.
func TestSeconds(t *testing.T) {
	cases := []struct {
		desc string
		in   int64
		want string
	}{
		{"zero", 0, "0s"},
		{"seconds", 21, "21s"},
		{"a minute", 60, "1m"},
		{"mixed", 5430, "1h30m30s"},
		{"a day", 86400, "24h"},
		{"negative", -61, "-1m1s"},
		{"the smallest int64", -1 << 63, "-2562047788015215h30m8s"},
	}
	for _, tc := range cases {
		if got := seconds(tc.in); got != tc.want {
			t.Errorf("%s: seconds(%d) = %q, want %q", tc.desc, tc.in, got, tc.want)
		}
		if d, err := time.ParseDuration(tc.want); tc.in > -1<<40 && (err != nil || d != time.Duration(tc.in)*time.Second) {
			t.Errorf("%s: %q parses to %v, %v; want %ds", tc.desc, tc.want, d, err, tc.in)
		}
	}
}

// TestPrintable: what printable keeps, escapes and cuts.
func TestPrintable(t *testing.T) {
	cases := []struct {
		desc string
		in   string
		max  int
		want string
	}{
		{"plain", "api key", -1, "api key"},
		{"unicode", "ünï 🚦 日本", -1, "ünï 🚦 日本"},
		{"controls", "a\tb\nc\x1b[0m\x7f", -1, `a\u0009b\u000ac\u001b[0m\u007f`},
		{"bidi and zero width", "a\u202eb\u200bc", -1, `a\u202eb\u200bc`},
		{"line separator", "a\u2028b", -1, `a\u2028b`},
		{"invalid UTF-8", "a\xffb\xc3", -1, `a\xffb\xc3`},
		{"cut", "abcdef", 3, "abc..."},
		{"not cut at the bound", "abc", 3, "abc"},
		{"cut in runes", "ééééé", 2, "éé..."},
	}
	for _, tc := range cases {
		if got := printable(tc.in, tc.max); got != tc.want {
			t.Errorf("%s: printable(%q, %d) = %q, want %q", tc.desc, tc.in, tc.max, got, tc.want)
		}
	}
}
