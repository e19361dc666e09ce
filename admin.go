package tollgate

// Operators' controls (docs/admin.md): a serveAdmin middleware shows a
// client key's state, refills it, and sets per-key overrides of its
// class's top-level rate, kept in Redis so that every pod honours them.
//
// What a class's pods share, in two Redis hashes per class beside its
// heartbeat (one slot), by client key k:
//
//	tg{hb:<class>}adm   o:<k>  an override: "average burst periodNS expiresMS" (config.EncodeOverride)
//	                    v      the overrides' version, counted up by every change of them
//	tg{hb:<class>}admr  <k>    the key's latest reset, Unix ms (kept resetKeep)
//
// Each pod reads the version and the resets at most every adminSync
// (the overrides only when their version changed), when requests of the
// class come, on a goroutine of its own: the request goes on, unless the
// last read is over adminStale old (the class was idle), when it waits for
// the read, at most twice the Redis timeout, so that no request is decided
// on older state while Redis answers (the first requests after an idle
// spell wait one round trip; after a failed read, none waits). Overrides are replaced as a whole, and
// a reset newer than the last seen drops the key's refusals from the deny
// caches and its leases. A class syncs once an admin middleware of this
// process names it, or once its heartbeat finds the hash in Redis; until
// then a request pays one atomic load for it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

const (
	// adminSync is how often a pod reads its classes' overrides and
	// resets while requests come; adminStale is the oldest read a request
	// is decided on (see above): a change is honoured by every pod within
	// it, plus a round trip.
	adminSync  = 300 * time.Millisecond
	adminStale = 700 * time.Millisecond
	// maxAdminStates bounds the classes the process keeps admin state for.
	maxAdminStates = 4096
	// maxAdminKey bounds a key given to the admin endpoint.
	maxAdminKey = 4096
	// resetKeep is how long a reset stays in the hash for pods to see.
	resetKeep = 60 * time.Second
)

// classAdmin is one class's admin state in this process.
type classAdmin struct {
	class   string
	on      int32         // atomic: the class syncs (an admin middleware names it, or Redis holds its hashes)
	fresh   int64         // atomic: monotonic ns when the last sync that read Redis began
	started int64         // atomic: monotonic ns when the last sync began
	failed  int32         // atomic: the last sync failed (requests do not wait for the next)
	syncs   int64         // atomic: syncs that read Redis
	running chan struct{} // closed when the running sync ends; nil: none runs (guarded by mu)

	n    int64        // atomic: overrides in over
	over atomic.Value // map[string]config.Override by client key, replaced whole

	version string // the overrides' version read last (sync only)
	loaded  bool   // the overrides were read once (sync only)
	expiry  int64  // the first expiry of over, Unix ms on Redis's clock; 0: none (sync only)

	mu      sync.Mutex
	members []adminMember     // the class's limiters, newest last (join)
	resets  map[string]string // the resets applied, by field (sync only)
}

// adminMember is a limiter of a class (a *Tollgate: held as an interface,
// since Yaegi mistakes the types of two structs that point at each other)
// and when New built it (monotonic ns).
type adminMember struct {
	t  interface{}
	at int64
}

// memberWindow and maxMembers bound the limiters a class keeps: Traefik
// builds every middleware of a configuration at once (a router each,
// several of one name), so those built more than memberWindow before the
// newest belong to configurations replaced since.
const (
	memberWindow = int64(time.Minute)
	maxMembers   = 256
)

// admins is the process's admin state, by class (bounded).
type admins struct {
	mu      sync.Mutex
	byClass map[string]*classAdmin
}

// forClass returns class's admin state, made on first use.
func (a *admins) forClass(class string) *classAdmin {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.byClass[class]; s != nil {
		return s
	}
	if a.byClass == nil || len(a.byClass) >= maxAdminStates {
		a.byClass = make(map[string]*classAdmin) // forgotten: their limiters keep theirs
	}
	s := &classAdmin{class: class, resets: map[string]string{}}
	s.over.Store(map[string]config.Override{})
	a.byClass[class] = s
	return s
}

