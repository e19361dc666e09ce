package tollgate

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// TestFastPathsArePinned runs each fast path's fixture twice: once as
// ServeHTTP chooses it (servePlain, serveQuotas, serveLeased, serveCapped
// and the deny cache's refuseCached) and once forced through the general
// path (serveAny), on a Fake that answers both alike and keeps the script
// calls it receives. Each request's status, headers and body, the
// counters they moved and the script calls sent (in any order: they may
// travel on several connections) must be the same, byte for byte (a
// slot's member and a lease table's name, which are the process's,
// aside).
func TestFastPathsArePinned(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		mutate func(*config.Config)
		chosen func(h *Tollgate) bool // the fixture takes the fast path it names
		steps  []pinStep
	}{
		{"servePlain: admitted, near the limit, refused, then the deny cache", nil,
			func(h *Tollgate) bool { return h.plain && !h.top.quotas && h.top.lease == nil },
			[]pinStep{{key: "a", reply: "+1 4 0 1000\r\n"}, {key: "a", reply: "+1 0 0 5000\r\n"}, {key: "b", reply: "+0 0 700 5000\r\n"}, {key: "b", reply: "+1 4 0 1000\r\n"}, {key: "c", reply: "+1 3 0 2000\r\n"}}},
		{"servePlain with a decision header", func(c *config.Config) { c.DecisionHeader = "X-Decision" },
			func(h *Tollgate) bool { return h.plain && !h.top.quotas },
			[]pinStep{{key: "a", reply: "+1 4 0 1000\r\n"}, {key: "b", reply: "+0 0 1700 5000\r\n"}, {key: "b", reply: "+1 4 0 1000\r\n"}}},
		{"servePlain without headers", func(c *config.Config) { c.Headers = "none" },
			func(h *Tollgate) bool { return h.plain && !h.top.quotas },
			[]pinStep{{key: "a", reply: "+1 4 0 1000\r\n"}, {key: "b", reply: "+0 0 1700 5000\r\n"}, {key: "b", reply: "+1 4 0 1000\r\n"}}},
		{"serveQuotas: a rate and a daily quota", func(c *config.Config) {
			c.Quotas = []config.Quota{{Name: "daily", Limit: 100, Window: "day"}}
		}, func(h *Tollgate) bool { return h.plain && h.top.quotas },
			[]pinStep{{key: "a", reply: "+1 4 0 1000 90 0 3600000\r\n"}, {key: "a", reply: "+1 4 0 1000 10 0 3600000\r\n"}, {key: "b", reply: "+0 4 0 1000 0 3600000 3600000\r\n"}, {key: "b", reply: "+1 4 0 1000 90 0 3600000\r\n"}}},
		{"serveLeased: a hot client's lease spent", func(c *config.Config) {
			c.Average, c.Burst = 6000, 1000
			c.Lease = config.Lease{Max: 3, TTL: "10s"}
		}, func(h *Tollgate) bool { return h.plain && h.top.lease != nil },
			[]pinStep{{key: "a", reply: "+1 900 0 1000\r\n"}, {key: "a", reply: "+1 899 0 1000\r\n"}, {key: "a", reply: "+1 895 0 1000 3 99000000\r\n"}, {key: "a", reply: ""}, {key: "a", reply: ""}, {key: "a", reply: ""}, {key: "a", reply: "+1 890 0 1000 0 0\r\n"}, {key: "a", reply: "+0 0 500 1000 0 0\r\n"}, {key: "a", reply: ""}}},
		{"serveCapped: admitted, refused when full, the deny cache", func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 2}
		}, func(h *Tollgate) bool { return !h.plain && h.capped },
			[]pinStep{{key: "a", reply: "+1 4 0 1000 1 0 123456789012345678\r\n"}, {key: "b", reply: "+0 4 0 1000 0 1000 0\r\n"}, {key: "b", reply: "+1 4 0 1000 1 0 123456789012345678\r\n"},
				// refused by the rate beside the cap: remembered, then answered from the deny cache
				{key: "c", reply: "+0 0 1700 5000 2 0 0\r\n"}, {key: "c", reply: "+1 4 0 1000 1 0 123456789012345678\r\n"}}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			run := func(fast bool) (answers []string, calls []string, moved []metrics.Policy) {
				f := redistest.StartFake(t, tc.steps[0].reply) // the warm-up's reply of the fixture's shape
				f.Mu.Lock()
				f.ScriptReplies = map[string]string{giveScr.SHA: "+1\r\n"} // a cap's give-back
				f.Mu.Unlock()
				h := handlerOn(t, f.Addr(), func(c *config.Config) {
					c.Redis.Heartbeat = "0" // the pods counted: replicas, not what a heartbeat may have seen meanwhile
					if tc.mutate != nil {
						tc.mutate(c)
					}
				})
				if !tc.chosen(h) {
					t.Fatalf("the fixture does not take the fast path it names (plain %t, capped %t)", h.plain, h.capped)
				}
				if !fast {
					h.plain, h.capped = false, false // serveAny
				}
				serve(h, "warm-up") // the connection and the script loaded
				atomic.StoreInt32(&f.Record, 1)
				before := countersOf(h)
				for _, s := range tc.steps {
					if s.reply != "" {
						f.Mu.Lock()
						f.Reply = s.reply
						f.Mu.Unlock()
					}
					rec := serve(h, s.key)
					answers = append(answers, answerOf(rec))
				}
				after := countersOf(h)
				for i := range after {
					moved = append(moved, delta(after[i], before[i]))
				}
				f.Mu.Lock()
				defer f.Mu.Unlock()
				for _, c := range f.Calls {
					if strings.Contains(c, clientKeyOf(h, "warm-up")) {
						continue // its give-back may come late
					}
					if h.top.lease != nil {
						c = strings.ReplaceAll(c, h.top.lease.table.id, "<table>")
					}
					calls = append(calls, member.ReplaceAllString(c, "#<member>"))
				}
				// Calls on different connections (a cap's give-back and the
				// next take) reach the Fake in either order: compared as sets.
				sortStrings(calls)
				return answers, calls, moved
			}
			fa, fc, fm := run(true)
			ga, gc, gm := run(false)
			if testing.Verbose() {
				for i := range fa {
					t.Logf("request %d: fast %q, general %q", i+1, fa[i], ga[i])
				}
			}
			for i := range fa {
				if fa[i] != ga[i] {
					t.Errorf("request %d (client %s):\nthe fast path answered\n%s\nthe general path\n%s", i+1, tc.steps[i].key, fa[i], ga[i])
				}
			}
			if !reflect.DeepEqual(fc, gc) {
				t.Errorf("script calls:\nthe fast path sent\n%s\nthe general path\n%s", strings.Join(fc, "\n"), strings.Join(gc, "\n"))
			}
			if !reflect.DeepEqual(fm, gm) {
				t.Errorf("counters moved:\nthe fast path %+v\nthe general path %+v", fm, gm)
			}
		})
	}
}

