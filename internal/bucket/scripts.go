package bucket

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

// BucketScript is TakeAll in Lua, run atomically by Redis.
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
//	             windows' bounds, µs since EpochUS, and the quotas' clock
//	             shift, 0 but in tests) and cost: its counter is
//	             KEYS[i]..'@'..the start (s) of the window that holds TIME
//	             (+ shift); a TIME outside the four bounds (a pod's
//	             clock off by a window) is refused with an error, never
//	             counted in an ended window; charged with the buckets,
//	             expiring as quotaExpiryLua says; it reports what is
//	             left, the ms to the
//	             window's end as its wait when it refuses, and always as
//	             its time to full.
//	             A concurrency cap (the root's caps.go) has 0, max and
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

// Charged buckets (and buckets whose TAT was clamped because TIME ran
// backwards) are stored with an expiry at their TAT (at most MaxWaitMS),
// so a key lives only while its bucket is not full. The value is the TAT
// in 1/64 µs, rounded to the nearest whole number (the resolution the
// float already had, so the precision note above holds): a decimal integer
// that Redis keeps inside the key's object (encoding int), with no string
// allocated. It is written with %.0f, not %d: Lua's %d casts to a C long,
// which a TAT 4,500 years ahead (a region's small share of a yearly limit)
// overflows into a negative number, a full bucket. With the short
// key (ClientKey) a bucket takes 56 bytes by MEMORY USAGE; a float string
// took 104. TIME makes the script
// non-deterministic; Redis >= 5 replicates its effects (the SETs), which
// redis.replicate_commands asks for where it is not already the default.
const BucketScript = quotaExpiryLua + `
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

// SlotReturnScript gives back the slots of a take's call: its keys and args
// are the take's (the root's capCall, BucketScript), and each cap's key names its
// member (tg{..}#member...): the member is removed from the cap's set,
// or, when its take has not run yet, left as a tombstone the take
// honours, kept maxDuration and a second (a tombstone key of another
// type is replaced: the take honours no other). The set's rates and
// quotas (keys without a member) are left alone.
const SlotReturnScript = `
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

// LeaseScript is BucketScript (bucket.go) over buckets that leases hold
// tokens of, and that may grant one.
//
//	KEYS, ARGV[1..3n]  as BucketScript's (no regions: leases are off there)
//	ARGV[3n+1]         this pod's field in the lease hashes (KEYS[i]..'}l')
//	ARGV[3n+2]         max: requests per lease
//	ARGV[3n+3]         ttl, µs
//	ARGV[3n+4]         pods counted
//	ARGV[3n+5]         1: ask for a lease (the reply then ends with the
//	                   requests granted and the lease's end, µs since
//	                   EpochUS); 0: ask for none
//
// Each bucket holds at most burst less what live leases hold (the hash's
// fields: "<tokens> <until>"): the TAT is raised to that floor before the
// decision, and stored raised when charged. A lease that ended (its
// until passed, or this pod's own when it asks again: its lease has ended
// on the pod) is counted as spent at its end at the latest, with the
// leases live then: the floor it kept does not lift at once (a client
// that spent its lease, then bursts, gets what a bucket would have given
// it, not a bucket that refilled behind the lease); that floor is stored
// and the field dropped. Malformed fields, and fields ending further ahead
// than a lease lasts (a clock stepped back), are dropped. The hash lives
// a ttl and a full refill, so an ended field is still there to count. A grant: when the request passes and every bucket, after it,
// holds at least 2 x max x pods requests' worth, max requests more are
// charged and the pod's field records them.
const LeaseScript = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local n = #KEYS
local field, lmax, ttl, pods = ARGV[3*n+1], tonumber(ARGV[3*n+2]), tonumber(ARGV[3*n+3]), tonumber(ARGV[3*n+4])
local ask = ARGV[3*n+5] == '1'
local iv, burst, cost, cap, slack, s, clamped = {}, {}, {}, {}, {}, {}, {}
local ok = 1
for i = 1, n do
  iv[i] = tonumber(ARGV[3*i-2])
  burst[i] = tonumber(ARGV[3*i-1])
  cost[i] = tonumber(ARGV[3*i])
  cap[i] = iv[i] * burst[i]
  slack[i] = 1 + burst[i] / 64
  local lk = KEYS[i] .. '}l'
  local held, ended, last = 0, 0, 0
  local hs = redis.call('HGETALL', lk)
  for j = 1, #hs, 2 do
    local tk, u = string.match(hs[j+1], '^(%d+) (%d+)$')
    tk, u = tonumber(tk), tonumber(u)
    if not tk or not u or u > now + 20000000 then
      redis.call('HDEL', lk, hs[j])
    elseif u > now and not (ask and hs[j] == field) then
      held = held + tk
    else
      ended = ended + tk
      if u > now then u = now end
      if u > last then last = u end
      redis.call('HDEL', lk, hs[j])
    end
  end
  local v = tonumber(redis.call('GET', KEYS[i]))
  local tat = now
  if v then tat = v / 64 end
  clamped[i] = false
  if tat < now then tat = now elseif tat > now + cap[i] then tat = now + cap[i]; clamped[i] = true end
  local floor = now + held * iv[i]
  if ended > 0 and last + (ended + held) * iv[i] > floor then floor = last + (ended + held) * iv[i] end
  if floor > now + cap[i] then floor = now + cap[i] end
  if tat < floor then
    tat = floor
    if ended > 0 then clamped[i] = true end
  end
  s[i] = tat
  if tat + iv[i] * cost[i] - now > cap[i] + slack[i] then ok = 0 end
