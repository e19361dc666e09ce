package tollgate

// How many pods share a limit, without configuration.
//
// The local fallback divides a limit by the number of pods sharing it (see
// fallback.go). Each pod (process) registers itself per class and Redis in
// a sorted set, tg{hb:<class>}, member its instance id, score Redis's TIME
// in ms; the same heartbeat drops the members not heard from for 3
// heartbeats and counts those left, which the pod keeps as the class's
// replica count. So a pod that stops (or stops serving the class) leaves
// the count within 3 heartbeats.
//
// Heartbeats ride on traffic: a successful check whose class has not
// beaten for a heartbeat interval asks for one; a short-lived goroutine
// (one at a time per Redis, ending when nothing is left to send) sends
// every class asked for in one batch. So nothing runs while a pod is idle,
// and a class whose middlewares were dropped by a reload stops beating. The
// count survives Redis outages: it is what the fallback needs then.

import (
	"crypto/rand"
	"encoding/hex"
	"log"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// maxHeartbeats bounds the classes a backend beats for; past it, classes
// not used for an hour are forgotten.
const maxHeartbeats = 1024

// instanceID names this process in the heartbeat sets.
var instanceID = newInstanceID()

func newInstanceID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b)
}

// heartbeat is one class's registration on one Redis. Fields are accessed
// atomically.
type heartbeat struct {
	key   string // tg{hb:<class>}
	last  int64  // monotonic ns of the last heartbeat asked for
	ttlMS int64  // 3 heartbeats, ms, from the latest caller's settings
	due   int32  // 1: asked for, not yet sent
	seen  int64  // pods counted by the last heartbeat that succeeded; 0: none yet
	first int64  // monotonic ns of the first heartbeat that counted; 0: none yet
}

// replicasSeen is the divisor of the local fallback at now (monotonic
// ns): the pods last counted by hb once this pod has watched a full window
// of heartbeats (3: until then pods that started with it may not have
// beaten yet, and a count of 1 would hand this pod the whole limit), the
// larger of that count and floor (Replicas) before, and floor with the
// heartbeat off (hb nil).
func replicasSeen(hb *heartbeat, floor, now int64) int64 {
	if hb == nil {
		return floor
	}
	n := atomic.LoadInt64(&hb.seen)
	first := atomic.LoadInt64(&hb.first)
	if n > 0 && now-first >= atomic.LoadInt64(&hb.ttlMS)*int64(time.Millisecond) {
		return n
	}
	if n > floor {
		return n
	}
	return floor
}

