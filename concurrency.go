package tollgate

// Concurrency caps (Config.Concurrency): at most max requests in flight
// across every replica, per client or per owner as a whole.
//
// A cap is one more policy of its owner's sets (after the owner's
// quotas), charged in the same script call as the rates, all or nothing:
// its key is a sorted set of slots, <client or class key><owner
// suffix>}c, each slot a member scored by its deadline (Redis's TIME +
// maxDuration), swept by every take, so that a pod that dies holding
// slots holds them at most maxDuration. The member is the pod's own
// (18 digits: a random start to the process, then a counter), written into
// the call after the key (key#member), so that a pod gives back a slot
// whose take's reply it never read. A give-back (the charge script's)
// removes the member or, when the take has not run yet, leaves a
// tombstone (}c}r) that the take honours; it is sent when next returns,
// before the handler does (giveNow), and queued on costs.go's queue when
// Redis does not take it then. A set with a cap is called whole
// (redis.Command.Whole): the caller writes every key.
//
// Redis unavailable, each pod caps the key itself at max over the pods
// counted (at least 1), in its local store; failureMode closed answers
// 503 as for rates.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// concShape is a compiled Concurrency.
type concShape struct {
	max   int64
	class string // the owner's class key (key: class): tg{c:<class>}; "" per client
	durUS int64  // maxDuration, µs
}

const (
	maxConcurrency     = 1000000
	defaultMaxDuration = 60 * time.Second
	maxHoldDuration    = 24 * time.Hour
	memberLen          = 18 // heldBase's digits
	// concRetryMS is a full cap's wait: slots free as requests end, so a
	// client is told to come back in a second (Retry-After: 1).
	concRetryMS = 1000
)

// compileConcurrency compiles c, owned by owner (nil: the top level
// without a rate, failClosed and shadow given), named field in errors:
// its name (default: ownerName for a cap alone, else ownerName +
// "-concurrency") may not be one of names.
func compileConcurrency(field string, c *Concurrency, owner *policy, class, ownerName, suffix string, failClosed, shadow bool, names map[string]bool) (*policy, error) {
	if c.Max <= 0 || c.Max > maxConcurrency {
		return nil, fmt.Errorf("%s.max: %d must be from 1 to %d", field, c.Max, maxConcurrency)
	}
	shape := &concShape{max: c.Max, durUS: int64(defaultMaxDuration / time.Microsecond)}
	switch strings.ToLower(strings.TrimSpace(c.Key)) {
	case "", "client":
	case "class":
		shape.class = keyPrefix + "c:" + class + "}"
	default:
		return nil, fmt.Errorf("%s.key: %q is not client or class", field, c.Key)
	}
	if strings.TrimSpace(c.MaxDuration) != "" {
		d, err := positiveDuration(field+".maxDuration", c.MaxDuration)
		if err != nil {
			return nil, err
		}
		if d > maxHoldDuration || d < time.Millisecond {
			return nil, fmt.Errorf("%s.maxDuration: %q must be from 1ms to %s", field, c.MaxDuration, maxHoldDuration)
		}
		shape.durUS = int64(d / time.Microsecond)
	}
	name := c.Name
	if name == "" {
		name = ownerName
		if owner != nil {
			name += "-concurrency"
		}
	}
	if err := checkName(field+".name", name); err != nil {
		return nil, err
	}
	if names[name] && (owner != nil || name != class) || owner != nil && owner.name == name { // a cap alone may take the class's name
		return nil, fmt.Errorf("%s.name: %q is used twice (caps, quotas, plans, rules and the class share one namespace)", field, name)
	}
	var source *sourceCriterion
	if owner != nil {
		failClosed, shadow, source = owner.failClosed, owner.shadow, owner.source
	}
	p := &policy{
		name:       name,
		keySuffix:  suffix + "}c",
		lim:        limit{interval: 1e-3, burst: float64(c.Max), cost: 1},
		average:    c.Max,
		periodSecs: 1,
		failClosed: failClosed,
		shadow:     shadow,
		source:     source,
		conc:       shape,
	}
	p.shard = p.lim
	return p, nil
}

