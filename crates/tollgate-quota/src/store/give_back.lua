-- Gives back the units of one admitted request, atomically, inside Redis: the counterpart of
-- Counter::give_back in the Rust core (crates/tollgate-quota/src/counter/state.rs). Units go
-- back only to the window they were counted in (rolling: their sub-bucket) while it still
-- counts, and never below zero. Keys as in decide.lua.
--
-- KEYS[1]  the counter's base key (decide.lua's)
-- ARGV     kind (0 calendar, 1 flexi, 2 rolling), units, window start in us, window end in us,
--          rolling sub-bucket index, when that sub-bucket leaves in us, now in us (-1: read
--          TIME here)
-- Returns  the units given back, or -1 when the window (or sub-bucket) has ended or its
--          counter is gone

local kind = tonumber(ARGV[1])
local units = tonumber(ARGV[2])
local now = tonumber(ARGV[7])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key, field
if kind == 0 then
  if now >= tonumber(ARGV[4]) then return -1 end
  key, field = KEYS[1] .. ':w:' .. ARGV[3], 'u'
elseif kind == 1 then
  if now >= tonumber(ARGV[4]) then return -1 end
  local st = redis.call('HMGET', KEYS[1], 'm', 'u')
  -- A flexi window is open while u > 0, and m is its start.
  if not st[1] or tonumber(st[1]) ~= tonumber(ARGV[3]) or (tonumber(st[2]) or 0) <= 0 then
    return -1
  end
  key, field = KEYS[1], 'u'
else
  if now >= tonumber(ARGV[6]) then return -1 end
  key, field = KEYS[1], 'u' .. ARGV[5]
end

local v = redis.call('HGET', key, field)
if not v then
  if kind == 0 and redis.call('EXISTS', key) == 1 then return 0 end
  return -1
end
local used = tonumber(v)
local given = math.min(used, units)
if given <= 0 then return 0 end
if kind == 2 and used == given and not redis.call('HGET', key, 'x' .. ARGV[5]) then
  -- An empty sub-bucket is not kept (as in the Rust core).
  redis.call('HDEL', key, field)
else
  redis.call('HINCRBY', key, field, -given)
end
return given
