package tollgate

// Token-bucket math, in Go (for the per-pod fallback) and in Lua (for the
// shared bucket in Redis). Both compute the same thing the same way.
//
// Model. A bucket holds at most burst tokens and refills at average tokens
// per period, one token every interval µs. A request takes cost tokens; it
// passes when the bucket holds at least cost tokens, and is then charged.
//
// State. A bucket is stored as one number, its theoretical arrival time
// (TAT, the GCRA form of a token bucket): the instant, in µs since epochUS,
// at which the bucket will be full again. With d = TAT - now the bucket holds
// (capacity - d)/interval tokens, where capacity = burst*interval. A missing
// bucket, or one whose TAT has passed, is full; keys expire at TAT.
//
// Clocks. One clock per decision: the shared bucket uses Redis's TIME (never
// a pod's clock), counted in µs from epochUS; the local fallback uses the
// pod's monotonic clock (internal/clock), counted in µs from the process's start,
// smaller numbers with the same precision. Both clamp time
// that runs backwards: a TAT further ahead than capacity (a clock that jumped
// back, e.g. after a failover to a Redis whose clock is behind) is clamped to
// capacity, i.e. an empty bucket, never to a longer wait.
//
// Precision. Times are float64 µs counted from epochUS (2023-11-14) in Redis
// (from the process's start locally), so they
// stay below 2^47 µs for years and carry 1/64 µs resolution. Each charge adds
// at most one rounding of 1/128 µs, so a decision allows a slack of
// 1 + burst/64 µs: a request that would fit within that much refill time
// passes. Exact for every practical limit; documented in the README.