end
local k = 0
if ok == 1 and ask and lmax > 0 then
  k = lmax
  for i = 1, n do
    if (now + cap[i] - s[i]) / iv[i] - cost[i] < 2 * lmax * pods * cost[i] then k = 0 end
  end
end
local untl = math.floor(now + ttl)
local out = {}
for i = 1, n do
  local tat = s[i]
  if ok == 1 then tat = tat + iv[i] * cost[i] * (1 + k) end
  if ok == 1 or clamped[i] then
    redis.call('SET', KEYS[i], string.format('%.0f', math.floor(tat * 64 + 0.5)), 'PX', math.min(maxms, math.max(1, math.ceil((tat - now) / 1000))))
  end
  if k > 0 then
    local lk = KEYS[i] .. '}l'
    redis.call('HSET', lk, field, string.format('%.0f %.0f', k * cost[i], untl))
    local ms = math.min(maxms, math.ceil((ttl + cap[i]) / 1000) + 1)
    if redis.call('PTTL', lk) < ms then redis.call('PEXPIRE', lk, ms) end
  end
  local r = math.floor((now + cap[i] - tat + slack[i]) / iv[i])
  if r < 0 then r = 0 elseif r > burst[i] then r = burst[i] end
  local w = tat + iv[i] * cost[i] - now - cap[i]
  if w <= slack[i] then w = 0 end
  local f = tat - now
  if f < 0 then f = 0 end
  out[i] = string.format('%d %d %d', r, math.min(maxms, math.ceil((w - 0.001) / 1000)), math.min(maxms, math.ceil((f - 0.001) / 1000)))
