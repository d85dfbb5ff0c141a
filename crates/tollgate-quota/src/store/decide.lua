-- One quota decision, atomically, inside Redis. The same rules as the Rust core
-- (crates/tollgate-quota/src/counter.rs and window.rs); the conformance suite checks that both
-- give the same answers. Times are microseconds since the Unix epoch. Lua numbers are doubles:
-- every integer here (times until 2255, limits, weights, counts) is exact below 2^53.
-- Redis runs the script alone, so the read, the decision and the update of one counter are one
-- atomic step; only an admission adds to a u field (rejections add to x and t).
--
-- KEYS[1]  the counter's base key: <prefix>{<id>}:<kind>:<interval>:<unit>:<start>
-- ARGV     kind (0 calendar, 1 flexi, 2 rolling), limit, weight, interval, unit length in us
--          (0 for months), calendar anchor in us, now in us (-1: read TIME here), and
--          optionally '1' to add the weight whatever the limit (units an instance already
--          admitted on its own while Redis was unreachable)
-- Returns  {outcome (0 allowed, 1 exceeded, 2 weight over limit), used, exceed, total,
--           window start, window end, retry at (-1: none), reset at, now}
--
-- Keys: calendar windows use <base>:w:<window start> (hash u, x; z = 1 when the total was 0
-- as the key was made), expiring at the window end, plus <base>:t (hash t = total, d = when it
-- lapses). Flexi and rolling use <base> itself
-- (hash m, u, x, t; rolling sub-buckets as fields u<index> and x<index>).
-- Every key of one id carries the hash tag {<id>}.

local base = KEYS[1]
local kind = tonumber(ARGV[1])
local unit_us = tonumber(ARGV[5])
local now = tonumber(ARGV[7])
local force = ARGV[8] == '1'
-- With Redis' own TIME every expiry below lands at the same absolute instant whenever it is set,
-- so a key that already exists (and so already got its expiry in the script that created it)
-- needs no second PEXPIRE. With a caller-supplied time the expiry is re-set on every write.
local redis_time = now < 0
if redis_time then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local DAY = 86400000000

-- Floor division, exact for integers below 2^53.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- Calendar windows of a fixed length (every unit but months): the common case, decided before
-- any of the helpers below are created, with the same rules as the general calendar branch.
if kind == 0 and unit_us > 0 then
  local limit = tonumber(ARGV[2])
  local weight = tonumber(ARGV[3])
  local len = tonumber(ARGV[4]) * unit_us
  local anchor = tonumber(ARGV[6])
  local s = anchor + fdiv(now - anchor, len) * len
  local e = s + len
  local wkey = base .. ':w:' .. string.format('%.0f', s)
  local w = redis.call('HMGET', wkey, 'u', 'x', 'z')
  local fresh = not (w[1] or w[2])
  local used, exceed = tonumber(w[1]) or 0, tonumber(w[2]) or 0
  -- z = 1: the total was 0 when this window's key was made. Only a rejection makes a total, and
  -- a rejection in this window adds x here, so while x is absent the total is still 0 and the
  -- total key need not be read (times of one counter only move forward, so no later window
  -- has written it either).
  local tt
  local total = 0
  if not (w[3] and not w[2]) then
    tt = redis.call('HMGET', base .. ':t', 't', 'd')
    total = tonumber(tt[1]) or 0
    if tt[2] and now >= tonumber(tt[2]) then total = 0 end
  end
  local outcome
  if force then
    outcome = 0
  elseif weight > limit then
    outcome = 2
  elseif weight == 0 then
    if used < limit then outcome = 0 else outcome = 1 end
  elseif used + weight <= limit then
    outcome = 0
  else
    outcome = 1
  end
  if outcome == 0 then
    if weight > 0 then
      if fresh and total == 0 then
        redis.call('HSET', wkey, 'u', weight, 'z', 1)
        used = weight
      else
        used = redis.call('HINCRBY', wkey, 'u', weight)
      end
      if fresh or not redis_time then
        redis.call('PEXPIRE', wkey, math.max(fdiv(e - now, 1000) + 1, 1))
      end
    end
  else
    exceed = redis.call('HINCRBY', wkey, 'x', 1)
    if fresh or not redis_time then
      redis.call('PEXPIRE', wkey, math.max(fdiv(e - now, 1000) + 1, 1))
    end
    total = total + 1
  end
  if total > 0 then
    local lapse = string.format('%.0f', e + len)
    -- An admission leaves t as it is; only a moved lapse time needs writing (and, with Redis'
    -- TIME, its expiry is then already the one this would set).
    if not (redis_time and outcome == 0 and tt and tt[2] == lapse) then
      local tkey = base .. ':t'
      redis.call('HSET', tkey, 't', total, 'd', lapse)
      redis.call('PEXPIRE', tkey, math.max(fdiv(e + len - now, 1000) + 1, 1))
    end
  end
  local retry = -1
  if outcome == 1 then retry = e end
  return {outcome, used, exceed, total, s, e, retry, e, now}
