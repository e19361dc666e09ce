package tollgate

// Operators' controls (docs/admin.md): a serveAdmin middleware shows a
// client key's state, refills it, and sets per-key overrides of its
// class's top-level rate, kept in Redis so that every pod honours them.
//
// What a class's pods share, beside its heartbeat (one slot), by client
// key k:
//
//	tg{hb:<class>}adm   hash: o:<k> an override, "average burst periodNS expiresMS"
//	                    (config.EncodeOverride); v the overrides' version,
//	                    new at every change of them (newVersion)
//	tg{hb:<class>}admr  sorted set: k scored by its latest reset, Unix ms
//	                    on Redis's clock (kept resetKeep)
//
// Each pod reads the overrides' version and the resets since its last
// read at most every adminSync (the overrides only when their version
// changed), when requests of the class come, on a goroutine of its own:
// the request goes on, unless the last read is over adminStale old (the
// class was idle), when it waits for the read, at most twice the Redis
// timeout, so that no request is decided on older state while Redis
// answers (after a failed read, none waits). Overrides are replaced as a
// whole; a reset drops the key's refusals from the deny caches and its
// leases. A class syncs once an admin middleware of this process names
// it, or once its heartbeat finds its keys in Redis; until then a request
// pays one atomic load for it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
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
	// resetKeep is how long a reset stays in Redis for pods to see: a pod
	// whose last read is older drops every cached refusal of the class
	// instead (the cache only saves Redis calls).
	resetKeep = 10 * time.Minute
	// resetOverlap is how far back each read of the resets starts before
	// the last one's time; maxResetsRead bounds one read.
	resetOverlap  = 2 * time.Second
	maxResetsRead = 1000
)

// classAdmin is one class's admin state in this process.
type classAdmin struct {
	class   string
	on      int32 // atomic: the class syncs (an admin middleware names it, or Redis holds its hashes)
	fresh   int64 // atomic: monotonic ns when the last sync that read Redis began
	started int64 // atomic: monotonic ns when the last sync began
	failed  int32 // atomic: the last sync failed (requests do not wait for the next)
	syncs   int64 // atomic: syncs that read Redis
	running bool  // a sync runs (guarded by mu)

	n    int64        // atomic: overrides in over
	over atomic.Value // map[string]config.Override by client key, replaced whole

	version string // the overrides' version read last (sync only)
	loaded  bool   // the overrides were read once (sync only)
	expiry  int64  // the first expiry of over, Unix ms on Redis's clock; 0: none (sync only)

	resetsFrom int64 // Unix ms on Redis's clock: the resets since are read next; 0: none read yet (sync only)

	mu      sync.Mutex
	members []adminMember // the class's limiters, newest last (join)
	waiters []*adminWait  // requests waiting for the running sync (refresh)
}

// adminWait is a request waiting for a sync, woken by the sync's end or
// by its budget's timer, whichever comes first (no select: under Yaegi a
// select on the request path may lose its wakeup).
type adminWait struct {
	mu    sync.Mutex
	woken bool
	ch    chan struct{}
}

func (w *adminWait) wake() {
	w.mu.Lock()
	if !w.woken {
		w.woken = true
		close(w.ch)
	}
	w.mu.Unlock()
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
	s := &classAdmin{class: class}
	s.over.Store(map[string]config.Override{})
	a.byClass[class] = s
	return s
}

// buildGap is the longest pause between two News of one configuration's
// build: Traefik builds every middleware of a configuration at once, and
// a New after a longer pause begins the build of another.
var buildGap = int64(5 * time.Second)

// built is told of each New at now, the previous at last: the first of a
// build drops every class's limiters (prune), built for the configuration
// it replaces, so that they are not kept alive.
func (a *admins) built(now, last int64) {
	if now-last >= buildGap {
		a.prune(now + memberWindow)
	}
}

// prune drops every class's limiters built memberWindow or more before
// now.
func (a *admins) prune(now int64) {
	a.mu.Lock()
	var all []*classAdmin
	for _, s := range a.byClass {
		all = append(all, s)
	}
	a.mu.Unlock()
	for _, s := range all {
		s.join(nil, now)
	}
}