end
local tail = ''
if ask then tail = ' ' .. k .. ' ' .. string.format('%.0f', untl) end
return redis.status_reply(ok .. ' ' .. table.concat(out, ' ') .. tail)
`

// LeaseReturnScript gives back what ended leases did not spend.
//
//	ARGV, per lease: its buckets (n), its field, the requests it has left
//	      (r), its end as granted (until); then per bucket its interval and
//	      cost
//	KEYS  each lease's bucket keys, in order
//
// The lease's field, when it is still this grant's (a later grant
// replaced it otherwise), is counted as spent at its end (as LeaseScript
// counts an ended field) and dropped; then each bucket's TAT moves back by
// r requests' worth, no lower than what the other live leases hold nor
// than now (full: the key goes).
const LeaseReturnScript = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local a, k = 1, 1
while a + 3 <= #ARGV do
  local n, field, r, untl = tonumber(ARGV[a]), ARGV[a+1], tonumber(ARGV[a+2]), ARGV[a+3]
  a = a + 4
  for i = 1, n do
    local key, iv, cost = KEYS[k], tonumber(ARGV[a]), tonumber(ARGV[a+1])
    k = k + 1
    a = a + 2
    local lk = key .. '}l'
    local held, mine = 0, 0
    local hs = redis.call('HGETALL', lk)
    for j = 1, #hs, 2 do
      local tk, u = string.match(hs[j+1], '^(%d+) (%d+)$')
      if hs[j] == field and u == untl and tonumber(tk) then
        mine = tonumber(tk)
        redis.call('HDEL', lk, field)
      elseif tonumber(tk) and tonumber(u) and tonumber(u) > now and tonumber(u) <= now + 20000000 then
        held = held + tonumber(tk)
      end
    end
    local v = tonumber(redis.call('GET', key))
    if (v or mine > 0) and (r > 0 or mine > 0) then
      local tat = now
      if v then tat = v / 64 end
      if mine > 0 then
        local e = tonumber(untl)
        if e > now then e = now end
        if tat < e + (mine + held) * iv then tat = e + (mine + held) * iv end
      end
      tat = tat - r * cost * iv
      local floor = now + held * iv
      if tat < floor then tat = floor end
      if tat > now then
        redis.call('SET', key, string.format('%.0f', math.floor(tat * 64 + 0.5)), 'PX', math.min(maxms, math.max(1, math.ceil((tat - now) / 1000))))
      else
        redis.call('DEL', key)
      end
    end
  end
end
return redis.status_reply('1')
`

// ChargeScript charges response costs.
//
//	ARGV  per charge: m, then m triples as BucketScript's, whose cost is
//	      the amount to charge (a quota's: -limit, its windows, amount)
//	KEYS  each triple's key, in order
//
// A bucket is charged the amount whatever it holds, into debt, all of it:
// concurrent requests each charge their whole response, and the client
// waits until the debt is paid (only the 100-year horizon of every key
// bounds it). Past a full refill the same value goes under K}d, so that
// the check keeps the debt rather than take it for a clock stepped back. A
// quota's counter (of the window that holds TIME) grows by the amount. A
// key of another type is skipped.
const ChargeScript = quotaExpiryLua + `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
local maxms = 3155760000000
local a, k = 1, 1
while a <= #ARGV do
  local m = tonumber(ARGV[a])
  a = a + 1
  for j = 1, m do
    local iv, b, c, key = tonumber(ARGV[a]), ARGV[a+1], tonumber(ARGV[a+2]), KEYS[k]
    a = a + 3
    k = k + 1
    if iv < 0 then
      local b0, b1, b2, b3, sh = string.match(b, '^(%d+) (%d+) (%d+) (%d+) (%-?%d+)$')
      local qn = now + tonumber(sh)
      local st, en = tonumber(b1), tonumber(b2)
      if qn < st then st, en = tonumber(b0), st elseif qn >= en then st, en = en, tonumber(b3) end
      local qk = key .. '@' .. string.format('%.0f', math.floor(st / 1000000))
      local v = false
      if qn >= tonumber(b0) and qn < tonumber(b3) then v = redis.pcall('INCRBY', qk, c) end
      if type(v) == 'number' then
        redis.call('PEXPIRE', qk, quotaPX(math.max(1, math.ceil((en - qn) / 1000)), v, en - st, -iv))
      end
    else
      local cap = iv * tonumber(b)
      local r = redis.pcall('GET', key)
      if type(r) ~= 'table' then
        local tat = now
        local v = tonumber(r)
        if v then tat = v / 64 end
        if tat < now then tat = now end
        tat = tat + iv * c
        if tat > now + maxms * 1000 then tat = now + maxms * 1000 end
        local val = string.format('%.0f', math.floor(tat * 64 + 0.5))
        local px = math.min(maxms, math.max(1, math.ceil((tat - now) / 1000)))
        redis.call('SET', key, val, 'PX', px)
        if tat > now + cap then redis.call('SET', key .. '}d', val, 'PX', px) end
      end
    end
  end
end
return redis.status_reply('1')
`