// join registers t, a limiter of class a built at now.
func (a *classAdmin) join(t *Tollgate, now int64) {
	a.mu.Lock()
	keep := a.members[:0]
	for _, m := range a.members {
		if now-m.at < memberWindow {
			keep = append(keep, m)
		}
	}
	for i := len(keep); i < len(a.members); i++ {
		a.members[i] = adminMember{} // not kept alive by the array
	}
	if len(keep) >= maxMembers {
		keep = append(keep[:0], keep[1:]...)
	}
	a.members = append(keep, adminMember{t: t, at: now})
	a.mu.Unlock()
}

// latest returns the class's newest limiter (the one the endpoint reads
// the policies of), or nil.
func (a *classAdmin) latest() *Tollgate {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.members) == 0 {
		return nil
	}
	t, _ := a.members[len(a.members)-1].t.(*Tollgate)
	return t
}

// adminKey and resetsKey name a class's hashes (see the top of the file).
func adminKey(class string) string  { return "tg{hb:" + class + "}adm" }
func resetsKey(class string) string { return "tg{hb:" + class + "}admr" }

// serveOverridden is ServeHTTP's first step for a class that syncs: the
// class's state brought up to date (refresh), and the request served
// under its key's override when it has one (true).
func serveOverridden(t *Tollgate, rw http.ResponseWriter, req *http.Request) bool {
	a := t.adm
	if now := t.be.now(); now-atomic.LoadInt64(&a.fresh) >= int64(adminSync) {
		a.refresh(t, now)
	}
	if atomic.LoadInt64(&a.n) == 0 || t.top == nil {
		return false
	}
	key := bucket.ClientKey(t.conf.Class, identity(&t.conf.Source, req))
	o, ok := a.over.Load().(map[string]config.Override)[key] // those expired are gone at the next sync
	if !ok {
		return false
	}
	set := t.overrideSet(o)
	if set == nil {
		return false
	}
	d := make([]int64, set.decisionLen)
	how := decide(t, set, req, rw, d)
	if how != decidedAnswered {
		t.answer(rw, req, set, d, how)
	}
	return true
}

// refresh starts a sync of a, unless one runs or began within adminSync
// of now, and waits for the running one, at most twice the Redis
// timeout, when a's state is over adminStale old and the last sync did
// not fail (see the top of this file).
func (a *classAdmin) refresh(t *Tollgate, now int64) {
	be, max := t.be, t.conf.MaxOverrides
	a.mu.Lock()
	done := a.running
	if done == nil && now-atomic.LoadInt64(&a.started) >= int64(adminSync) {
		done = make(chan struct{})
		a.running = done
		atomic.StoreInt64(&a.started, now)
		go func() {
			a.sync(be, max, now)
			a.mu.Lock()
			a.running = nil
			a.mu.Unlock()
			close(done)
		}()
	}
	a.mu.Unlock()
	if done == nil || atomic.LoadInt32(&a.failed) != 0 || now-atomic.LoadInt64(&a.fresh) < int64(adminStale) {
		return
	}
	wait := time.NewTimer(2 * t.conf.Redis.Timeout)
	select {
	case <-done:
	case <-wait.C:
	}
	wait.Stop()
}

// overrideSet returns the policy set of t's top level under override o,
// prepared once per override (nil: o does not apply to this middleware).
func (t *Tollgate) overrideSet(o config.Override) *policySet {
	k := config.EncodeOverride(config.Override{Average: o.Average, Burst: o.Burst, Period: o.Period, ExpiresMS: 1})
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.overSets[k]; ok {
		return s
	}
	s := t.buildOverride(o)
	if t.overSets == nil || len(t.overSets) >= maxDenials {
		t.overSets = map[string]*policySet{}
	}
	t.overSets[k] = s
	return s
}

