package tollgate

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// A step of a bucket walk: at instant at (seconds from t0) a request is
// made; want says whether it passes and what the bucket reports.
type step struct {
	at        float64 // seconds
	ok        bool
	remaining int64
	waitMS    int64
	fullMS    int64
}

func walk(t *testing.T, l bucket.Limit, steps []step) {
	t.Helper()
	const t0 = 1e12 // µs since EpochUS, an arbitrary instant
	tats := []float64{0}
	d := make([]int64, bucket.DecisionLen(1))
	for i, s := range steps {
		ok := bucket.TakeAll([]bucket.Limit{l}, tats, t0+s.at*1e6, d)
		if ok != s.ok || (d[0] == 1) != ok {
			t.Fatalf("step %d (t=%gs): allowed = %t (d[0] = %d), want %t", i, s.at, ok, d[0], s.ok)
		}
		if d[1] != s.remaining || d[2] != s.waitMS || d[3] != s.fullMS {
			t.Fatalf("step %d (t=%gs): got r=%d wait=%dms full=%dms, want r=%d wait=%dms full=%dms",
				i, s.at, d[1], d[2], d[3], s.remaining, s.waitMS, s.fullMS)
		}
	}
}

func TestBucketSteps(t *testing.T) {
	// 1 token per second (interval 1e6 µs).
	perSecond := func(burst, cost float64) bucket.Limit { return bucket.Limit{Interval: 1e6, Burst: burst, Cost: cost} }
	for _, tc := range []struct {
		desc  string
		lim   bucket.Limit
		steps []step
	}{
		{
			desc: "burst then refill",
			lim:  perSecond(3, 1),
			steps: []step{
				{at: 0, ok: true, remaining: 2, waitMS: 0, fullMS: 1000},
				{at: 0, ok: true, remaining: 1, waitMS: 0, fullMS: 2000},
				{at: 0, ok: true, remaining: 0, waitMS: 1000, fullMS: 3000},
				{at: 0, ok: false, remaining: 0, waitMS: 1000, fullMS: 3000},
				{at: 0.5, ok: false, remaining: 0, waitMS: 500, fullMS: 2500},
				{at: 1, ok: true, remaining: 0, waitMS: 1000, fullMS: 3000},
				{at: 3, ok: true, remaining: 1, waitMS: 0, fullMS: 2000},
			},
		},
		{
			desc: "the bucket never holds more than burst",
			lim:  perSecond(2, 1),
			steps: []step{
				{at: 0, ok: true, remaining: 1, fullMS: 1000},
				{at: 100, ok: true, remaining: 1, fullMS: 1000},
				{at: 100, ok: true, remaining: 0, waitMS: 1000, fullMS: 2000},
				{at: 100, ok: false, remaining: 0, waitMS: 1000, fullMS: 2000},
			},
		},
		{
			desc: "a request takes cost tokens and waits for all of them",
			lim:  perSecond(5, 2),
			steps: []step{
				{at: 0, ok: true, remaining: 3, fullMS: 2000},
				{at: 0, ok: true, remaining: 1, waitMS: 1000, fullMS: 4000},
				{at: 0, ok: false, remaining: 1, waitMS: 1000, fullMS: 4000},
				{at: 1, ok: true, remaining: 0, waitMS: 2000, fullMS: 5000},
			},
		},
		{
			desc: "time going backwards never lengthens the wait beyond an empty bucket",
			lim:  perSecond(2, 1),
			steps: []step{
				{at: 10, ok: true, remaining: 1, fullMS: 1000},
				{at: 10, ok: true, remaining: 0, waitMS: 1000, fullMS: 2000},
				// The clock jumps back 1000 s: the stored TAT is 1002 s ahead,
				// clamped to 2 s (an empty bucket), not 1001 s of waiting.
				{at: -990, ok: false, remaining: 0, waitMS: 1000, fullMS: 2000},
				{at: -989, ok: true, remaining: 0, waitMS: 1000, fullMS: 2000},
			},
		},
		{
			desc: "an idle bucket is full again at fullMS (when its key expires)",
			lim:  perSecond(3, 1),
			steps: []step{
				{at: 0, ok: true, remaining: 2, fullMS: 1000},
				{at: 0, ok: true, remaining: 1, fullMS: 2000},
				{at: 2, ok: true, remaining: 2, fullMS: 1000},
			},
		},
		{
			desc: "a fractional interval (100 per minute) admits exactly burst at once",
			lim:  bucket.Limit{Interval: 60e6 / 100, Burst: 20, Cost: 1},
			steps: func() []step {
				var s []step
				for i := int64(0); i < 20; i++ {
					w := int64(0)
					if i == 19 {
						w = 600
					}
					s = append(s, step{at: 0, ok: true, remaining: 19 - i, waitMS: w, fullMS: 600 * (i + 1)})
				}
				return append(s, step{at: 0, ok: false, remaining: 0, waitMS: 600, fullMS: 12000})
			}(),
		},
		{
			desc: "a third of a second per token accumulates no rounding error",
			lim:  bucket.Limit{Interval: 1e6 / 3, Burst: 3, Cost: 1},
			steps: []step{
				{at: 0, ok: true, remaining: 2, fullMS: 334},
				{at: 0, ok: true, remaining: 1, fullMS: 667},
				{at: 0, ok: true, remaining: 0, waitMS: 334, fullMS: 1000},
				{at: 0, ok: false, remaining: 0, waitMS: 334, fullMS: 1000},
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) { walk(t, tc.lim, tc.steps) })
	}
}

func TestTakeAllIsAllOrNothing(t *testing.T) {
	wide := bucket.Limit{Interval: 1e6, Burst: 10, Cost: 1}
	narrow := bucket.Limit{Interval: 1e6, Burst: 1, Cost: 1}
	lims := []bucket.Limit{wide, narrow}
	tats := []float64{0, 0}
	d := make([]int64, bucket.DecisionLen(2))
	if !bucket.TakeAll(lims, tats, 1e12, d) {
		t.Fatal("step 0: allowed = false, want true")
	}
	before := tats[0]
	if bucket.TakeAll(lims, tats, 1e12, d) {
		t.Fatal("step 1: allowed = true, want false (narrow is empty)")
	}
	if tats[0] != before {
		t.Fatalf("step 1: the wide bucket was charged for a refused request (TAT %v -> %v)", before, tats[0])
	}
	if d[0] != 0 || d[1] != 9 || d[2] != 0 || d[5] != 1000 {
		t.Fatalf("step 1: decision %v, want refused, wide r=9 t=0, narrow waiting 1000ms", d)
	}
}

func TestLuaScriptKeepsItsContract(t *testing.T) {
	// The Go side relies on these: the reply shape and the epoch.
	for _, want := range []string{"redis.call('TIME')", "- 1700000000", "redis.status_reply", "'PX'", "redis.replicate_commands"} {
		if !strings.Contains(bucket.BucketScript, want) {
			t.Fatalf("BucketScript lacks %q", want)
		}
	}
	if bucket.EpochUS != 1700000000*1000000 {
		t.Fatalf("EpochUS = %d, out of step with the script", int64(bucket.EpochUS))
	}
	if len(bucketScr.SHA) != 40 {
		t.Fatalf("bucketScr.SHA = %q", bucketScr.SHA)
	}
}
