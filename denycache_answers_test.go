package tollgate

import (
	"testing"
	"time"
)

// Refused clients that would be shown the same answer share one, prepared
// once: a flood over many keys rebuilds no header or problem body per key
// and second (issue "Cheaper per request"); a refusal whose answer shows
// something else gets its own.
func TestDenyCacheSharesAnswers(t *testing.T) {
	now := time.Hour
	c := newDenyCache(maxDenials)
	c.now = func() int64 { return int64(now) }
	prepared := 0
	c.prepare = func(d []int64) *refusal {
		prepared++
		return &refusal{body: []byte{byte(d[1]), byte(ceilSecs(d[2]))}}
	}
	answer := func(key string, d []int64) *refusal {
		t.Helper()
		c.remember(key, d)
		got := make([]int64, len(d))
		if !c.lookup(key, got) {
			t.Fatalf("%s: no refusal in force", key)
		}
		return c.entries[key].ans
	}
	a := answer("a", []int64{0, 0, 1500, 5000})
	b := answer("b", []int64{0, 0, 1001, 9000}) // 2 s too, whatever the time until full
	if a == nil || a != b || prepared != 1 {
		t.Fatalf("two clients shown r=0, t=2: answers %p and %p, %d prepared; want one shared, prepared once", a, b, prepared)
	}
	if x := answer("c", []int64{0, 0, 2500, 5000}); x == a || prepared != 2 || x.body[1] != 3 {
		t.Fatalf("a wait of 3 s shared the answer of 2 s (%d prepared)", prepared)
	}
	if x := answer("d", []int64{0, 1, 1500, 5000}); x == a || prepared != 3 || x.body[0] != 1 {
		t.Fatalf("1 token left shared the answer of 0 (%d prepared)", prepared)
	}
	// Several policies: the ms decide which one the answer names.
	two := []int64{0, 0, 1500, 5000, 0, 1400, 5000}
	if answer("e", two) == answer("f", two) || prepared != 5 {
		t.Fatalf("two policies' refusals shared an answer (%d prepared)", prepared)
	}
	// Times until full shown: they are part of the answer.
	c.showsFull = true
	if answer("g", []int64{0, 0, 1500, 5000}) == a || prepared != 6 {
		t.Fatalf("an answer showing the time until full was shared (%d prepared)", prepared)
	}
	c.showsFull = false
	// Bounded.
	for i := int64(0); i < 2*maxAnswers; i++ {
		answerFor := c.answerFor([]int64{0, 0, 1000 * (i + 1), 0})
		if answerFor == nil || len(c.answers) > maxAnswers {
			t.Fatalf("%d shared answers, at most %d", len(c.answers), maxAnswers)
		}
	}
}