// buildOverride is overrideSet's set: the top level's policies, its first
// (a rate) replaced by o's.
func (t *Tollgate) buildOverride(o config.Override) *policySet {
	top := t.conf.TopPolicies()
	if len(top) == 0 || top[0].Kind != bucket.Rate {
		return nil
	}
	p, _, err := top[0].WithOverride(o)
	if err == nil {
		err = p.Split(t.conf.Shards)
	}
	if err != nil {
		log.Printf("tollgate: class %q: an override (%s) is not a limit: %v", t.conf.Class, config.EncodeOverride(o), err)
		return nil
	}
	ps := append([]*config.Policy{p}, top[1:]...)
	return t.prepared(withHeaders(newPolicySet(ps, t.conf.KeyLen), t.conf.Headers))
}

// sync reads the class's version and resets, and its overrides when
// their version changed (or drops those past their expiry): they replace
// the pod's (at most max, those expiring first kept), and its new resets
// drop the keys' refusals and leases.
func (a *classAdmin) sync(be *backend, max int64, began int64) {
	if !a.read(be, max) {
		atomic.StoreInt32(&a.failed, 1)
		return // the checks see Redis's faults; the overrides stay as they were
	}
	atomic.StoreInt64(&a.fresh, began)
	atomic.StoreInt32(&a.failed, 0)
	atomic.AddInt64(&a.syncs, 1)
}

// read is sync's exchange with Redis; false when it failed.
func (a *classAdmin) read(be *backend, max int64) bool {
	k, rk := adminKey(a.class), resetsKey(a.class)
	b := redis.AppendCommand(redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGET", k, "v"), "HGETALL", rk)
	r, err := be.rc.SideDo(k, b, 3)
	if err != nil {
		return false
	}
	now, err := redisMS(r[0])
	if err != nil || len(r[1]) > 1 || len(r[2])%2 != 0 || len(r[2]) > 0 && strings.HasPrefix(r[2][0], "-") {
		return false
	}
	version := ""
	if len(r[1]) == 1 {
		version = r[1][0]
	}
	if version != a.version || !a.loaded {
		fields, _, err := adminRead(be, a.class)
		if err != nil {
			return false
		}
		over := map[string]config.Override{}
		for f, v := range fields {
			if strings.HasPrefix(f, "o:") {
				if o, err := config.DecodeOverride(v); err == nil && o.ExpiresMS > now {
					over[f[2:]] = o
				}
			}
		}
		a.version, a.loaded = version, true
		a.setOverrides(over, max)
	} else if a.expiry != 0 && now >= a.expiry {
		over := map[string]config.Override{}
		for key, o := range a.over.Load().(map[string]config.Override) {
			if o.ExpiresMS > now {
				over[key] = o
			}
		}
		a.setOverrides(over, max)
	}
	var resets []string
	seen := map[string]bool{}
	a.mu.Lock()
	for i := 0; i+1 < len(r[2]); i += 2 {
		f, v := r[2][i], r[2][i+1]
		seen[f] = true
		old, had := a.resets[f]
		a.resets[f] = v
		if had && old != v || !had && resetFresh(v, now) {
			resets = append(resets, f)
		}
	}
	for f := range a.resets {
		if !seen[f] {
			delete(a.resets, f)
		}
	}
	a.mu.Unlock()
	for _, key := range resets {
		a.forget(key)
	}
	return true
}

// setOverrides makes over (at most max of it) the class's overrides.
func (a *classAdmin) setOverrides(over map[string]config.Override, max int64) {
	if int64(len(over)) > max {
		over = keepFirstExpiring(over, max)
	}
	a.expiry = 0
	for _, o := range over {
		if a.expiry == 0 || o.ExpiresMS < a.expiry {
			a.expiry = o.ExpiresMS
		}
	}
	a.over.Store(over)
	atomic.StoreInt64(&a.n, int64(len(over)))
}

// resetFresh reports whether a reset stamped v (Unix ms) a pod that just
// started must still apply: one made within adminSync and a round trip.
func resetFresh(v string, now int64) bool {
	ms, err := strconv.ParseInt(v, 10, 64)
	return err == nil && now-ms < 2*adminSync.Milliseconds()+1000
}

// keepFirstExpiring keeps the max overrides of over that expire first.
func keepFirstExpiring(over map[string]config.Override, max int64) map[string]config.Override {
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return over[keys[i]].ExpiresMS < over[keys[j]].ExpiresMS })
	out := make(map[string]config.Override, max)
	for _, k := range keys[:max] {
		out[k] = over[k]
	}
	return out
}

