package client

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var wall = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// goldenHeaders reads the headers of one of Tollgate's golden answers
// (testdata/golden at the repository's root): a first line, then
// "Name: value" lines up to a blank one.
func goldenHeaders(t *testing.T, name string) http.Header {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := http.Header{}
	sc := bufio.NewScanner(f)
	sc.Scan() // the status text
	for sc.Scan() && sc.Text() != "" {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			t.Fatalf("%s: %q is not a header", name, sc.Text())
		}
		h.Add(k, v)
	}
	return h
}

const sec = time.Second

// TestReadsTollgatesAnswers reads every golden answer of Tollgate, one
// per headers mode: what each says of its policies, and its Retry-After.
func TestReadsTollgatesAnswers(t *testing.T) {
	api := limit{name: "ietf\x00api\x00", remaining: 17, interval: 600 * time.Millisecond}
	login := limit{name: "ietf\x00login\x00", remaining: 4, interval: 12 * sec}
	for _, c := range []struct {
		file  string
		want  []limit
		retry time.Duration // 0: none
	}{
		{"allowed-ietf.txt", []limit{api, login}, 0},
		{"allowed-draft07.txt", []limit{{name: "draft07\x005\x0060", remaining: 4, reset: 12 * sec, interval: 12 * sec, burst: 5, toFull: true}}, 0},
		{"allowed-legacy.txt", []limit{{name: "legacy\x005", remaining: 4, reset: 12 * sec, interval: 3 * sec}}, 0},
		// both: the IETF form is read, the X-RateLimit-* trio left.
		{"refused-both.txt", []limit{{name: api.name, remaining: 16, interval: api.interval}, {name: login.name, reset: 12 * sec, interval: login.interval}}, 12 * sec},
		{"refused-draft07.txt", []limit{{name: "draft07\x005\x0060", reset: 60 * sec, interval: 12 * sec, burst: 5, toFull: true}}, 12 * sec},
		{"refused-none.txt", nil, 1 * sec},
		{"unavailable.txt", nil, 3 * sec},
	} {
		t.Run(c.file, func(t *testing.T) {
			h := goldenHeaders(t, c.file)
			if got := readLimits(h, wall, nil); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("readLimits:\n got %+v\nwant %+v", got, c.want)
			}
			ra, ok := retryAfter(h, wall)
			if ok != (c.retry > 0) || ra != c.retry {
				t.Fatalf("retryAfter = %v, %v; want %v", ra, ok, c.retry)
			}
		})
	}
}

