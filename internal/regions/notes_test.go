package regions

// The requests' notes (notes.go) and what the exchange makes of them.

import (
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Notes add up by bucket, those Redis decided apart from those refused
// from memory; past maxNotes keys a new key is left out, a noted one still
// counts.
func TestNotesBounded(t *testing.T) {
	var n Notes
	n.Note("tg{a}", 2, true)
	n.Note("tg{a}", 3, true)
	n.Note("tg{a}", 1, false)
	for i := 0; i < maxNotes+10; i++ {
		n.Note("tg{"+strconv.Itoa(i)+"}", 1, true)
	}
	n.Note("tg{a}", 4, true)
	m := n.take()
	if len(m) != maxNotes || m["tg{a}"] != 9 || m["tg{a}"+freshSuffix] != 1 {
		t.Errorf("%d keys (want %d), tg{a} %d (want 9), decided by Redis %d (want 1)", len(m), maxNotes, m["tg{a}"], m["tg{a}"+freshSuffix])
	}
	if m := n.take(); len(m) != 0 {
		t.Errorf("after take: %d notes left", len(m))
	}
}

// A key whose refusals all come from Redis (never from a deny cache) is
// tracked: the tokens Redis decided before the key was tracked count.
func TestRegionRedisRefusalsTrackAKey(t *testing.T) {
	ra, rb := redistest.Start(t), redistest.Start(t)
	a, _ := runningPair(t, ra, rb, rb, ra)
	const bucket = "tg{refused-by-redis}"
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		a.Notes().Note(bucket, 1, false)
	}
	if s := shareIn(t, ra, bucket); s == 0 {
		t.Errorf("a key refused by Redis for a second (5 intervals) is not tracked")
	}
}
