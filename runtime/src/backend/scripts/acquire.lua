-- Take the lock and issue a fencing token, in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key (expires once idle for the retention below)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- Returns {1, fencing_token} when acquired,
--         {0, remaining_ttl_ms} when another owner holds it.
--
-- Token = max(counter + 1, server time in microseconds), and the counter is
-- set to it. Every token is then above every earlier token of the key, even
-- when the counter came back stale or not at all: a restart from an old
-- snapshot or an unsynced AOF, a failover to a lagging replica, an expired
-- counter. Acquisitions of one key are serialised by the lock and each takes
-- a round trip, far more than a microsecond, so as long as the server clock
-- does not step back every token is at most the clock when it was issued,
-- and the clock alone puts a new token above all of them. The counter covers
-- a clock that does step back (an NTP correction) or runs behind another
-- node's (Redlock writes its token back with fence_floor.lua): while it
-- lives, tokens keep rising until the clock catches up.
--
-- Retention: the counter expires max(2 x lease, 10 minutes) after the last
-- acquisition (capped at 100 years, which keeps the PX valid for any lease
-- Redis accepted), so idle keys leave nothing behind and millions of
-- distinct keys do not fill the server. A clock set back by less than the
-- retention still cannot repeat a token: if less than that passed since the
-- last acquisition the counter is still there, and if more passed the clock
-- is past the last token again anyway. 10 minutes is far more than NTP
-- steps and the clock offsets of healthy servers; twice the lease keeps the
-- counter of a key taken with long leases across the lease and the next
-- acquisition.
--
-- The counter is written with SET ... GET (clock value, previous value in one
-- command); the rare previous value at or above the clock is written again.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local retention = string.format('%.0f',
    math.min(math.max(2 * tonumber(ARGV[2]), 600000), 3155760000000))
  local previous = redis.call('SET', KEYS[2], string.format('%.0f', clock),
    'PX', retention, 'GET')
  local stored = tonumber(previous) or 0
  if stored < clock then
    return {1, clock}
  end
  redis.call('SET', KEYS[2], string.format('%.0f', stored + 1), 'PX', retention)
  return {1, stored + 1}
end
return {0, redis.call('PTTL', KEYS[1])}
