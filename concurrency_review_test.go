package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// capKeys returns every cap's slots key in Redis at addr that holds
// slots, with its count.
func capKeys(t *testing.T, addr string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range redistest.Do(t, addr, "KEYS", "*}c") {
		if k == "" {
			continue
		}
		if n := slots(t, addr, k); n != "0" {
			out[k] = n
		}
	}
	return out
}

// localHeld returns the keys h's local store holds slots of.
func localHeld(h *Tollgate) int {
	h.local.heldMu.Lock()
	defer h.local.heldMu.Unlock()
	return len(h.local.held)
}

func TestReviewConcExactFarAboveThePool(t *testing.T) {
	// 300 at once at a cold handler (its pool not dialled): the backend
	// never holds more than max, Redis never more than max slots, and
	// every slot comes back.
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc    string
		c       config.Concurrency
		clients int
		want    int // admitted
	}{
		{"class", config.Concurrency{Max: 7, Key: "class"}, 300, 7},
		{"client", config.Concurrency{Max: 4}, 3, 12},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			g := newGate()
			h := capHandler(t, addr, g, tc.c, func(c *config.Config) { c.Redis.PoolSize = 4 })
			recs, done := burst(h, g, 300, func(i int) string { return fmt.Sprint("c", i%tc.clients) })
			waitArrived(t, g, tc.want)
			waitRefused(t, recs, 300-tc.want)
			if m := atomic.LoadInt64(&g.most); m != int64(tc.want) {
				t.Errorf("the backend held %d at once, want %d", m, tc.want)
			}
			held := capKeys(t, addr)
			total := 0
			for k, n := range held {
				var v int
				fmt.Sscan(n, &v)
				total += v
				if int64(v) > tc.c.Max {
					t.Errorf("%s holds %d slots, over max %d", k, v, tc.c.Max)
				}
			}
			if total != tc.want {
				t.Errorf("Redis holds %d slots, want %d", total, tc.want)
			}
			for _, r := range recs {
				if r.Code == http.StatusTooManyRequests && r.Header().Get("X-Decision") != "redis" {
					t.Errorf("a refusal decided by %q, want redis", r.Header().Get("X-Decision"))
					break
				}
			}
			close(g.open)
			done.Wait()
			settle(t, h)
			if left := capKeys(t, addr); len(left) != 0 {
				t.Errorf("slots held after every request ended: %v", left)
			}
			if m := h.conf.TopQuotas[0].Metrics; atomic.LoadInt64(&m.InFlight) != 0 {
				t.Errorf("in-flight gauge %d after the requests ended", atomic.LoadInt64(&m.InFlight))
			}
		})
	}
}

func TestReviewConcMembersOfPodsDiffer(t *testing.T) {
	// Pods started at once behind one balancer count their requests
	// alike: two whose members start alike would share every slot
	// (ZADD of one member) and give back each other's. 5,000 processes'
	// first members must all differ.
	seen := map[string]bool{}
	for i := 0; i < 5000; i++ {
		m := strings.TrimSpace(fmt.Sprint(newHeldBase() + 1))
		if len(m) != memberLen {
			t.Fatalf("member %s: %d digits, want %d", m, len(m), memberLen)
		}
		if seen[m] {
			t.Fatalf("process %d's first member %s is another process's", i, m)
		}
		seen[m] = true
	}
}

func TestReviewConcCapNamesClash(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		mutate func(*config.Config)
	}{
		{"a plan's cap and a rule's cap", func(c *config.Config) {
			c.Plans = []config.Plan{{Name: "pro", Average: 10, Period: "1m", Concurrency: &config.Concurrency{Max: 2, Name: "x"}}}
			c.Rules = []config.Rule{{Name: "r", Average: 10, Period: "1m", Concurrency: &config.Concurrency{Max: 2, Name: "x"}}}
		}},
		{"a plan's cap and a rule's quota", func(c *config.Config) {
			c.Plans = []config.Plan{{Name: "pro", Average: 10, Period: "1m", Concurrency: &config.Concurrency{Max: 2, Name: "x"}}}
			c.Rules = []config.Rule{{Name: "r", Average: 10, Period: "1m", Concurrency: &config.Concurrency{Max: 2, Name: "y"}, Quotas: []config.Quota{{Name: "x", Limit: 5, Window: "day"}}}}
		}},
	} {
		cfg := CreateConfig()
		cfg.Average, cfg.Period = 10, "1m"
		cfg.PlanHeader = "X-Plan"
		tc.mutate(cfg)
		if _, err := New(nil, http.NotFoundHandler(), cfg, "api"); err == nil || !strings.Contains(err.Error(), "used twice") {
			t.Errorf("%s named alike: %v, want a name used twice", tc.desc, err)
		}
	}
}

