-- Issue the next fencing token of a lock to its current holder.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key
-- ARGV[1]  owner token
-- ARGV[2]  retention of the counter in milliseconds: max(2 x lease,
--          10 minutes), capped at 100 years (computed by the client)
-- Returns the token, or -1 when the lock is not ours (then nobody gets one:
-- a holder whose lease ended cannot obtain a token newer than its
-- successor's).
--
-- Token = max(counter + 1, server time in microseconds), and the counter is
-- set to it. Every token is then above every earlier token of the key, even
-- when the counter came back stale or not at all: a restart from an old
-- snapshot or an unsynced AOF, a failover to a lagging replica, an expired
-- counter. Tokens of one key are issued only to its holders, one holder at a
-- time, and each issue takes a round trip, far more than a microsecond, so as
-- long as the server clock does not step back every token is at most the
-- clock when it was issued, and the clock alone puts a new token above all of
-- them. The counter covers a clock that does step back (an NTP correction) or
-- runs behind another node's (Redlock writes its token back with
-- fence_floor.lua): while it lives, tokens keep rising until the clock
-- catches up.
--
-- Retention: the counter expires ARGV[2] after the last token was issued,
-- so idle keys leave nothing behind. A clock set back by less than the
-- retention still cannot repeat a token: if less than that passed since the
-- last token the counter is still there, and if more passed the clock is past
-- the last token again anyway.
--
-- The counter is written with SET ... GET (clock value, previous value in one
-- command); the rare previous value at or above the clock is written again.
if not held_by(KEYS[1], ARGV[1]) then
  return -1
end
local clock = clock_us()
local previous = redis.call('SET', KEYS[2], string.format('%.0f', clock),
  'PX', ARGV[2], 'GET')
local stored = tonumber(previous) or 0
if stored < clock then
  return clock
end
redis.call('SET', KEYS[2], string.format('%.0f', stored + 1), 'PX', ARGV[2])
return stored + 1
