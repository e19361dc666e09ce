package tollgate

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A month quota's counter of an identity that made one request lives a
// day after its last charge, not until the month ends (a minute after):
// memory for one-shot identities (rotating keys, IPv6 /64s) is bounded
// by a day of them. A counter past a tenth of what an even pace spends in
// a day is kept to the window's end. The figures (bytes per identity a
// day later) are logged for the README.
func TestOneShotQuotaCountersLiveADay(t *testing.T) {
	addr := redistest.Start(t)
	atShift(t, time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)) // mid-month: its end weeks away
	h := quotaHandler(t, addr, []config.Quota{{Name: "month", Limit: 300000, Window: "month"}}, func(c *config.Config) {
		c.Average, c.Burst = 100000, 100000
	})
	const ids = 1000
	for i := 0; i < ids; i++ {
		serve(h, fmt.Sprint("one-shot-", i))
	}
	keys := redistest.Do(t, addr, "KEYS", "*@*")
	if len(keys) != ids {
		t.Fatalf("%d quota counters for %d identities", len(keys), ids)
	}
	day := int64(24 * time.Hour / time.Millisecond)
	var bytes, longer int64
	for _, k := range keys {
		ttl, _ := strconv.ParseInt(redistest.Do(t, addr, "PTTL", k)[0], 10, 64)
		if ttl > day {
			longer++
		}
		n, _ := strconv.ParseInt(redistest.Do(t, addr, "MEMORY", "USAGE", k)[0], 10, 64)
		bytes += n
	}
	t.Logf("%d one-request identities: %d B of quota counters (%d B each), %d of them held past a day", ids, bytes, bytes/ids, longer)
	if longer != 0 {
		t.Errorf("%d of %d one-request identities' month counters live past a day", longer, ids)
	}
	// A busy identity: 300,000 a month is ~10,000 a day; a tenth, 1,000.
	for i := 0; i < 1001; i++ {
		serve(h, "busy")
	}
	busy := redistest.Do(t, addr, "KEYS", "*@*")
	var kept int
	for _, k := range busy {
		if ttl, _ := strconv.ParseInt(redistest.Do(t, addr, "PTTL", k)[0], 10, 64); ttl > day {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("a counter past a tenth of a day's even pace: %d counters kept past a day, want the busy one", kept)
	}
}