func TestReviewConcTombstoneKeyOfAnotherType(t *testing.T) {
	// A key of another type at }c}r must not stop tombstones: a take
	// given back before it ran holds no slot.
	addr := redistest.Start(t)
	h := capHandler(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {}), config.Concurrency{Max: 1, Key: "class"}, nil)
	set := h.top
	keys := capKeysOf(h, set, httptest.NewRequest("GET", "/", nil), "unused")
	zkey := keys[0] + set.ps[0].KeySuffix
	redistest.Do(t, addr, "SET", zkey+"}r", "garbage")
	member := newMember()
	returnSlots(h, set, capCall(set, keys, member))
	settle(t, h)
	d := make([]int64, set.decisionLen)
	if err := h.be.rc.Check(set.cmd, capCall(set, keys, member), d, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := slots(t, addr, zkey); n != "0" {
		t.Fatalf("the late take holds %s slots, want 0 (its give-back came first)", n)
	}
	if rec := serve(h, "k"); rec.Code != http.StatusOK {
		t.Fatalf("next request: %d", rec.Code)
	}
}

func TestReviewConcCachedRefusalNamesNoFullCap(t *testing.T) {
	// A refusal by a rate and a full cap at once is remembered for the
	// rate's wait; the cap, whose slot may free at any moment, is not
	// named from the cache.
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 1}, func(c *config.Config) { c.Average, c.Period, c.Burst = 1, "1m", 1 })
	_, done := burst(h, g, 1, func(int) string { return "k" })
	waitArrived(t, g, 1)
	if rec := serve(h, "k"); rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "-concurrency") {
		t.Fatalf("rate spent and cap full: %d %s, want both named", rec.Code, rec.Body.String())
	}
	close(g.open)
	done.Wait()
	settle(t, h)
	rec := serve(h, "k")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-Decision") != "cache" {
		t.Fatalf("%d by %q, want 429 from the deny cache", rec.Code, rec.Header().Get("X-Decision"))
	}
	if b := rec.Body.String(); strings.Contains(b, "-concurrency") {
		t.Errorf("a cached refusal names the cap, whose slot is free: %s", b)
	}
	if rl := rec.Header().Get("RateLimit"); strings.Contains(rl, "-concurrency\";r=0;t=1") {
		t.Errorf("RateLimit %q: the cap shown full from the cache", rl)
	}
}

func TestReviewConcHeaderModesShowNoMember(t *testing.T) {
	// The cap's third number is its slot's member: no header shows it
	// as a time.
	addr := redistest.Start(t)
	for _, mode := range []string{"legacy", "draft07", "both", "ietf"} {
		h := capHandler(t, addr, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {}), config.Concurrency{Max: 3}, func(c *config.Config) {
			c.Average, c.Period, c.Burst = 100, "1m", 100
			c.Headers = mode
		})
		for i := 0; i < 3; i++ {
			rec := serve(h, "k")
			for k, v := range rec.Header() {
				for _, s := range v {
					for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
						if len(f) > 6 {
							t.Errorf("%s: %s: %q shows %s", mode, k, s, f)
						}
					}
				}
			}
			settle(t, h)
		}
	}
}

// usageGate is g that answers with a response cost.
type usageGate struct{ *gate }

func (u usageGate) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	rw.Header().Set("X-Usage-Tokens", "3")
	u.gate.ServeHTTP(rw, req)
}

