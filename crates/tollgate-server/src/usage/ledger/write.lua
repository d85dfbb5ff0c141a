-- Adds one batch's units to one id's hash for one UTC day, once.
-- KEYS[1]: the hash. ARGV[1]: this writer's field, ARGV[2]: the batch's number (rising per
-- writer), ARGV[3]: when the hash expires (Unix seconds), then field / increment pairs.
-- The writer's field holds the number of the last batch it added here, so a batch sent again
-- (its first reply lost, or its pipeline failed part way) adds nothing the second time.
local done = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if done >= tonumber(ARGV[2]) then
  return 0
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return 1