// heartbeatOn registers the pod for every class of batch on c and
// records the counts: TIME, then (pipelined, one flush) for each class
//
//	ZADD key <TIME ms> <instance id>
//	ZREMRANGEBYSCORE key -inf <TIME ms - 3 heartbeats>
//	PEXPIRE key <3 heartbeats>
//	ZCARD key
//	PTTL key+"adm", PTTL key+"admr" (admin.go: a class whose keys an operator changed syncs)
//
// Plain commands, not a script: Redis's clock is read first, and the
// replies are small integers. (A script would show up among the bucket
// checks in INFO commandstats.) They run on the node's side connection,
// within the dial budget. Failures are left to the checks to notice; the
// counts keep their last values. now (monotonic ns) dates a class's first
// count.
func heartbeatOn(c *redis.Pool, batch []*heartbeat, now int64) {
	t, err := c.SideDo(timeCmd, 1)
	if err != nil {
		return
	}
	us, err := redisUS(t[0])
	if err != nil {
		return
	}
	ms := us / 1000
	logSkew((quotaUS(time.Now())-(us-bucket.EpochUS))/1000, now) // the quotas' clock against Redis's
	var b []byte
	for _, hb := range batch {
		ttlMS := atomic.LoadInt64(&hb.ttlMS)
		b = redis.AppendCommand(b, "ZADD", hb.key, strconv.FormatInt(ms, 10), instanceID)
		b = redis.AppendCommand(b, "ZREMRANGEBYSCORE", hb.key, "-inf", strconv.FormatInt(ms-ttlMS, 10))
		b = redis.AppendCommand(b, "PEXPIRE", hb.key, strconv.FormatInt(ttlMS, 10))
		b = redis.AppendCommand(b, "ZCARD", hb.key)
		b = redis.AppendCommand(b, "PTTL", hb.key+"adm") // the class's overrides and resets (admin.go): -2 when there are none
		b = redis.AppendCommand(b, "PTTL", hb.key+"admr")
	}
	replies, err := c.SideDo(b, 6*len(batch))
	if err != nil {
		return
	}
	for i, hb := range batch {
		var n int64
		for j := 0; j < 4 && n >= 0; j++ {
			n = replyInt(replies[6*i+j])
		}
		if (adminKeyExists(replies[6*i+4]) || adminKeyExists(replies[6*i+5])) && strings.HasPrefix(hb.key, "tg{hb:") && strings.HasSuffix(hb.key, "}") {
			atomic.StoreInt32(&shared.admins.forClass(hb.key[6:len(hb.key)-1]).on, 1) // an admin middleware elsewhere changed a key of it
		}
		if n > 0 {
			atomic.StoreInt64(&hb.seen, n)
			atomic.CompareAndSwapInt64(&hb.first, 0, now)
		}
	}
}

// maxSkewMS is the pod-to-Redis clock skew past which the heartbeat logs
// it: the buckets use Redis's TIME alone, but calendar quotas compute
// their windows on the pod's clock (a pod off by more than a window is
// refused by the script). skewLogEvery spaces the logs (monotonic ns).
const (
	maxSkewMS    = 2000
	skewLogEvery = int64(10 * time.Minute)
)

// skewLogged is when the skew was last logged, monotonic ns (atomic).
var skewLogged int64

// logSkew logs skewMS (the pod's wall clock less Redis's TIME, as the
// heartbeat read it: a round trip's error at most) when it is past
// maxSkewMS, at most every skewLogEvery.
func logSkew(skewMS, now int64) {
	if skewMS <= maxSkewMS && skewMS >= -maxSkewMS {
		return
	}
	last := atomic.LoadInt64(&skewLogged)
	if last != 0 && now-last < skewLogEvery || !atomic.CompareAndSwapInt64(&skewLogged, last, now) {
		return
	}
	log.Printf("tollgate: this pod's clock differs from Redis's TIME by %d ms (pod minus Redis): rate limits use Redis's clock, but calendar quotas' windows are computed on the pod's; keep the clocks in sync (NTP)", skewMS)
}

// adminKeyExists reads PTTL's reply: the key exists (-1: with no expiry,
// or a time left), not -2 (none) or an error.
func adminKeyExists(r []string) bool {
	if len(r) != 1 {
		return false
	}
	n, err := strconv.ParseInt(r[0], 10, 64)
	return err == nil && (n == -1 || n >= 0)
}

// redisUS reads a TIME reply (seconds, µs) as Unix µs; anything else is
// ErrBadReply.
func redisUS(t []string) (int64, error) {
	if len(t) != 2 {
		return 0, redis.ErrBadReply
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil || sec < 0 || sec > maxTimeSec || us < 0 || us >= 1000000 {
		return 0, redis.ErrBadReply
	}
	return sec*1000000 + us, nil
}

// maxTimeSec bounds TIME's seconds so that its µs fit an int64 (year
// 2262; a hostile reply is refused, not wrapped).
const maxTimeSec = 1 << 43

// replyInt is a reply that is one integer, at least 0; -1 for anything
// else (an error reply, an ACL's refusal).
func replyInt(r []string) int64 {
	if len(r) != 1 {
		return -1
	}
	n, err := strconv.ParseInt(r[0], 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

var timeCmd = redis.AppendCommand(nil, "TIME")