// join registers t (nil: none), a limiter of class a built at now, and
// drops those built memberWindow before.
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
	if t != nil && len(keep) >= maxMembers {
		keep = append(keep[:0], keep[1:]...)
	}
	if t != nil {
		keep = append(keep, adminMember{t: t, at: now})
	}
	a.members = keep
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
	if t.conf.Exempt != nil && exempt(&t.conf.Source, req, t.conf.Exempt) {
		return false // exemptSourceRange first, as serveAny
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
// of now, and waits for it, at most twice the Redis timeout, when a's
// state is over adminStale old and the last sync did not fail (see the
// top of this file).
func (a *classAdmin) refresh(t *Tollgate, now int64) {
	stale := now-atomic.LoadInt64(&a.fresh) >= int64(adminStale) && atomic.LoadInt32(&a.failed) == 0
	if !stale && now-atomic.LoadInt64(&a.started) < int64(adminSync) {
		return // one runs or just ran: nothing to start, nothing to wait for
	}
	be, max := t.be, t.conf.MaxOverrides
	var w *adminWait
	a.mu.Lock()
	if !a.running && now-atomic.LoadInt64(&a.started) >= int64(adminSync) {
		a.running = true
		atomic.StoreInt64(&a.started, now)
		go a.sync(be, max, now)
	}
	if stale && a.running {
		w = &adminWait{ch: make(chan struct{})}
		a.waiters = append(a.waiters, w)
	}
	a.mu.Unlock()
	if w == nil {
		return
	}
	timer := time.AfterFunc(2*t.conf.Redis.Timeout, func() { w.wake() })
	<-w.ch
	timer.Stop()
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
	if a.read(be, max) {
		atomic.StoreInt64(&a.fresh, began)
		atomic.StoreInt32(&a.failed, 0)
		atomic.AddInt64(&a.syncs, 1)
	} else {
		atomic.StoreInt32(&a.failed, 1) // the checks see Redis's faults; the overrides stay as they were
	}
	a.mu.Lock()
	a.running = false
	ws := a.waiters
	a.waiters = nil
	a.mu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

// read is sync's exchange with Redis; false when it failed.
func (a *classAdmin) read(be *backend, max int64) bool {
	k, rk := adminKey(a.class), resetsKey(a.class)
	from := "-inf"
	if a.resetsFrom > 0 {
		from = strconv.FormatInt(a.resetsFrom-resetOverlap.Milliseconds(), 10)
	}
	b := redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGET", k, "v")
	b = redis.AppendCommand(b, "ZRANGEBYSCORE", rk, from, "+inf", "WITHSCORES", "LIMIT", "0", strconv.Itoa(maxResetsRead))
	r, err := be.rc.SideDo(k, b, 3)
	if err != nil {
		return false
	}
	now, err := redisMS(r[0])
	if err != nil || len(r[1]) > 1 || replyFailed(r[1]) || replyFailed(r[2]) || len(r[2])%2 != 0 {
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
	// The resets since the last read (a pod's first read has nothing
	// cached to drop): forgetting a key twice is harmless, so the reads
	// overlap by resetOverlap; a read that hit maxResetsRead goes on from
	// its last reset's time.
	next := now
	switch {
	case a.resetsFrom > 0 && now-a.resetsFrom >= resetKeep.Milliseconds():
		a.forget("") // resets may have been trimmed since: every refusal
	case a.resetsFrom > 0:
		for i := 0; i+1 < len(r[2]); i += 2 {
			a.forget(r[2][i])
		}
	}
	if n := len(r[2]); n == 2*maxResetsRead {
		if ms, err := strconv.ParseFloat(r[2][n-1], 64); err == nil && ms < float64(now) {
			next = int64(ms)
		}
	}
	a.resetsFrom = next
	return true
}

// replyFailed reports an error reply (a refused write, an OOM).
func replyFailed(r []string) bool { return len(r) == 1 && strings.HasPrefix(r[0], "-") }

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
// limiters and its leases: a reset takes effect at once. Key "": every
// key's refusals.
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
			if key == "" {
				continue
			}
			if ls := s.lease; ls != nil {
				tb := ls.table
				tb.mu.Lock()
				if e := tb.leases[ls.tag+key]; e != nil && !e.asking { // one asking is the ask's to settle (granted)
					delete(tb.leases, ls.tag+key)
					atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
				}
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

// adminRead returns the class's overrides hash, at most maxAdminFields
// of its fields (HGETALL, or HRANDFIELD when it holds more: the reply
// reader's bounds hold either way), and Redis's TIME in Unix ms, which
// every expiry is measured on (the pods' clocks play no part).
func adminRead(be *backend, class string) (map[string]string, int64, error) {
	k := adminKey(class)
	r, err := be.rc.SideDo(k, redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HLEN", k), 2)
	if err != nil {
		return nil, 0, err
	}
	now, err := redisMS(r[0])
	if err != nil || replyFailed(r[1]) {
		return nil, 0, redis.ErrBadReply
	}
	read := redis.AppendCommand(nil, "HGETALL", k)
	if replyNumber(r[1], 0) > maxAdminFields {
		read = redis.AppendCommand(nil, "HRANDFIELD", k, strconv.Itoa(maxAdminFields), "WITHVALUES")
	}
	r, err = be.rc.SideDo(k, read, 1)
	if err != nil {
		return nil, 0, err
	}
	v := r[0]
	if len(v)%2 != 0 || replyFailed(v) {
		return nil, 0, redis.ErrBadReply
	}
	out := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		out[v[i]] = v[i+1]
	}
	return out, now, nil
}

// newVersion names a change of a class's overrides: unique to this
// process and change (a counter alone could come back to a value pods
// hold after a failover lost the writes that counted it up).
func newVersion() string {
	return instanceID + "." + strconv.FormatInt(atomic.AddInt64(&versions, 1), 36)
}

// versions counts this process's changes of overrides (newVersion).
var versions int64

// maxAdminFields bounds the fields of the overrides hash read: every
// override a pod may keep (config.MaxOverrides), and the version.
const maxAdminFields = config.MaxOverrides + 1

// redisMS reads a TIME reply as Unix ms (redisUS).
func redisMS(t []string) (int64, error) {
	us, err := redisUS(t)
	return us / 1000, err
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

// adminUnavailable answers 503: Redis failed or refused a command.
func adminUnavailable(rw http.ResponseWriter, err error) {
	adminFail(rw, http.StatusServiceUnavailable, "", "redis: "+err.Error())
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
	override := false
	if v := q.Get("override"); v != "" {
		var err error
		if override, err = strconv.ParseBool(v); err != nil {
			adminFail(rw, http.StatusBadRequest, "override", fmt.Sprintf("%.16q is not a boolean (override=1 removes the key's override)", v))
			return
		}
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
	switch {
	case req.Method == http.MethodGet:
		h.inspect(rw, t, keys, key)
	case req.Method == http.MethodPut:
		h.override(rw, req, t, a, keys, key)
	case override:
		h.unoverride(rw, req, t, a, key)
	default:
		h.reset(rw, req, t, a, key, q.Get("policy"))
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
		ip := net.ParseIP(strings.TrimSpace(keys[0]))
		if ip == nil {
			return "", fmt.Errorf("%.64q is not an IP address (the class is keyed by the client IP)", keys[0])
		}
		req.RemoteAddr = ip.String()
	}
	return bucket.ClientKey(c.Class, identity(s, req)), nil
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

func (h *adminHandler) inspect(rw http.ResponseWriter, t *Tollgate, keys []string, key string) {
	v, err := adminPeek(t, key, strings.Join(keys, ","))
	if err != nil {
		adminUnavailable(rw, err)
		return
	}
	b, _ := json.Marshal(v)
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(append(b, '\n'))
}

// adminPolicies returns the policies a client key is charged under: the
// top level's (its rate replaced by override ov when not nil), then the
// plans' and the rules' keyed like it (a rule keyed its own way is not the
// key's).
func adminPolicies(t *Tollgate, ov *config.Override) []*config.Policy {
	ps := t.conf.TopPolicies()
	if ov != nil {
		if set := t.overrideSet(*ov); set != nil {
			ps = set.ps
		}
	}
	ps = append([]*config.Policy(nil), ps...)
	c := t.conf
	for i, p := range c.Plans {
		if p != nil {
			ps = append(ps, c.WithQuotas(p, c.PlanQuotas, i)...)
		}
	}
	for i, p := range c.Rules {
		if p.Source == nil {
			ps = append(ps, c.WithQuotas(p, c.RuleQuotas, i)...)
		}
	}
	return ps
}

// adminDo runs cmds (n commands) on the node of key's slot; an error
// reply (a write refused: OOM, READONLY) is an error.
func adminDo(t *Tollgate, key string, cmds []byte, n int) ([][]string, error) {
	r, err := t.be.rc.SideDo(key, cmds, n)
	if err != nil {
		return nil, err
	}
	for _, x := range r {
		if replyFailed(x) {
			return nil, fmt.Errorf("%.120s", x[0])
		}
	}
	return r, nil
}

// adminPeek reads key's state on Redis's clock as the script would
// compute it, taking nothing: per shard, TIME, then each policy's state
// (a rate's TAT and debt mark, a quota's counter in its current window, a
// cap's slots held), pipelined on the shard's node; and the key's
// override.
func adminPeek(t *Tollgate, key, shown string) (*adminView, error) {
	hk := adminKey(t.conf.Class)
	r, err := adminDo(t, hk, redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HGET", hk, "o:"+key), 2)
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
		}
	}
	ps := adminPolicies(t, ov)
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
				b = redis.AppendCommand(b, "MGET", k, k+"}d") // its TAT, and its debt's mark (the script's clamp)
			}
		}
		r, err := adminDo(t, sk, b, 1+len(ps))
		if err != nil {
			return nil, err
		}
		us, err := redisUS(r[0])
		if err != nil {
			return nil, err
		}
		rnow := float64(us - bucket.EpochUS) // µs since EpochUS, as the script reads TIME
		for i, p := range ps {
			x := r[1+i]
			switch p.Kind {
			case kindQuota:
				left[i] += int64(replyNumber(x, 0))
			case kindCap:
				if si == 0 {
					left[i] = int64(replyNumber(x, 0))
				}
			default:
				l, f := peekRate(p.Shard, x, rnow)
				left[i] += l
				if f > full[i] {
					full[i] = f
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

// peekRate is what BucketScript reports of a rate bucket of shape lim at
// rnow (µs since EpochUS) from its stored TAT and debt mark (x, MGET's
// reply): whole tokens left, and µs until full. A TAT past a full bucket's
// end is clamped to it unless the debt mark names it (a charge's debt),
// as the script does; a stored value that is no number counts as none.
func peekRate(lim bucket.Limit, x []string, rnow float64) (int64, float64) {
	capUS := lim.Interval * lim.Burst
	tat := rnow
	if len(x) > 0 && x[0] != "" && len(x[0]) <= 32 {
		if v, err := strconv.ParseFloat(x[0], 64); (err == nil || errors.Is(err, strconv.ErrRange)) && !math.IsNaN(v) {
			tat = v / 64 // inf and huge values too: clamped below
		}
	}
	if tat < rnow {
		tat = rnow
	} else if tat > rnow+capUS && (len(x) < 2 || x[1] != x[0]) {
		tat = rnow + capUS
	}
	l := math.Floor((rnow + capUS - tat + 1 + lim.Burst/64) / lim.Interval)
	if l < 0 {
		l = 0
	} else if l > lim.Burst {
		l = lim.Burst
	}
	return int64(l), tat - rnow
}

// replyNumber is element i of a reply as a finite number at least 0; 0
// for none, an error or anything else.
func replyNumber(x []string, i int) float64 {
	if i >= len(x) || len(x[i]) > 32 {
		return 0
	}
	n, err := strconv.ParseFloat(x[i], 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0
	}
	return n
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

// reset refills key's buckets and resets its quotas (or policy's alone),
// those of its plans and of the rules keyed like it too, and records the
// reset: every pod drops its cached refusals and leases of the key.
func (h *adminHandler) reset(rw http.ResponseWriter, req *http.Request, t *Tollgate, a *classAdmin, key, policy string) {
	var ps []*config.Policy
	for _, p := range adminPolicies(t, nil) {
		if (policy == "" || p.Name == policy) && p.Kind != kindCap {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		adminFail(rw, http.StatusBadRequest, "policy", fmt.Sprintf("class %q has no rate or quota %.64q for this key", t.conf.Class, policy))
		return
	}
	if err := adminRefill(t, key, ps); err != nil {
		adminUnavailable(rw, err)
		return
	}
	if err := adminMark(t, key); err != nil {
		adminUnavailable(rw, err)
		return
	}
	what := "reset"
	if policy != "" {
		what = "reset of " + policy
	}
	h.logChange(req, t.conf.Class, key, what)
	a.forget(key)
	rw.WriteHeader(http.StatusNoContent)
}

// adminRefill deletes the state of key's policies ps on every shard: a
// rate's TAT, debt mark and leases (a full bucket), a quota's counter in
// its current window.
func adminRefill(t *Tollgate, key string, ps []*config.Policy) error {
	now := quotaNow()
	for _, sk := range adminShardKeys(t.conf, key) {
		var b []byte
		for _, p := range ps {
			k := sk + p.KeySuffix
			if p.Kind == kindQuota {
				w := quotaWindow(p.Quota, now)
				b = redis.AppendCommand(b, "DEL", k+"@"+strconv.FormatInt(w[1]/1000000, 10))
			} else {
				b = redis.AppendCommand(b, "DEL", k, k+"}d", k+"}l")
			}
		}
		if _, err := adminDo(t, sk, b, len(ps)); err != nil {
			return err
		}
	}
	return nil
}

// adminMark records a change of key (its time on Redis's clock, which
// every pod's sync reads) and drops those older than resetKeep.
func adminMark(t *Tollgate, key string) error {
	rk := resetsKey(t.conf.Class)
	r, err := adminDo(t, rk, redis.AppendCommand(nil, "TIME"), 1)
	if err != nil {
		return err
	}
	now, err := redisMS(r[0])
	if err != nil {
		return err
	}
	b := redis.AppendCommand(nil, "ZADD", rk, strconv.FormatInt(now, 10), key)
	b = redis.AppendCommand(b, "ZREMRANGEBYSCORE", rk, "-inf", "("+strconv.FormatInt(now-resetKeep.Milliseconds(), 10))
	b = redis.AppendCommand(b, "PEXPIRE", rk, strconv.FormatInt(resetKeep.Milliseconds(), 10))
	_, err = adminDo(t, rk, b, 3)
	return err
}

// unoverride removes key's override.
func (h *adminHandler) unoverride(rw http.ResponseWriter, req *http.Request, t *Tollgate, a *classAdmin, key string) {
	hk := adminKey(t.conf.Class)
	if _, err := adminDo(t, hk, redis.AppendCommand(redis.AppendCommand(nil, "HDEL", hk, "o:"+key), "HSET", hk, "v", newVersion()), 2); err != nil {
		adminUnavailable(rw, err)
		return
	}
	if err := adminMark(t, key); err != nil {
		adminUnavailable(rw, err)
		return
	}
	h.logChange(req, t.conf.Class, key, "override removed")
	a.forget(key)
	rw.WriteHeader(http.StatusNoContent)
}

// override sets key's override from the request's JSON body: checked as
// a limit of the class (its shards included), the class's overrides at
// most its maxOverrides; the key's rate starts full.
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
	p, field, err := top[0].WithOverride(o)
	if err == nil {
		field = "burst"
		err = p.Split(t.conf.Shards)
	}
	if err != nil {
		adminFail(rw, http.StatusBadRequest, field, err.Error())
		return
	}
	hk := adminKey(t.conf.Class)
	r, err := adminDo(t, hk, redis.AppendCommand(redis.AppendCommand(redis.AppendCommand(nil, "TIME"), "HLEN", hk), "HEXISTS", hk, "o:"+key), 3)
	var rms int64
	if err == nil {
		rms, err = redisMS(r[0])
	}
	if err == nil {
		err = sweepOverrides(t, rms)
	}
	if err != nil {
		adminUnavailable(rw, err)
		return
	}
	if n := int64(replyNumber(r[1], 0)) - 1; replyNumber(r[2], 0) == 0 && n >= t.conf.MaxOverrides {
		adminFail(rw, http.StatusBadRequest, "key", fmt.Sprintf("class %q holds %d overrides, its maxOverrides: remove one (DELETE ...&override=1) or raise maxOverrides", t.conf.Class, n))
		return
	}
	o.ExpiresMS += rms // ParseOverride's ttl, from Redis's TIME
	b := redis.AppendCommand(redis.AppendCommand(nil, "HSET", hk, "o:"+key, config.EncodeOverride(o)), "HSET", hk, "v", newVersion())
	if _, err := adminDo(t, hk, b, 2); err != nil {
		adminUnavailable(rw, err)
		return
	}
	if err := adminRefill(t, key, top[:1]); err != nil { // "burst 50" gives the key 50 now
		adminUnavailable(rw, err)
		return
	}
	if err := adminMark(t, key); err != nil {
		adminUnavailable(rw, err)
		return
	}
	h.logChange(req, t.conf.Class, key, "override "+config.EncodeOverride(o))
	a.forget(key)
	h.inspect(rw, t, keys, key)
}

// sweepOverrides drops the class's overrides past their expiry (at now,
// Unix ms on Redis's clock) from its hash: pods ignore them, this keeps
// the hash from growing. (Only fields read expired are deleted: the same
// key set again between the read and the delete, by another PUT at that
// moment, would be lost.)
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
	_, err = adminDo(t, hk, b, n)
	return err
}

// logChange logs and counts a change: the class, the key's hash (never
// the key), what changed and who asked.
func (h *adminHandler) logChange(req *http.Request, class, key, what string) {
	atomic.AddInt64(h.changes, 1)
	log.Printf("tollgate: admin: class %q key %s: %s (by %s)", class, key, what, req.RemoteAddr)
}
