-- Raise a fencing counter to at least a floor; never lower it.
-- Redlock writes the token it just issued (the maximum of its quorum's
-- counters) back to the nodes, so that every later quorum sees it.
-- KEYS[1]  fencing counter key
-- ARGV[1]  floor: the fencing token just issued
-- ARGV[2]  retention of the counter in milliseconds, as in fence.lua
-- Returns 1.
local stored = tonumber(redis.call('GET', KEYS[1])) or 0
if tonumber(ARGV[1]) > stored then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