func TestReviewConcNoSlotOutlivesItsRequest(t *testing.T) {
	// A slot taken is given back whatever else the set decided: shadow
	// policies beside caps (either way), quotas, response costs, another
	// policy's refusal. 5 requests of one client at once.
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc              string
		admitted, refused int
		cost              bool
		mutate            func(*config.Config)
	}{
		{"shadow top level with its cap", 5, 0, false, func(c *config.Config) {
			c.Average, c.Burst, c.Shadow = 1, 1, true
			c.Concurrency = &config.Concurrency{Max: 1}
		}},
		{"shadow rule beside a capped top level", 2, 3, false, func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 2}
			c.Rules = []config.Rule{{Name: "r", Average: 1, Burst: 1, Shadow: "true"}}
		}},
		{"capped shadow top level, capped enforcing rule", 2, 3, false, func(c *config.Config) {
			c.Shadow = true
			c.Concurrency = &config.Concurrency{Max: 1}
			c.Rules = []config.Rule{{Name: "r", Average: 100, Burst: 100, Shadow: "false", Concurrency: &config.Concurrency{Max: 2}}}
		}},
		{"shadow cap alone, enforcing rule", 1, 4, false, func(c *config.Config) {
			c.Average, c.Shadow = 0, true
			c.Concurrency = &config.Concurrency{Max: 1, Key: "class"}
			c.Rules = []config.Rule{{Name: "r", Average: 1, Burst: 1, Shadow: "false"}}
		}},
		{"a quota refuses", 2, 3, false, func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 5}
			c.Quotas = []config.Quota{{Name: "daily", Limit: 2, Window: "day"}}
		}},
		{"a rule refuses", 1, 4, false, func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 3, Key: "class"}
			c.Rules = []config.Rule{{Name: "r", Average: 1, Burst: 1}}
		}},
		{"response cost", 2, 3, true, func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 2}
			c.ResponseCost = &config.ResponseCost{Header: "X-Usage-Tokens", Max: 100}
		}},
		{"a plan inherits the cap, a rule keyed by IP has one", 1, 4, false, func(c *config.Config) {
			c.Concurrency = &config.Concurrency{Max: 3, Key: "class"}
			c.PlanHeader, c.DefaultPlan = "X-Plan", "free"
			c.Plans = []config.Plan{{Name: "free", Average: 100, Period: "1m", Burst: 100}}
			c.Rules = []config.Rule{{Name: "ip", Average: 100, Burst: 100, SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 0}}, Concurrency: &config.Concurrency{Max: 1}}}
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			g := newGate()
			var next http.Handler = g
			if tc.cost {
				next = usageGate{g}
			}
			h := capHandler(t, addr, next, config.Concurrency{}, func(c *config.Config) {
				c.Average, c.Period, c.Burst = 100, "1m", 100
				c.Concurrency = nil
				tc.mutate(c)
			})
			recs, done := burst(h, g, 5, func(int) string { return "k" })
			waitArrived(t, g, tc.admitted)
			waitRefused(t, recs, tc.refused)
			if m := atomic.LoadInt64(&g.most); m != int64(tc.admitted) {
				t.Errorf("the backend held %d at once, want %d", m, tc.admitted)
			}
			close(g.open)
			done.Wait()
			settle(t, h)
			if left := capKeys(t, addr); len(left) != 0 {
				t.Errorf("slots held after every request ended: %v", left)
			}
			for _, p := range h.conf.Policies() {
				if p.Cap != nil && atomic.LoadInt64(&p.Metrics.InFlight) != 0 {
					t.Errorf("%s: in-flight gauge %d after the requests ended", p.Name, atomic.LoadInt64(&p.Metrics.InFlight))
				}
			}
		})
	}
}

func TestReviewConcPausedRedisHoldsNoGhostSlots(t *testing.T) {
	// Takes that time out (Redis paused past timeout) are decided
	// locally and given back in Redis at once: when Redis answers again,
	// no slot is held, whichever of a take and its give-back runs first.
	addr := redistest.Start(t)
	g := newGate()
	h := capHandler(t, addr, g, config.Concurrency{Max: 4, Key: "class", MaxDuration: "1h"}, func(c *config.Config) { c.Redis.Timeout = "50ms" })
	// The pool dialled: a take and its give-back.
	set := h.top
	keys := capKeysOf(h, set, httptest.NewRequest("GET", "/", nil), "unused")
	d := make([]int64, set.decisionLen)
	member := newMember()
	if err := h.be.rc.Check(set.cmd, capCall(set, keys, member), d, time.Second); err != nil || d[0] != 1 {
		t.Fatalf("warming: %v %v", err, d)
	}
	returnSlots(h, set, capCall(set, keys, member))
	settle(t, h)
	redistest.Do(t, addr, "CLIENT", "PAUSE", "400", "ALL")
	recs, done := burst(h, g, 3, func(i int) string { return fmt.Sprint("c", i) })
	waitArrived(t, g, 3)
	close(g.open)
	done.Wait()
	for _, r := range recs {
		if r.Code != http.StatusOK || r.Header().Get("X-Decision") != "local" {
			t.Errorf("while Redis was paused: %d by %q, want 200 by local", r.Code, r.Header().Get("X-Decision"))
		}
	}
	settle(t, h)
	zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
	redistest.WaitFor(t, func() bool { return slots(t, addr, zkey) == "0" }, "no slot held")
	if n := atomic.LoadInt64(&h.conf.TopQuotas[0].Metrics.HeldLost); n != 0 {
		t.Errorf("%d give-backs lost", n)
	}
	if n := localHeld(h); n != 0 {
		t.Errorf("local slots of %d keys held", n)
	}
}

func TestReviewConcSlotKeyOfAnotherType(t *testing.T) {
	// A key of another type where a cap's slots live neither fails every
	// check nor lets everyone through: it is replaced, and the cap holds.
	addr := redistest.Start(t)
	for _, typ := range [][]string{{"SET", "x"}, {"HSET", "f", "v"}, {"RPUSH", "x"}} {
		g := newGate()
		h := capHandler(t, addr, g, config.Concurrency{Max: 2, Key: "class"}, nil)
		zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
		redistest.Do(t, addr, append([]string{typ[0], zkey}, typ[1:]...)...)
		recs, done := burst(h, g, 5, func(i int) string { return fmt.Sprint("c", i) })
		waitArrived(t, g, 2)
		waitRefused(t, recs, 3)
		if n := slots(t, addr, zkey); n != "2" {
			t.Errorf("%s at the slots' key: %s slots held, want 2", typ[0], n)
		}
		close(g.open)
		done.Wait()
		settle(t, h)
		if n := slots(t, addr, zkey); n != "0" {
			t.Errorf("%s at the slots' key: %s slots held after, want 0", typ[0], n)
		}
	}
}
