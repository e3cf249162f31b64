-- Extend one permit's lease if it is still ours.
-- KEYS[1]  holder set (see semaphore_acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds
-- Returns 1 when extended, 0 when the permit is gone: its lease ended (it
-- is dropped here if still listed) or its member was removed.
local now_ms = drop_expired_permits(KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX',
  string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[1])
expire_with_last_permit(KEYS[1])
return 1
