-- Take the lock and issue a fencing token, in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key (never expires)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- Returns {1, fencing_token} when acquired,
--         {0, remaining_ttl_ms} when another owner holds it.
-- The counter is seeded with the server time in microseconds when it is
-- missing (first use, or a restart that lost all data) and incremented
-- afterwards. Acquisitions of one key are serialised by the lock and each
-- takes a round trip, far more than a microsecond, so the counter stays below
-- the clock: a reseeded counter starts above every earlier token, as long as
-- the server clock is not set back by more than the restart took.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  if fence == 1 then
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], string.format('%.0f', fence))
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