// pinStep is one request of a pinned fixture: its client, and the Fake's
// answer to its script call ("": as before).
type pinStep struct {
	key, reply string
}

// member is a slot's member after its key (key#member): the process's.
var member = regexp.MustCompile(`#[0-9]{18}`)

// answerOf is a response as the client sees it: status, headers, body.
func answerOf(rec *httptest.ResponseRecorder) string {
	var b strings.Builder
	b.WriteString(http.StatusText(rec.Code))
	h := rec.Header()
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		b.WriteString("\n" + k + ": " + strings.Join(h[k], " | "))
	}
	b.WriteString("\n\n" + rec.Body.String())
	return b.String()
}

// countersOf copies the counters of h's policies.
func countersOf(h *Tollgate) []metrics.Policy {
	var out []metrics.Policy
	for _, p := range h.conf.Policies() {
		m := p.Metrics
		c := metrics.Policy{Near: atomic.LoadInt64(&m.Near), CostCharged: atomic.LoadInt64(&m.CostCharged),
			CostInvalid: atomic.LoadInt64(&m.CostInvalid), InFlight: atomic.LoadInt64(&m.InFlight), HeldLost: atomic.LoadInt64(&m.HeldLost)}
		for i := range m.N {
			c.N[i] = atomic.LoadInt64(&m.N[i])
		}
		out = append(out, c)
	}
	return out
}

// delta is what moved from b to a.
func delta(a, b metrics.Policy) metrics.Policy {
	d := metrics.Policy{Near: a.Near - b.Near, CostCharged: a.CostCharged - b.CostCharged, CostInvalid: a.CostInvalid - b.CostInvalid,
		InFlight: a.InFlight - b.InFlight, HeldLost: a.HeldLost - b.HeldLost}
	for i := range a.N {
		d.N[i] = a.N[i] - b.N[i]
	}
	return d
}

var sortMu sync.Mutex

// sortStrings sorts s in place (insertion: a handful of names or calls).
func sortStrings(s []string) {
	sortMu.Lock()
	defer sortMu.Unlock()
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
