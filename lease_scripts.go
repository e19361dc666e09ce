package tollgate

// The lease scripts (lease.go): the bucket script over buckets that leases
// hold tokens of, and the give-back.

// leaseScript is bucketScript (bucket.go) over buckets that leases hold
// tokens of, and that may grant one.
//
//	KEYS, ARGV[1..3n]  as bucketScript's (no regions: leases are off there)
//	ARGV[3n+1]         this pod's field in the lease hashes (KEYS[i]..'}l')
//	ARGV[3n+2]         max: requests per lease
//	ARGV[3n+3]         ttl, µs
//	ARGV[3n+4]         pods counted
//	ARGV[3n+5]         1: ask for a lease (the reply then ends with the
//	                   requests granted and the lease's end, µs since
//	                   epochUS); 0: ask for none
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
const leaseScript = `
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

// giveBackScript gives back what ended leases did not spend.
//
//	ARGV, per lease: its buckets (n), its field, the requests it has left
//	      (r), its end as granted (until); then per bucket its interval and
//	      cost
//	KEYS  each lease's bucket keys, in order
//
// The lease's field, when it is still this grant's (a later grant
// replaced it otherwise), is counted as spent at its end (as leaseScript
// counts an ended field) and dropped; then each bucket's TAT moves back by
// r requests' worth, no lower than what the other live leases hold nor
// than now (full: the key goes).
const giveBackScript = `
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