// TestReadsEveryForm covers what the golden answers do not, and hostile
// values: each is read within its bounds or ignored, never trusted out of
// them.
func TestReadsEveryForm(t *testing.T) {
	long := strings.Repeat("x", maxName+1)
	many := strings.TrimSuffix(strings.Repeat(`"a";r=1, `, maxMembers+1), ", ")
	for _, c := range []struct {
		desc string
		h    http.Header
		want []limit
	}{
		{"no headers", http.Header{}, nil},
		{"IETF, no policy: r spread over t", http.Header{"Ratelimit": {`"a";r=4;t=8`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 4, reset: 8 * sec, interval: 2 * sec}}},
		{"IETF, no policy, no t: unpaced", http.Header{"Ratelimit": {`"a";r=4`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 4}}},
		{"IETF, a token as the name", http.Header{"Ratelimit": {`a;r=1;t=0`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 1}}},
		{"partition keys", http.Header{"Ratelimit-Policy": {`"a";q=10;w=1;pk=:AQ==:, "a";q=20;w=1;pk=:Ag==:`}, "Ratelimit": {`"a";r=3;pk=:Ag==:`}},
			[]limit{{name: "ietf\x00a\x00\x02", remaining: 3, interval: 50 * time.Millisecond}}},
		{"a policy without pk covers every pk", http.Header{"Ratelimit-Policy": {`"a";q=10;w=1`}, "Ratelimit": {`"a";r=3;pk=:Ag==:`}},
			[]limit{{name: "ietf\x00a\x00\x02", remaining: 3, interval: 100 * time.Millisecond}}},
		{"lines joined", http.Header{"Ratelimit-Policy": {`"a";q=10;w=1`, `"b";q=1;w=1`}, "Ratelimit": {`"a";r=1`, `"b";r=0;t=1`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 1, interval: 100 * time.Millisecond}, {name: "ietf\x00b\x00", reset: sec, interval: sec}}},
		{"a cap is not paced", http.Header{"Ratelimit-Policy": {`"c";q=3;qu="concurrent-requests", "a";q=1;w=1`}, "Ratelimit": {`"c";r=2;t=0, "a";r=0;t=1`}},
			[]limit{{name: "ietf\x00a\x00", reset: sec, interval: sec}}},
		{"qu requests is paced", http.Header{"Ratelimit-Policy": {`"a";q=2;w=1;qu="requests"`}, "Ratelimit": {`"a";r=1`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 1, interval: 500 * time.Millisecond}}},
		{"a malformed policy field: limits without it", http.Header{"Ratelimit-Policy": {`"a";q=`}, "Ratelimit": {`"a";r=1;t=2`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 1, reset: 2 * sec, interval: 2 * sec}}},
		{"q 0: no rate", http.Header{"Ratelimit-Policy": {`"a";q=0;w=1`}, "Ratelimit": {`"a";r=1;t=2`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 1, reset: 2 * sec, interval: 2 * sec}}},
		{"huge t and r: cut", http.Header{"Ratelimit-Policy": {`"a";q=1;w=999999999999999`}, "Ratelimit": {`"a";r=999999999999999;t=999999999999999`}},
			[]limit{{name: "ietf\x00a\x00", remaining: maxCount, reset: maxSpan, interval: maxSpan}}},
		{"a rate too fast to pace", http.Header{"Ratelimit-Policy": {`"a";q=999999999999999;w=1`}, "Ratelimit": {`"a";r=5`}},
			[]limit{{name: "ietf\x00a\x00", remaining: 5}}},
		{"negative r: item skipped", http.Header{"Ratelimit": {`"a";r=-1;t=1, "b";r=1`}}, []limit{{name: "ietf\x00b\x00", remaining: 1}}},
		{"negative t: item skipped", http.Header{"Ratelimit": {`"a";r=1;t=-5`}}, nil},
		{"decimal r: item skipped", http.Header{"Ratelimit": {`"a";r=1.5`}}, nil},
		{"string t: item skipped", http.Header{"Ratelimit": {`"a";r=1;t="1"`}}, nil},
		{"no r: item skipped", http.Header{"Ratelimit": {`"a";t=1`}}, nil},
		{"pk not bytes: item skipped", http.Header{"Ratelimit": {`"a";r=1;pk="x"`}}, nil},
		{"a name too long: item skipped", http.Header{"Ratelimit": {`"` + long + `";r=1`}}, nil},
		{"inner list: skipped", http.Header{"Ratelimit": {`("a");r=1, "b";r=2`}}, []limit{{name: "ietf\x00b\x00", remaining: 2}}},
		{"malformed list: ignored", http.Header{"Ratelimit": {`"a";r=1,`}}, nil},
		{"too many members: ignored", http.Header{"Ratelimit": {many}}, nil},
		{"a huge field: ignored", http.Header{"Ratelimit": {`"a";r=1;x="` + strings.Repeat("y", 100000) + `"`}}, nil},
		{"a huge field in many lines: ignored", http.Header{"Ratelimit": strings.Split(strings.Repeat(`"a";r=1,`, 1000)+`"a";r=1`, ",")}, nil},
		{"draft 07 without a policy", http.Header{"Ratelimit": {`limit=10, remaining=5, reset=10`}},
			[]limit{{name: "draft07\x0010\x000", remaining: 5, reset: 10 * sec, interval: 2 * sec}}},
		{"draft 07, its limit's policy chosen", http.Header{"Ratelimit-Policy": {`100;w=60, 10;w=1;burst=20`}, "Ratelimit": {`limit=10, remaining=5, reset=1`}},
			[]limit{{name: "draft07\x0010\x001", remaining: 5, reset: sec, interval: 100 * time.Millisecond, burst: 20, toFull: true}}},
		{"draft 07 with a negative remaining: ignored", http.Header{"Ratelimit": {`limit=10, remaining=-5, reset=1`}}, nil},
		{"draft 07 without a limit: ignored", http.Header{"Ratelimit": {`remaining=5, reset=1`}}, nil},
		{"legacy with an epoch reset", http.Header{"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"30"}, "X-Ratelimit-Reset": {"1748779260"}},
			[]limit{{name: "legacy\x0060", remaining: 30, reset: 60 * sec, interval: 2 * sec}}},
		{"legacy with an epoch reset past", http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1000000000"}},
			[]limit{{name: "legacy\x00"}}},
		{"legacy garbage: ignored", http.Header{"X-Ratelimit-Remaining": {"0x10"}}, nil},
		{"legacy negative: ignored", http.Header{"X-Ratelimit-Remaining": {"-1"}}, nil},
		{"legacy bad reset: ignored", http.Header{"X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"soon"}}, nil},
		{"legacy with 16 digits: ignored", http.Header{"X-Ratelimit-Remaining": {"1234567890123456"}}, nil},
		{"a malformed IETF field falls back to legacy", http.Header{"Ratelimit": {`"a";r=`}, "X-Ratelimit-Remaining": {"2"}, "X-Ratelimit-Reset": {"4"}},
			[]limit{{name: "legacy\x00", remaining: 2, reset: 4 * sec, interval: 2 * sec}}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			if got := readLimits(c.h, wall, nil); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("readLimits:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		desc string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"seconds", http.Header{"Retry-After": {"12"}}, 12 * sec, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"spaces", http.Header{"Retry-After": {" 3 "}}, 3 * sec, true},
		{"an HTTP date, against now", http.Header{"Retry-After": {"Sun, 01 Jun 2025 12:00:05 GMT"}}, 5 * sec, true},
		{"an HTTP date, against the answer's Date", http.Header{"Retry-After": {"Sun, 01 Jun 2025 12:00:05 GMT"}, "Date": {"Sun, 01 Jun 2025 12:00:03 GMT"}}, 2 * sec, true},
		{"an obsolete date form", http.Header{"Retry-After": {"Sunday, 01-Jun-25 12:00:07 GMT"}}, 7 * sec, true},
		{"a date past", http.Header{"Retry-After": {"Sun, 01 Jun 2025 11:00:00 GMT"}}, 0, true},
		{"a date far ahead: cut", http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}}, maxSpan, true},
		{"huge seconds: cut", http.Header{"Retry-After": {"999999999999999"}}, maxSpan, true},
		{"a bad Date: against now", http.Header{"Retry-After": {"Sun, 01 Jun 2025 12:00:05 GMT"}, "Date": {"yesterday"}}, 5 * sec, true},
		{"none", http.Header{}, 0, false},
		{"negative", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"a decimal", http.Header{"Retry-After": {"1.5"}}, 0, false},
		{"16 digits", http.Header{"Retry-After": {"1234567890123456"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"too long", http.Header{"Retry-After": {strings.Repeat("1", maxRA+1)}}, 0, false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			got, ok := retryAfter(c.h, wall)
			if got != c.want || ok != c.ok {
				t.Fatalf("retryAfter = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
