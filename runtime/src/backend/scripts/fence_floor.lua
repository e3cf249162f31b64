-- Raise a fencing counter to at least a floor; never lower it.
-- Redlock writes the token it just issued (the maximum of its quorum's
-- counters) back to the nodes, so that every later quorum sees it.
-- KEYS[1]  fencing counter key
-- ARGV[1]  floor: the fencing token just issued
-- ARGV[2]  lease in milliseconds of that acquisition
-- Returns 1.
-- The counter's expiry is set as in acquire.lua: max(2 x lease, 10 minutes),
-- capped at 100 years, so idle counters do not pile up on any node.
local retention = string.format('%.0f',
  math.min(math.max(2 * tonumber(ARGV[2]), 600000), 3155760000000))
local stored = tonumber(redis.call('GET', KEYS[1])) or 0
if tonumber(ARGV[1]) > stored then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', retention)
else
  redis.call('PEXPIRE', KEYS[1], retention)
end
return 1