import (
	"math"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// epochUS is the origin of bucket time, in µs since the Unix epoch. The Lua
// script subtracts the same origin (in seconds) from TIME.
const epochUS = 1700000000 * 1000000

// Limit is one compiled bucket shape. All fields are in µs or tokens.
type Limit struct {
	Interval float64 // µs per token (period/average)
	Burst    float64 // tokens the bucket holds when full
	Cost     float64 // tokens one request takes
}

// A decision is kept flat, in the layout of the script's reply, so the
// Redis path has nothing to convert:
//
//	d[0]      1 if the request passes (every bucket charged), else 0
//	d[1+3i]   bucket i's whole tokens left after this request (before it,
//	          when refused)
//	d[2+3i]   ms until a request of this cost fits bucket i; 0 if it fits now
//	d[3+3i]   ms until bucket i is full again (when its key expires)
func decisionLen(buckets int) int { return 1 + 3*buckets }

// takeAll is the all-or-nothing decision over several buckets at instant now
// (µs since epochUS): tats[i] is bucket i's stored TAT (0 when missing). When
// every bucket fits, each is charged and tats is updated in place; otherwise
// nothing is charged (a TAT clamped because the clock ran backwards is still
// stored clamped). d receives the decision. It is the Go twin of
// bucketScript, statement for statement, and must stay in step with it.
func takeAll(lims []Limit, tats []float64, now float64, d []int64) bool {
	ok := true
	for i := range lims {
		l := &lims[i]
		capacity := l.Interval * l.Burst
		tat := tats[i]
		if tat < now {
			tat = now
		} else if tat > now+capacity {
			tat = now + capacity
			tats[i] = tat // persist the clamp
		}
		if tat+l.Interval*l.Cost-now > capacity+1+l.Burst/64 {
			ok = false
		}
	}
	d[0] = 0
	if ok {
		d[0] = 1
	}
	for i := range lims {
		l := &lims[i]
		capacity, slack := l.Interval*l.Burst, 1+l.Burst/64
		tat := tats[i]
		if tat < now {
			tat = now
		}
		if ok {
			tat += l.Interval * l.Cost
			tats[i] = tat
		}
		r := math.Floor((now + capacity - tat + slack) / l.Interval)
		if r < 0 {
			r = 0
		} else if r > l.Burst {
			r = l.Burst
		}
		w := tat + l.Interval*l.Cost - now - capacity
		if w <= slack {
			w = 0
		}
		f := tat - now
		if f < 0 {
			f = 0
		}
		d[1+3*i] = int64(r)
		d[2+3*i] = ceilMS(w)
		d[3+3*i] = ceilMS(f)
	}
	return ok
}

// maxWaitMS bounds every wait and time to full, in ms: 100 years (of
// 365.25 days), the longest refill a configuration may ask (maxRefillUS).
// Only a region's small share stretches a bucket further (its burst raised
// to one request's cost at 1/share of the rate); its times are cut there,
// so that no number overflows (the deny cache counts waits in ns).
const maxWaitMS = 3155760000000

// ceilMS converts µs to whole milliseconds, rounding up, at most
// maxWaitMS; the nanosecond taken off absorbs float rounding (1e6/3 µs
// times 3 is 1000 ms, not 1001).
func ceilMS(us float64) int64 {
	ms := math.Ceil((us - 1e-3) / 1000)
	if ms > maxWaitMS {
		return maxWaitMS
	}
	return int64(ms)
}

// bucketScript is takeAll in Lua, run atomically by Redis.
//
//	KEYS[i]      bucket i; all of one request's keys share a hash tag.
//	ARGV[3i-2]   interval, µs per token
//	ARGV[3i-1]   burst, tokens
//	ARGV[3i]     cost, tokens
//	ARGV[3n+i]   with regions only (region.go): the region's static share
//	             of bucket i, ppm; positive when its share follows demand:
//	             the hash KEYS[i]..'}s' then holds it (field s, ppm) when the
//	             exchange tracks the key, counts the tokens asked (n) and
//	             says the limit's rate (g, tokens per second); anything
//	             else there (garbage, another type) leaves the bucket at
//	             its static share, never fails the check;
//	             negative when it stays static. The bucket is charged at
//	             its share: interval/share, burst*share (at least the
//	             cost, as the local fallback's: a bucket that could
//	             never admit one request would refuse it for ever). Its TAT needs no
//	             change when the share shrinks (its fill fraction is kept,
//	             so its tokens shrink with it); when the share has grown
//	             since the bucket was last charged (field a: the share it
//	             was charged at), its TAT is moved so that it keeps its
//	             tokens: a share grows in rate and capacity, never in
//	             tokens at once (TestRegionGrowthKeepsTokens).
//	             A calendar quota (quota.go) has -limit, its windows
//	             ("b0 b1 b2 b3 shift": the previous, current and next
//	             windows' bounds, µs since epochUS, and the quotas' clock
//	             shift, 0 but in tests) and cost: its counter is
//	             KEYS[i]..'@'..the start (s) of the window that holds TIME
//	             (+ shift); a TIME outside the four bounds (a pod's
//	             clock off by a window) is refused with an error, never
//	             counted in an ended window; charged with the buckets,
//	             expiring as quotaExpiryLua says; it reports what is
//	             left, the ms to the
//	             window's end as its wait when it refuses, and always as
//	             its time to full.
//	             A concurrency cap (concurrency.go) has 0, max and
//	             maxDuration (µs); its key is the slots' sorted set with
//	             the pod's member after the key's tag (tg{..}#member...):
//	             expired slots are swept (and any whose deadline is
//	             further ahead than the longest hold any cap may ask, 24 h
//	             and a second: a clock stepped back a day; caps of other
//	             maxDurations share the key and never sweep each other's
//	             slots), the key's expiry is only ever extended, and the
//	             request takes a slot,
//	             scored by its deadline, when fewer than max are held
//	             and no tombstone (}c}r) says the pod gave it up; it
//	             reports the slots left, 1000 ms as its wait when full,
//	             and the member it took (0: none) as its third number.
//	reply        status "allowed remaining_1 wait_ms_1 full_ms_1 ...", one
//	             line of decimal integers (allowed 1|0), so that the client
//	             reads one line and parses it with one call
//
// quotaExpiryLua is the expiry of a quota's counter, the bucket script's
// and the charge script's (costs.go) alike: quotaPX(e, v, w, lim), for a
// counter of v of lim in a window w µs long that ends in e ms, is a
// minute after the window's end, or a day while the counter holds less
// than a tenth of what an even pace spends in a day (lim x day / w / 10):
// a one-shot identity's counter is gone a day later, not at a month's
// end, and such forgotten counts add at most a tenth of the limit over a
// window.
const quotaExpiryLua = `
local function quotaPX(e, v, w, lim)
  if e > 86400000 and v * 10 * w < lim * 86400000000 then return 86400000 end
  return e + 60000
end
`

// Charged buckets (and buckets whose TAT was clamped because TIME ran
// backwards) are stored with an expiry at their TAT (at most maxWaitMS),
// so a key lives only while its bucket is not full. The value is the TAT
// in 1/64 µs, rounded to the nearest whole number (the resolution the
// float already had, so the precision note above holds): a decimal integer
// that Redis keeps inside the key's object (encoding int), with no string
// allocated. It is written with %.0f, not %d: Lua's %d casts to a C long,
// which a TAT 4,500 years ahead (a region's small share of a yearly limit)
// overflows into a negative number, a full bucket. With the short
// key (clientKey) a bucket takes 56 bytes by MEMORY USAGE; a float string
// took 104. TIME makes the script
// non-deterministic; Redis >= 5 replicates its effects (the SETs), which
// redis.replicate_commands asks for where it is not already the default.
const bucketScript = quotaExpiryLua + `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local n = #KEYS
local iv, burst, cost, cap, slack, s, clamped, kept, qk, qe, qw = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local ok = 1
local region = #ARGV > 3*n
for i = 1, n do
  iv[i] = tonumber(ARGV[3*i-2])
  burst[i] = tonumber(ARGV[3*i-1])
  cost[i] = tonumber(ARGV[3*i])
  if iv[i] < 0 then
    local b0, b1, b2, b3, sh = string.match(ARGV[3*i-1], '^(%d+) (%d+) (%d+) (%d+) (%-?%d+)$')
    local qn = now + tonumber(sh)
    if qn < tonumber(b0) or qn >= tonumber(b3) then return redis.error_reply('ERR tollgate: redis TIME outside the quota windows the pod sent (a clock off by a window)') end
    local st, en = tonumber(b1), tonumber(b2)
    if qn < st then st, en = tonumber(b0), st elseif qn >= en then st, en = en, tonumber(b3) end
    qk[i] = KEYS[i] .. '@' .. string.format('%.0f', math.floor(st / 1000000))
    s[i] = tonumber(redis.pcall('GET', qk[i])) or 0
    qe[i] = en - qn
    qw[i] = en - st
    if s[i] + cost[i] > -iv[i] then ok = 0 end
  elseif iv[i] == 0 then
    local ck, mem, rest = string.match(KEYS[i], '^([^}]*})#(%d+)(.*)$')
    if not ck then return redis.error_reply('ERR tollgate: a slot key without its member') end
    ck = ck .. rest
    qk[i], qe[i] = ck, mem
    if redis.pcall('SREM', ck .. '}r', mem) == 1 then qe[i] = false end
    redis.pcall('ZREMRANGEBYSCORE', ck, '-inf', now)
    redis.pcall('ZREMRANGEBYSCORE', ck, '(' .. string.format('%.0f', now + 86401000000), '+inf')
    local c = redis.pcall('ZCARD', ck)
    if type(c) ~= 'number' then redis.call('DEL', ck); c = 0 end
    s[i] = c
    if c + 1 > burst[i] then ok = 0 end
  else
    if region then
      local sh = tonumber(ARGV[3*n+i])
      if sh > 0 then
        local rk = KEYS[i] .. '}s'
        local r = redis.pcall('HMGET', rk, 's', 'a', 'g')
        local v = type(r) == 'table' and tonumber(r[1])
        if v and v >= 1 and v <= 1000000 and v == math.floor(v) then
          redis.pcall('HINCRBY', rk, 'n', math.floor(cost[i]))
          local was = tonumber(r[2]) or sh
          if was ~= v then
            redis.pcall('HSET', rk, 'a', v)
            if v > was and was > 0 then kept[i] = was / v end
          end
          local g = string.format('%.17g', 1000000 / iv[i])
          if r[3] ~= g then redis.pcall('HSET', rk, 'g', g) end
          sh = v
        end
      else
        sh = -sh
      end
      sh = sh / 1000000
      iv[i] = iv[i] / sh
      burst[i] = burst[i] * sh
      if burst[i] < cost[i] then burst[i] = cost[i] end
    end
    cap[i] = iv[i] * burst[i]
    slack[i] = 1 + burst[i] / 64
    local v = tonumber(redis.call('GET', KEYS[i]))
    local tat = now
    if v then tat = v / 64 end
    clamped[i] = false
    if tat < now then tat = now elseif tat > now + cap[i] and tonumber(redis.pcall('GET', KEYS[i] .. '}d')) ~= v then tat = now + cap[i]; clamped[i] = true end
    if kept[i] then tat = now + cap[i] - (now + cap[i] - tat) * kept[i]; clamped[i] = true end
    s[i] = tat
    if tat + iv[i] * cost[i] - now > cap[i] + slack[i] then ok = 0 end
  end
end
local out = {}
for i = 1, n do
  if iv[i] < 0 then
    local c, lim, e = s[i], -iv[i], math.max(1, math.ceil(qe[i] / 1000))
    if ok == 1 then
      c = c + cost[i]
      redis.call('SET', qk[i], string.format('%.0f', c), 'PX', quotaPX(e, c, qw[i], lim))
    end
    local w = 0
    if s[i] + cost[i] > lim then w = e end
    out[i] = string.format('%.0f %d %d', math.max(0, lim - c), w, e)
  elseif iv[i] == 0 then
    local c, id = s[i], '0'
    if ok == 1 and qe[i] then
      redis.call('ZADD', qk[i], now + cost[i], qe[i])
      local px = math.ceil(cost[i] / 1000) + 1000
      if redis.call('PTTL', qk[i]) < px then redis.call('PEXPIRE', qk[i], px) end
      c = c + 1
      id = qe[i]
    end
    local w = 0
    if s[i] + 1 > burst[i] then w = 1000 end
    out[i] = string.format('%d %d %s', math.max(0, burst[i] - c), w, id)
  else
    local tat = s[i]
    if ok == 1 then tat = tat + iv[i] * cost[i] end
    if ok == 1 or clamped[i] then
      redis.call('SET', KEYS[i], string.format('%.0f', math.floor(tat * 64 + 0.5)), 'PX', math.min(maxms, math.max(1, math.ceil((tat - now) / 1000))))
    end
    local r = math.floor((now + cap[i] - tat + slack[i]) / iv[i])
    if r < 0 then r = 0 elseif r > burst[i] then r = burst[i] end
    local w = tat + iv[i] * cost[i] - now - cap[i]
    if w <= slack[i] then w = 0 end
    local f = tat - now
    if f < 0 then f = 0 end
    out[i] = string.format('%d %d %d', r, math.min(maxms, math.ceil((w - 0.001) / 1000)), math.min(maxms, math.ceil((f - 0.001) / 1000)))
  end
end
return redis.status_reply(ok .. ' ' .. table.concat(out, ' '))
`

// checkDecision refuses a decision no correct script sends (the client
// checked its shape: decisionLen numbers): d[0] not 0 or 1, or a refusal
// that names no wait. Called for a decision that is not an admission.
func checkDecision(d []int64) error {
	if d[0] > 1 || (d[0] == 0 && !namesWait(d)) {
		return redis.ErrBadReply
	}
	return nil
}

// namesWait reports whether a decision names a wait; a refusal that does
// not is a reply no correct script produces.
func namesWait(d []int64) bool {
	for i := 2; i < len(d); i += 3 {
		if d[i] > 0 {
			return true
		}
	}
	return false
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
      local px = math.ceil(tonumber(ARGV[3*i]) / 1000) + 1000
      if redis.call('PTTL', rk) < px then redis.pcall('PEXPIRE', rk, px) end
    end
  end
end
return redis.status_reply('1')
`

// giveScr is giveScript's prepared form.
var giveScr = redis.NewScript(giveScript)