// compileAllConcurrency compiles the caps of the top level, the plans
// (unset: the top level's) and the rules into s, each after its owner's
// quotas.
func compileAllConcurrency(cfg *Config, s *settings, topClosed bool) error {
	if !hasAnyConcurrency(cfg) {
		return nil
	}
	switch {
	case s.shards > 1:
		return errors.New("concurrency: not with shards (a client's slots are one sorted set)")
	case cfg.Region != nil:
		return errors.New("concurrency: not with regions (each region's Redis would count its own slots)")
	}
	taken := map[string]bool{s.class: true}
	for _, p := range s.policies() {
		taken[p.name] = true
	}
	for n := range s.planIndex {
		taken[n] = true
	}
	var topCap *policy
	if c := cfg.Concurrency; c != nil {
		p, err := compileConcurrency("concurrency", c, s.top, s.class, s.class, "", topClosed, cfg.Shadow, taken)
		if err != nil {
			return err
		}
		taken[p.name] = true
		s.topQuotas = append(s.topQuotas, p)
		topCap = p
	}
	if s.planQuotas == nil {
		s.planQuotas = make([][]*policy, len(s.plans))
	}
	var planCaps []string
	for i, pl := range cfg.Plans {
		field, c := fmt.Sprintf("plans[%d].concurrency", i), pl.Concurrency
		if c == nil {
			field, c = "concurrency", cfg.Concurrency // the top level's, counted per plan
		}
		owner := s.plans[i]
		if c == nil || owner == nil {
			if owner == nil && pl.Concurrency != nil {
				return fmt.Errorf("%s: the plan is unlimited, its cap would limit nothing: set average, or no concurrency", field)
			}
			continue
		}
		own := map[string]bool{}
		for n := range taken {
			own[n] = true
		}
		for _, q := range s.planQuotas[i] {
			own[q.name] = true
		}
		suffix := owner.keySuffix
		if pl.Concurrency == nil && topCap != nil {
			// The top level's cap, counted for the plan's clients as for
			// everyone else's: its name, its slots.
			inherited := *c
			inherited.Name = topCap.name
			c, suffix = &inherited, ""
			delete(own, topCap.name)
		}
		p, err := compileConcurrency(field, c, owner, s.class, owner.name, suffix, false, false, own)
		if err != nil {
			return err
		}
		s.planQuotas[i] = append(s.planQuotas[i], p)
		planCaps = append(planCaps, p.name)
	}
	for _, n := range planCaps { // a rule's cap may share a set with a plan's
		taken[n] = true
	}
	if s.ruleQuotas == nil {
		s.ruleQuotas = make([][]*policy, len(s.rules))
	}
	for i, r := range s.rules {
		c := cfg.Rules[i].Concurrency
		if c == nil {
			continue
		}
		p, err := compileConcurrency(fmt.Sprintf("rules[%d].concurrency", i), c, r, s.class, r.name, r.keySuffix, false, false, taken)
		if err != nil {
			return err
		}
		taken[p.name] = true
		s.ruleQuotas[i] = append(s.ruleQuotas[i], p)
	}
	return nil
}

// checkConcurrency refuses caps that a Redis Cluster cannot take in one
// script: a class's (its key is in another slot than its clients') and
// any beside rules keyed their own way (charged group by group).
func checkConcurrency(s *settings) error {
	if s.redis.mode != redis.Cluster {
		return nil
	}
	for _, p := range s.policies() {
		if p.conc == nil {
			continue
		}
		if p.conc.class != "" {
			return fmt.Errorf("concurrency (%s): key class is not for a Redis Cluster (the class's slots and its clients' buckets live in different slots): use key client, or a standalone or Sentinel Redis", p.name)
		}
		if s.ownKeys {
			return fmt.Errorf("concurrency (%s): not beside rules keyed their own way in a Redis Cluster (their buckets are charged in calls of their own)", p.name)
		}
	}
	return nil
}

