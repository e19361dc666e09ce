package regions

// Reports: written bounded, read as untrusted input.

import (
	"strconv"
	"strings"
	"testing"
)

func TestReportRoundTrip(t *testing.T) {
	r := &report{region: "eu-west", seq: 42, acks: map[string]int64{"us-east": 41},
		keys: map[string]reportKey{"tg{abcdefghij}": {demand: 12.5, share: 950000}, "tg{abcdefghij}:login": {demand: 0, share: 50000}}}
	got, err := parseReport(encodeReport(r))
	if err != nil {
		t.Fatal(err)
	}
	if got.region != r.region || got.seq != 42 || got.acks["us-east"] != 41 || len(got.keys) != 2 || got.keys["tg{abcdefghij}"] != r.keys["tg{abcdefghij}"] {
		t.Errorf("round trip: %+v", got)
	}
	// Past maxTracked keys, or maxReportBytes, the rest is left out.
	big := &report{region: "a", seq: 1, keys: map[string]reportKey{}}
	for i := 0; i < maxTracked+500; i++ {
		big.keys["tg{"+strconv.Itoa(i)+strings.Repeat("x", 150)+"}"] = reportKey{demand: 1e9, share: ppm}
	}
	b := encodeReport(big)
	if len(b) > maxReportBytes {
		t.Errorf("report of %d bytes, bound %d", len(b), maxReportBytes)
	}
	if back, err := parseReport(b); err != nil || len(back.keys) == 0 || len(back.keys) > maxTracked {
		t.Errorf("big report: %v, %d keys", err, len(back.keys))
	}
}

// A peer's report is untrusted input: anything but a report is refused as
// a whole (the peer counts as unheard), never a panic, never a share out
// of range.
func TestHostileReportsAreRefused(t *testing.T) {
	for _, s := range []string{
		"",
		"tollgate-region 2 a 1\n",
		"tollgate-region 1 a -1\n",
		"tollgate-region 1 a 1 extra\n",
		"tollgate-region 1 a 1\nk tg{x} 1 0 0\n", // share 0
		"tollgate-region 1 a 1\nk tg{x} 1 1000001 0\n",                                    // share above 1
		"tollgate-region 1 a 1\nk tg{x} -1 10 0\n",                                        // negative demand
		"tollgate-region 1 a 1\nk other 1 10 0\n",                                         // not a bucket key
		"tollgate-region 1 a 1\nk tg{x\x00} 1 10 0\n",                                     // not printable
		"tollgate-region 1 a 1\nk tg{x} 1e3 10 0\n",                                       // not an integer
		"tollgate-region 1 a 1\nk tg{x} 1 10 0 more\n",                                    // extra field
		"tollgate-region 1 a 1\nk tg{x} 1 10 -5\n",                                        // negative rate
		"tollgate-region 1 a 1\nk tg{x} 1 10\n",                                           // no rate
		"tollgate-region 1 a 1\nack b x\n",                                                // bad ack
		"tollgate-region 1 a 1\nshare tg{x} 1\n",                                          // unknown line
		"tollgate-region 1 a 1\n" + strings.Repeat("k tg{x} 1 10 0\n", maxReportBytes/14), // too big
	} {
		if r, err := parseReport([]byte(s)); err == nil {
			t.Errorf("%.60q: accepted as %+v", s, r)
		}
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add([]byte("tollgate-region 1 a 7\nack b 6\nk tg{abc} 1500 950000 50000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseReport(b)
		if err != nil {
			return
		}
		if len(r.keys) > maxTracked || len(r.acks) > MaxPeers {
			t.Fatalf("unbounded: %d keys, %d acks", len(r.keys), len(r.acks))
		}
		for k, v := range r.keys {
			if !bucketKeyOK(k) || v.share <= 0 || v.share > ppm || v.demand < 0 {
				t.Fatalf("accepted %q %+v", k, v)
			}
		}
	})
}