// forget drops client key's refusals from every deny cache of the class's
// limiters and its leases: a reset takes effect at once.
func (a *classAdmin) forget(key string) {
	a.mu.Lock()
	var ts []*Tollgate
	for _, m := range a.members {
		if t, ok := m.t.(*Tollgate); ok {
			ts = append(ts, t)
		}
	}
	a.mu.Unlock()
	for _, t := range ts {
		for _, s := range t.allSets() {
			s.denied.forget(key)
			if ls := s.lease; ls != nil {
				tb := ls.table
				tb.mu.Lock()
				delete(tb.leases, ls.tag+key)
				atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
				tb.mu.Unlock()
			}
		}
	}
}

// allSets returns t's policy sets: the top level's, the rules' and plans'
// and the overrides'.
func (t *Tollgate) allSets() []*policySet {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*policySet
	if t.top != nil {
		out = append(out, t.top)
	}
	for _, s := range t.sets {
		if s != nil {
			out = append(out, s)
		}
	}
	for _, s := range t.overSets {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// adminRead returns the class's hash (HGETALL, bounded by the reply
// reader's limits) and Redis's TIME in Unix ms, which every expiry is
// measured on (the pods' clocks play no part).
func adminRead(be *backend, class string) (map[string]string, int64, error) {
	k := adminKey(class)
	r, err := be.rc.SideDo(k, redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGETALL", k), 2)
	if err != nil {
		return nil, 0, err
	}
	now, err := redisMS(r[0])
	v := r[1]
	if err != nil || len(v)%2 != 0 || len(v) > 0 && strings.HasPrefix(v[0], "-") {
		return nil, 0, redis.ErrBadReply
	}
	out := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		out[v[i]] = v[i+1]
	}
	return out, now, nil
}

// redisMS reads a TIME reply as Unix ms.
func redisMS(t []string) (int64, error) {
	if len(t) != 2 {
		return 0, redis.ErrBadReply
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil || sec < 0 || us < 0 || us >= 1000000 {
		return 0, redis.ErrBadReply
	}
	return sec*1000 + us/1000, nil
}

// expiresAt formats an override's expiry (Unix ms) for the endpoint.
func expiresAt(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// adminHandler is a serveAdmin middleware.
type adminHandler struct {
	classes map[string]bool
	changes *int64 // tollgate_admin_changes_total
}

func adminEndpoint(cfg *config.Config) (*adminHandler, error) {
	classes, err := config.CompileAdmin(cfg)
	if err != nil {
		return nil, err
	}
	h := &adminHandler{classes: map[string]bool{}, changes: &shared.adminChanges}
	for _, c := range classes {
		h.classes[c] = true
		atomic.StoreInt32(&shared.admins.forClass(c).on, 1)
	}
	return h, nil
}

// adminProblem is an RFC 9457 answer of the admin endpoint.
type adminProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
}

func adminFail(rw http.ResponseWriter, status int, field, detail string) {
	b, _ := json.Marshal(adminProblem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Field: field})
	rw.Header().Set("Content-Type", "application/problem+json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_, _ = rw.Write(append(b, '\n'))
}

func (h *adminHandler) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	class := q.Get("class")
	switch {
	case req.Method != http.MethodGet && req.Method != http.MethodDelete && req.Method != http.MethodPut:
		rw.Header().Set("Allow", "GET, PUT, DELETE")
		adminFail(rw, http.StatusMethodNotAllowed, "", req.Method+": the admin endpoint answers GET, PUT and DELETE")
		return
	case class == "":
		adminFail(rw, http.StatusBadRequest, "class", "the class query parameter is required")
		return
	case !h.classes[class]:
		adminFail(rw, http.StatusBadRequest, "class", fmt.Sprintf("class %.64q is not one of this endpoint's adminClasses", class))
		return
	}
	keys := q["key"]
	for _, k := range keys {
		if k == "" || len(k) > maxAdminKey {
			keys = nil
		}
	}
	if len(keys) == 0 {
		adminFail(rw, http.StatusBadRequest, "key", fmt.Sprintf("the key query parameter is required: the identity as clients send it (1 to %d bytes)", maxAdminKey))
		return
	}
	a := shared.admins.forClass(class)
	t := a.latest()
	if t == nil || t.top == nil {
		adminFail(rw, http.StatusBadRequest, "class", fmt.Sprintf("class %.64q has no middleware with a top-level limit in this Traefik", class))
		return
	}
	key, err := adminClientKey(t.conf, keys)
	if err != nil {
		adminFail(rw, http.StatusBadRequest, "key", err.Error())
		return
	}
	switch req.Method {
	case http.MethodGet:
		h.inspect(rw, t, a, keys, key)
	case http.MethodDelete:
		h.reset(rw, req, t, a, key, q.Get("policy"), q.Get("override") != "")
	case http.MethodPut:
		h.override(rw, req, t, a, keys, key)
	}
}

// adminClientKey is the client key of the identity given (keys: one
// value, or one per header of a composite key), as the data path hashes
// a request that carries it.
func adminClientKey(c *config.Settings, keys []string) (string, error) {
	s := &c.Source
	req := &http.Request{Header: http.Header{}, RemoteAddr: keys[0]}
	switch {
	case len(s.Headers) > 0:
		if len(keys) != len(s.Headers) {
			return "", fmt.Errorf("the class is keyed by %d headers (%s): give one key parameter for each, in that order", len(s.Headers), strings.Join(s.Headers, ", "))
		}
		for i, hd := range s.Headers {
			req.Header[hd] = []string{keys[i]}
		}
	case len(keys) != 1:
		return "", errors.New("one key parameter: the class is keyed by one value")
	case s.Header != "":
		req.Header[s.Header] = keys
	case s.Host:
		req.Host = keys[0]
	default:
		if ip := parseAdminIP(keys[0]); ip == "" {
			return "", fmt.Errorf("%.64q is not an IP address (the class is keyed by the client IP)", keys[0])
		}
	}
	return bucket.ClientKey(c.Class, identity(s, req)), nil
}

func parseAdminIP(s string) string {
	if ip := net.ParseIP(strings.TrimSpace(s)); ip != nil {
		return ip.String()
	}
	return ""
}

// adminView is the endpoint's answer to GET (and PUT).
type adminView struct {
	Class       string            `json:"class"`
	Key         string            `json:"key"`
	Policies    []adminPolicy     `json:"policies"`
	Quotas      []adminQuota      `json:"quotas"`
	Concurrency *adminConcurrency `json:"concurrency"`
}

type adminPolicy struct {
	Name      string         `json:"name"`
	Limit     int64          `json:"limit"`
	Window    int64          `json:"window"`
	Remaining int64          `json:"remaining"`
	Reset     int64          `json:"reset"`
	Override  *adminOverride `json:"override"`
}

type adminOverride struct {
	Average   int64  `json:"average"`
	Burst     int64  `json:"burst"`
	Period    string `json:"period"`
	ExpiresAt string `json:"expiresAt"`
}

type adminQuota struct {
	Name      string `json:"name"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	Reset     int64  `json:"reset"`
}

type adminConcurrency struct {
	Max      int64 `json:"max"`
	InFlight int64 `json:"inFlight"`
}

func (h *adminHandler) inspect(rw http.ResponseWriter, t *Tollgate, a *classAdmin, keys []string, key string) {
	v, err := adminPeek(t, key, strings.Join(keys, ","))
	if err != nil {
		adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
		return
	}
	b, _ := json.Marshal(v)
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(append(b, '\n'))
}

// adminPeek reads key's state on Redis's clock as the script would
// compute it, taking nothing: TIME, then each top-level policy's state
// (a rate's TAT, a quota's counter in its current window, a cap's slots
// held), the key's override, pipelined on the key's node.
func adminPeek(t *Tollgate, key, shown string) (*adminView, error) {
	ps := t.conf.TopPolicies()
	hk := adminKey(t.conf.Class)
	r, err := t.be.rc.SideDo(hk, redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGET", hk, "o:"+key), 2)
	if err != nil {
		return nil, err
	}
	rms, err := redisMS(r[0])
	if err != nil {
		return nil, err
	}
	var ov *config.Override
	if len(r[1]) == 1 {
		if o, err := config.DecodeOverride(r[1][0]); err == nil && o.ExpiresMS > rms {
			ov = &o
			if set := t.overrideSet(o); set != nil {
				ps = set.ps
			}
		}
	}
	now := quotaNow()
	v := &adminView{Class: t.conf.Class, Key: shown, Policies: []adminPolicy{}, Quotas: []adminQuota{}}
	left := make([]int64, len(ps))   // by policy: tokens (or quota) left, over the shards
	full := make([]float64, len(ps)) // by policy: µs until full, the longest of the shards
	for si, sk := range adminShardKeys(t.conf, key) {
		b := redis.AppendCommand(nil, "TIME")
		for _, p := range ps {
			k := sk + p.KeySuffix
			switch p.Kind {
			case kindQuota:
				w := quotaWindow(p.Quota, now)
				b = redis.AppendCommand(b, "GET", k+"@"+strconv.FormatInt(w[1]/1000000, 10)) // the script's window key
			case kindCap:
				ck := key
				if p.Cap.Class != "" {
					ck = p.Cap.Class
				}
				b = redis.AppendCommand(b, "ZCOUNT", ck+p.KeySuffix, "("+strconv.FormatInt(quotaUS(now), 10), "+inf") // slots not yet expired
			default:
				b = redis.AppendCommand(b, "GET", k)
			}
		}
		r, err := t.be.rc.SideDo(sk, b, 1+len(ps))
		if err != nil {
			return nil, err
		}
		ms, err := redisMS(r[0])
		if err != nil {
			return nil, err
		}
		us, _ := strconv.ParseInt(r[0][1], 10, 64)
		rnow := float64(ms/1000-bucket.EpochUS/1000000)*1e6 + float64(us) // µs since EpochUS, as the script reads TIME
		for i, p := range ps {
			val := ""
			if x := r[1+i]; len(x) == 1 && !strings.HasPrefix(x[0], "-") && len(x[0]) < 32 {
				val = x[0]
			}
			n, err := strconv.ParseFloat(val, 64)
			if err != nil || n != n || n < 0 {
				n = 0 // none (or not a number: the script would refuse it too)
			}
			switch p.Kind {
			case kindQuota:
				left[i] += int64(n)
			case kindCap:
				if si == 0 {
					left[i] = int64(n)
				}
			default:
				lim := p.Shard
				tat := n / 64
				if tat < rnow {
					tat = rnow
				}
				l := int64((rnow + lim.Interval*lim.Burst - tat) / lim.Interval)
				if l < 0 {
					l = 0
				}
				if l > int64(lim.Burst) {
					l = int64(lim.Burst)
				}
				left[i] += l
				if tat-rnow > full[i] {
					full[i] = tat - rnow
				}
			}
		}
	}
	for i, p := range ps {
		switch p.Kind {
		case kindQuota:
			w := quotaWindow(p.Quota, now)
			l := p.Quota.Limit - left[i]
			if l < 0 {
				l = 0
			}
			v.Quotas = append(v.Quotas, adminQuota{Name: p.Name, Limit: p.Quota.Limit, Remaining: l, Reset: ceilSecs((w[2] - quotaUS(now)) / 1000)})
		case kindCap:
			v.Concurrency = &adminConcurrency{Max: p.Cap.Max, InFlight: left[i]}
		default:
			ap := adminPolicy{Name: p.Name, Limit: int64(p.Lim.Burst), Window: p.PeriodSecs, Remaining: left[i], Reset: ceilSecs(int64(full[i]) / 1000)}
			if i == 0 && ov != nil {
				ap.Override = &adminOverride{Average: ov.Average, Burst: ov.Burst, Period: ov.Period.String(), ExpiresAt: expiresAt(ov.ExpiresMS)}
			}
			v.Policies = append(v.Policies, ap)
		}
	}
	return v, nil
}

// adminShardKeys returns the keys client key is charged under: itself, or
// each of its shards' (shardKey).
func adminShardKeys(c *config.Settings, key string) []string {
	if c.Shards <= 1 {
		return []string{key}
	}
	out := make([]string, c.Shards)
	for i := range out {
		n := strconv.Itoa(i)
		for len(n) < c.Digits {
			n = "0" + n
		}
		out[i] = key[:len(key)-1] + ":" + n + "}"
	}
	return out
}

// reset refills key's buckets (or policy's alone) and resets its quotas,
// or (override) drops its override; every pod drops its refusals and
// leases within adminSync.
func (h *adminHandler) reset(rw http.ResponseWriter, req *http.Request, t *Tollgate, a *classAdmin, key, policy string, override bool) {
	hk := adminKey(t.conf.Class)
	what := "reset"
	if override {
		what = "override removed"
		if _, err := t.be.rc.SideDo(hk, redis.AppendCommand(redis.AppendCommand(nil, "HDEL", hk, "o:"+key), "HINCRBY", hk, "v", "1"), 2); err != nil {
			adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
			return
		}
	} else {
		var ps []*config.Policy
		for _, p := range t.conf.TopPolicies() {
			if (policy == "" || p.Name == policy) && p.Kind != kindCap {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			adminFail(rw, http.StatusBadRequest, "policy", fmt.Sprintf("class %q has no top-level rate or quota %.64q", t.conf.Class, policy))
			return
		}
		if policy != "" {
			what = "reset of " + policy
		}
		now := quotaNow()
		for _, sk := range adminShardKeys(t.conf, key) {
			var b []byte
			for _, p := range ps {
				k := sk + p.KeySuffix
				if p.Kind == kindQuota {
					w := quotaWindow(p.Quota, now)
					b = redis.AppendCommand(b, "DEL", k+"@"+strconv.FormatInt(w[1]/1000000, 10))
				} else {
					b = redis.AppendCommand(b, "DEL", k, k+"}d")
				}
			}
			if _, err := t.be.rc.SideDo(sk, b, len(ps)); err != nil {
				adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
				return
			}
		}
	}
	if err := adminMark(t, key); err != nil {
		adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
		return
	}
	h.logChange(req, t.conf.Class, key, what)
	a.forget(key)
	rw.WriteHeader(http.StatusNoContent)
}

// adminMark records a reset of key (its time, which every pod's sync
// sees) and drops the resets older than resetKeep.
func adminMark(t *Tollgate, key string) error {
	rk := resetsKey(t.conf.Class)
	r, err := t.be.rc.SideDo(rk, redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGETALL", rk), 2)
	if err != nil {
		return err
	}
	now, err := redisMS(r[0])
	if err != nil || len(r[1])%2 != 0 {
		return redis.ErrBadReply
	}
	b := redis.AppendCommand(nil, "HSET", rk, key, strconv.FormatInt(now, 10))
	n := 1
	for i := 0; i+1 < len(r[1]); i += 2 {
		ms, err := strconv.ParseInt(r[1][i+1], 10, 64)
		if f := r[1][i]; f != key && (err != nil || now-ms > resetKeep.Milliseconds()) {
			b = redis.AppendCommand(b, "HDEL", rk, f)
			n++
		}
	}
	_, err = t.be.rc.SideDo(rk, b, n)
	return err
}

// sweepOverrides drops the class's overrides past their expiry (at now,
// Unix ms on Redis's clock) from its hash: pods ignore them, this keeps
// the hash from growing.
func sweepOverrides(t *Tollgate, now int64) error {
	hk := adminKey(t.conf.Class)
	fields, _, err := adminRead(t.be, t.conf.Class)
	if err != nil {
		return err
	}
	var b []byte
	n := 0
	for f, v := range fields {
		if strings.HasPrefix(f, "o:") {
			if o, err := config.DecodeOverride(v); err != nil || o.ExpiresMS <= now {
				b = redis.AppendCommand(b, "HDEL", hk, f)
				n++
			}
		}
	}
	if n == 0 {
		return nil
	}
	_, err = t.be.rc.SideDo(hk, b, n)
	return err
}

// override sets key's override from the request's JSON body.
func (h *adminHandler) override(rw http.ResponseWriter, req *http.Request, t *Tollgate, a *classAdmin, keys []string, key string) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 8192))
	if err != nil {
		adminFail(rw, http.StatusBadRequest, "body", "reading the body: "+err.Error())
		return
	}
	o, field, err := config.ParseOverride(body, 0)
	if err != nil {
		adminFail(rw, http.StatusBadRequest, field, err.Error())
		return
	}
	top := t.conf.TopPolicies()
	if len(top) == 0 || top[0].Kind != bucket.Rate {
		adminFail(rw, http.StatusBadRequest, "class", fmt.Sprintf("class %q has no top-level rate to override", t.conf.Class))
		return
	}
	if _, field, err := top[0].WithOverride(o); err != nil {
		adminFail(rw, http.StatusBadRequest, field, err.Error())
		return
	}
	hk := adminKey(t.conf.Class)
	r, err := t.be.rc.SideDo(hk, redis.AppendCommand(nil, "TIME"), 1)
	var rms int64
	if err == nil {
		rms, err = redisMS(r[0])
	}
	if err == nil {
		err = sweepOverrides(t, rms)
	}
	if err != nil {
		adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
		return
	}
	o.ExpiresMS += rms // ParseOverride's ttl, from Redis's TIME
	b := redis.AppendCommand(redis.AppendCommand(nil, "HSET", hk, "o:"+key, config.EncodeOverride(o)), "HINCRBY", hk, "v", "1")
	if _, err := t.be.rc.SideDo(hk, b, 2); err != nil {
		adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
		return
	}
	if err := adminMark(t, key); err != nil {
		adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
		return
	}
	for _, sk := range adminShardKeys(t.conf, key) { // the override starts full: "burst 50" gives the key 50 now
		k := sk + top[0].KeySuffix
		if _, err := t.be.rc.SideDo(sk, redis.AppendCommand(nil, "DEL", k, k+"}d"), 1); err != nil {
			adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
			return
		}
	}
	h.logChange(req, t.conf.Class, key, "override "+config.EncodeOverride(o))
	a.forget(key)
	h.inspect(rw, t, a, keys, key)
}

// logChange logs and counts a change: the class, the key's hash (never
// the key), what changed and who asked.
func (h *adminHandler) logChange(req *http.Request, class, key, what string) {
	atomic.AddInt64(h.changes, 1)
	log.Printf("tollgate: admin: class %q key %s: %s (by %s)", class, key, what, req.RemoteAddr)
}