// hasAnyConcurrency reports whether cfg sets a cap anywhere.
func hasAnyConcurrency(cfg *Config) bool {
	if cfg.Concurrency != nil {
		return true
	}
	for _, p := range cfg.Plans {
		if p.Concurrency != nil {
			return true
		}
	}
	for _, r := range cfg.Rules {
		if r.Concurrency != nil {
			return true
		}
	}
	return false
}

// capped reports whether s has a concurrency cap.
func (s *settings) capped() bool {
	for _, p := range s.policies() {
		if p.conc != nil {
			return true
		}
	}
	return false
}

// heldBase and heldSeq make this process's slot members: 18 digits, a
// random start to the process, then a counter. Two pods' members meet
// only when their starts lie closer than the requests they count (pods
// behind one balancer count alike: a start drawn from a few digits, the
// counter beside it, would have them share every slot and give back each
// other's), and a restarted pod never gives back another's slot.
var (
	heldBase = newHeldBase()
	heldSeq  int64
)

// newHeldBase returns heldBase: at random from 1e17 to 1e18 - 1e12 (its
// counter's 1e12 members stay 18 digits).
func newHeldBase() int64 {
	const span = 900000000000000000 - 1000000000000
	b := make([]byte, 8)
	var n int64
	if _, err := rand.Read(b); err == nil {
		n = int64(binary.BigEndian.Uint64(b) % span)
	} else {
		n = mrand.Int63n(span) // seeded at random by the runtime
	}
	return 100000000000000000 + n
}

// newMember returns a new slot member of this process.
func newMember() string {
	return strconv.FormatInt(heldBase+atomic.AddInt64(&heldSeq, 1)%1000000000000, 10)
}

// heldKeys returns each policy's key for a request over set (a set with
// a cap) of client key: a class cap's class key, a rule keyed its own
// way its own client key, else key. A cap's slots are its key and its
// suffix.
func heldKeys(t *Tollgate, set *policySet, req *http.Request, key string) []string {
	var keys []string
	if set.ownKeys {
		keys = clientKeys(t, set, req, key)
	} else {
		keys = make([]string, len(set.ps))
		for i := range keys {
			keys[i] = key
		}
	}
	for i, p := range set.ps {
		if p.conc != nil && p.conc.class != "" {
			keys[i] = p.conc.class
		}
	}
	return keys
}

// heldCall writes the call of set's keys for member: each key, a cap's
// followed by #member, joined by set.joints.
func heldCall(set *policySet, keys []string, member string) string {
	b := make([]byte, 0, 48*len(keys))
	for i, p := range set.ps {
		if i > 0 {
			b = append(b, set.joints[i-1]...)
		}
		b = append(b, keys[i]...)
		if p.conc != nil {
			b = append(append(b, '#'), member...)
		}
	}
	return string(b)
}

// callHeld is decideAny's Redis call over set, a set with a cap (key: the
// client key, call: the deny cache's key, cmd: the set's call now). A
// call that may have reached Redis and failed has its slots given back.
func callHeld(t *Tollgate, set *policySet, req *http.Request, key, call string, cmd *redis.Command, d []int64) int {
	hc := heldCall(set, heldKeys(t, set, req, key), newMember())
	if err := redisCheck(t.be, cmd, hc, d, &t.set.redis, t.hb); err != nil {
		if tookMaybe(err) {
			returnSlots(t, set, hc) // the script may run yet: a tombstone refuses it
		}
		if set.ownKeys {
			return fallbackOwn(t, set, req, key, d)
		}
		return fallback(t, set, key, d)
	}
	if d[0] != 1 {
		set.denied.remember(call, d)
	}
	return decidedRedis
}

