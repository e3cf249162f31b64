-- Take the lock and issue a fencing token, in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key (never expires)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- Returns {1, fencing_token} when acquired,
--         {0, remaining_ttl_ms} when another owner holds it.
-- The token is max(counter + 1, server time in microseconds), so it keeps
-- increasing even when the server restarts empty, as long as its clock is
-- not set back by more than the restart took.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local now = redis.call('TIME')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local stored = tonumber(redis.call('GET', KEYS[2]) or '0')
  local fence = math.max(stored + 1, now_us)
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
