-- Adds one batch's units to ids' hashes for one UTC day each, once per hash.
-- KEYS: the hashes. ARGV[1]: this writer's field, ARGV[2]: the batch's number (rising per
-- writer), then for each key in turn: when its hash expires (Unix seconds), how many field /
-- increment pairs follow, and the pairs.
-- The writer's field holds the number of the last batch it added to that hash, so a batch
-- sent again (its first reply lost, or its pipeline failed part way) adds nothing the second
-- time. It is written, with the expiry, before the units: a key whose units Redis then
-- refuses (a count past 2^63 - 1) keeps what it took and is not added to again.
-- Returns, for each field whose units were refused, its key's position (from 1): every field
-- of a key of another type, or one count out of range.
local writer, number = ARGV[1], tonumber(ARGV[2])
local refused = {}
local at = 3
for k = 1, #KEYS do
  local expire_at, pairs = ARGV[at], tonumber(ARGV[at + 1])
  local first = at + 2
  at = first + 2 * pairs
  local done = redis.pcall('HGET', KEYS[k], writer)
  if type(done) == 'table' and done.err then
    for _ = first, at - 1, 2 do
      refused[#refused + 1] = k
    end
  elseif (tonumber(done) or 0) < number then
    redis.call('HSET', KEYS[k], writer, ARGV[2])
    -- Every writer sets the same expiry for a day's hash: the first write of each is enough.
    if not done then
      redis.call('EXPIREAT', KEYS[k], expire_at)
    end
    for i = first, at - 1, 2 do
      local r = redis.pcall('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1])
      if type(r) == 'table' and r.err then
        refused[#refused + 1] = k
      end
    end
  end
end
return refused