// tookMaybe reports whether a check that failed with err may have run in
// Redis (its call was written).
func tookMaybe(err error) bool {
	return err != errBreakerOpen && err != redis.ErrDialFailed && err != redis.ErrNoRoute && err != redis.ErrQueueFull
}

// serveNext calls next for a request admitted over set: the slots of
// held's caps (decision hd, decided hhow; held nil: none) held while it
// runs and given back when it returns, panics included; its response's
// cost charged after it.
func (t *Tollgate) serveNext(rw http.ResponseWriter, req *http.Request, set, held *policySet, hd []int64, hhow int) {
	var keys []string
	if set.costed {
		keys = chargeKeys(t, req, set) // before next, which may change req (a middleware that strips the key)
	}
	if held != nil && held.held && (hhow == decidedRedis || hhow == decidedLocal) {
		hk := heldKeys(t, held, req, clientKey(t.set.class, t.set.source.identity(req)))
		for _, p := range held.ps {
			if p.conc != nil {
				atomic.AddInt64(&p.m.InFlight, 1)
			}
		}
		defer release(t, held, hk, "", hd, hhow)
	}
	t.next.ServeHTTP(rw, req)
	if keys != nil {
		t.chargeResponse(rw, set, keys)
	}
}

// release gives back the slots of a request admitted over set (keys:
// heldKeys, decision d, decided how): to the local store, or queued for
// Redis.
func release(t *Tollgate, set *policySet, keys []string, call string, d []int64, how int) {
	for _, p := range set.ps {
		if p.conc != nil {
			atomic.AddInt64(&p.m.InFlight, -1)
		}
	}
	if how == decidedLocal {
		for i, p := range set.ps {
			if p.conc != nil {
				t.local.unhold(keys[i] + p.keySuffix)
			}
		}
		return
	}
	// Sent now, before the handler returns, while the client has not
	// yet got the whole response (its last bytes are flushed when the
	// handler returns): a client that sends its next request once the
	// last ended finds the slot free. One round trip after next,
	// pipelined; queued and tried again when Redis does not take it in
	// time (a second give-back is harmless).
	if call == "" {
		for i, p := range set.ps {
			if p.conc != nil {
				call = heldCall(set, keys, strconv.FormatInt(d[3+3*i], 10)) // the take's member
				break
			}
		}
	}
	if t.be.rc.Check(set.give, call, make([]int64, 1), t.set.redis.timeout) != nil {
		returnSlots(t, set, call)
	}
}

// returnSlots queues the give-back of set's slots named by the take's
// call (heldCall) on the backend's charge queue, sent off the request's
// path.
func returnSlots(t *Tollgate, set *policySet, call string) {
	for _, p := range set.ps {
		if p.conc != nil {
			chargesOf(t.be).add(&charge{give: set.give, call: call, held: p.m})
			return
		}
	}
}

// giveScript gives back the slots of a take's call: its keys and args
// are the take's (heldCall, bucketScript), and each cap's key names its
// member (tg{..}#member...): the member is removed from the cap's set,
// or, when its take has not run yet, left as a tombstone the take
// honours, kept maxDuration and a second (a tombstone key of another
// type is replaced: the take honours no other). The set's rates and
// quotas (keys without a member) are left alone.
const giveScript = `
for i = 1, #KEYS do
  local ck, mem, rest = string.match(KEYS[i], '^([^}]*})#(%d+)(.*)$')
  if ck then
    ck = ck .. rest
    if redis.pcall('ZREM', ck, mem) ~= 1 then
      local rk = ck .. '}r'
      if type(redis.pcall('SADD', rk, mem)) ~= 'number' then
        redis.call('DEL', rk)
        redis.call('SADD', rk, mem)
      end
      redis.pcall('PEXPIRE', rk, math.ceil(tonumber(ARGV[3*i]) / 1000) + 1000)
    end
  end
end
return redis.status_reply('1')
`

// giveScr is giveScript's prepared form.
var giveScr = redis.NewScript(giveScript)