end

local limit = tonumber(ARGV[2])
local weight = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local anchor = tonumber(ARGV[6])

local function civil(z)
  z = z + 719468
  local era = fdiv(z, 146097)
  local doe = z - era * 146097
  local yoe = fdiv(doe - fdiv(doe, 1460) + fdiv(doe, 36524) - fdiv(doe, 146096), 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + fdiv(yoe, 4) - fdiv(yoe, 100))
  local mp = fdiv(5 * doy + 2, 153)
  local d = doy - fdiv(153 * mp + 2, 5) + 1
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = fdiv(y, 400)
  local yoe = y - era * 400
  local mp
  if m > 2 then mp = m - 3 else mp = m + 9 end
  local doy = fdiv(153 * mp + 2, 5) + d - 1
  local doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end

local function days_in_month(y, m)
  if m == 2 then
    if (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 then return 29 end
    return 28
  end
  if m == 4 or m == 6 or m == 9 or m == 11 then return 30 end
  return 31
end

-- at + n calendar months, the day clamped to the month's end, the time of day kept.
local function add_months(at, n)
  local days = fdiv(at, DAY)
  local tod = at - days * DAY
  local y, m, d = civil(days)
  local total = y * 12 + (m - 1) + n
  local ny = fdiv(total, 12)
  local nm = total - ny * 12 + 1
  local nd = math.min(d, days_in_month(ny, nm))
  return days_from_civil(ny, nm, nd) * DAY + tod
end

local function add_len(at)
  if unit_us > 0 then return at + interval * unit_us end
  return add_months(at, interval)
end

local function sub_len(at)
  if unit_us > 0 then return at - interval * unit_us end
  return add_months(at, -interval)
end

local nominal
if unit_us > 0 then nominal = interval * unit_us else nominal = interval * 31 * DAY end

local function calendar(t)
  if unit_us > 0 then
    local len = interval * unit_us
    local s = anchor + fdiv(t - anchor, len) * len
    return s, s + len
  end
  local ay, am = civil(fdiv(anchor, DAY))
  local ny, nm = civil(fdiv(t, DAY))
  local months = (ny - ay) * 12 + (nm - am)
  if add_months(anchor, months) > t then months = months - 1 end
  local k = fdiv(months, interval) * interval
  return add_months(anchor, k), add_months(anchor, k + interval)
end

local function admit(used)
  if force then return 0 end
  if weight > limit then return 2 end
  if weight == 0 then
    if used < limit then return 0 end
    return 1
  end
  if used + weight <= limit then return 0 end
  return 1
end

-- Expiry is only garbage collection: every lapse is also checked against stored times. It is
-- set relative to `now` (PEXPIRE), so that it also holds when the caller supplied the time.
local function expire_at(key, us)
  redis.call('PEXPIRE', key, math.max(fdiv(us - now, 1000) + 1, 1))
end

local function num(v)
  if v then return tonumber(v) end
  return 0
end

if kind == 0 then
  local s, e = calendar(now)
  local wkey = base .. ':w:' .. string.format('%.0f', s)
  local tkey = base .. ':t'
  local w = redis.call('HMGET', wkey, 'u', 'x')
  local used, exceed = num(w[1]), num(w[2])
  local tt = redis.call('HMGET', tkey, 't', 'd')
  local total = num(tt[1])
  if tt[2] and now >= tonumber(tt[2]) then total = 0 end
  local outcome = admit(used)
  if outcome == 0 then
    if weight > 0 then
      used = redis.call('HINCRBY', wkey, 'u', weight)
      expire_at(wkey, e)
    end
  else
    exceed = redis.call('HINCRBY', wkey, 'x', 1)
    expire_at(wkey, e)
    total = total + 1
  end
  if total > 0 then
    redis.call('HSET', tkey, 't', total, 'd', string.format('%.0f', e + nominal))
    expire_at(tkey, e + nominal)
  end
  local retry = -1
  if outcome == 1 then retry = e end
  return {outcome, used, exceed, total, s, e, retry, e, now}
end

local st = redis.call('HMGET', base, 'm', 'u', 'x', 't')
local mark, used, exceed, total = st[1], num(st[2]), num(st[3]), num(st[4])
if mark then mark = tonumber(mark) else mark = -1e300 end

if kind == 1 then
  local open_end = mark
  if used > 0 then open_end = add_len(mark) end
  local open = used > 0 and now < open_end
  if not open then
    local lapsed = now >= open_end + nominal
    if used > 0 or lapsed then exceed = 0 end
    if lapsed then total = 0 end
    used = 0
  end
  local outcome = admit(used)
  local s, e
  if open then s, e = mark, open_end else s, e = now, add_len(now) end
  if outcome == 0 then
    if weight > 0 then
      if not open then exceed = 0; mark = now end
      used = used + weight
    end
  else
    exceed = exceed + 1
    total = total + 1
    if not open then mark = now end
  end
  local end_us = mark
  if used > 0 then end_us = add_len(mark) end
  if used > 0 or total > 0 then
    redis.call('HSET', base, 'm', string.format('%.0f', mark), 'u', used, 'x', exceed, 't', total)
    if total > 0 then expire_at(base, end_us + nominal) else expire_at(base, end_us) end
  else
    redis.call('DEL', base)
  end
  local retry = -1
  if outcome == 1 then retry = e end
  return {outcome, used, exceed, total, s, e, retry, e, now}
end

-- Rolling: sub-buckets of one window / 64 (months: of n * 28 days / 64).
local wbase
if unit_us > 0 then wbase = interval * unit_us else wbase = interval * 28 * DAY end
local width = math.max(fdiv(wbase, 64), 1)
-- A bucket leaves at its start plus the window, except that a start whose day the target
-- month lacks leaves at the end of that month (as RollingLayout::leaves_at): never before an
-- earlier bucket.
local function leaves_at(b)
  local at = b * width
  local e = add_len(at)
  if unit_us == 0 then
    local _, _, d0 = civil(fdiv(at, DAY))
    local _, _, d1 = civil(fdiv(e, DAY))
    if d1 < d0 then e = (fdiv(e, DAY) + 1) * DAY end
  end
  return e
end
local first = fdiv(sub_len(now), width) + 1
while leaves_at(first - 1) > now do first = first - 1 end
while leaves_at(first) <= now do first = first + 1 end

if now >= mark and now >= mark + nominal then total = 0 end
local buckets = {}
local index = {}
local raw = redis.call('HGETALL', base)
local drop = {}
for i = 1, #raw, 2 do
  local f = raw[i]
  local tag = string.sub(f, 1, 1)
  if (tag == 'u' or tag == 'x') and #f > 1 then
    local b = tonumber(string.sub(f, 2))
    if b < first then
      drop[#drop + 1] = f
    else
      if not buckets[b] then buckets[b] = {0, 0}; index[#index + 1] = b end
      if tag == 'u' then buckets[b][1] = tonumber(raw[i + 1]) else buckets[b][2] = tonumber(raw[i + 1]) end
    end
  end
end
if #drop > 0 then redis.call('HDEL', base, unpack(drop)) end
local used_now = 0
for _, b in ipairs(index) do used_now = used_now + buckets[b][1] end
local outcome = admit(used_now)
local current = fdiv(now, width)
if outcome == 0 then
  if weight > 0 then
    if not buckets[current] then buckets[current] = {0, 0}; index[#index + 1] = current end
    buckets[current][1] = buckets[current][1] + weight
    redis.call('HINCRBY', base, 'u' .. string.format('%.0f', current), weight)
  end
else
  if not buckets[current] then buckets[current] = {0, 0}; index[#index + 1] = current end
  buckets[current][2] = buckets[current][2] + 1
  redis.call('HINCRBY', base, 'x' .. string.format('%.0f', current), 1)
  total = total + 1
end
table.sort(index)
used_now = 0
exceed = 0
for _, b in ipairs(index) do
  used_now = used_now + buckets[b][1]
  exceed = exceed + buckets[b][2]
end
local retry = -1
if outcome == 1 then
  local need = math.max(weight, 1)
  local left = used_now
  retry = now
  for _, b in ipairs(index) do
    if left + need <= limit then break end
    left = left - buckets[b][1]
    retry = leaves_at(b)
  end
end
local reset = now
if #index > 0 then
  reset = leaves_at(index[1])
  mark = leaves_at(index[#index])
else
  mark = now
end
if #index > 0 or total > 0 then
  redis.call('HSET', base, 'm', string.format('%.0f', mark), 't', total)
  if total > 0 then expire_at(base, mark + nominal) else expire_at(base, mark) end
else
  redis.call('DEL', base)
end
return {outcome, used_now, exceed, total, -1, -1, retry, reset, now}
