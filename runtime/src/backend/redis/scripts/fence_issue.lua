-- The fencing token's issue, shared by fence.lua (a holder asks) and
-- acquire_fenced.lua (the acquisition that takes the lock issues it);
-- prepended to both. The caller has checked that the lock is held by the
-- owner the token goes to: tokens of a key are issued only to its holders.
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
-- Retention: the counter expires `retention_ms` after the last token was
-- issued, so idle keys leave nothing behind. A clock set back by less than
-- the retention still cannot repeat a token: if less than that passed since
-- the last token the counter is still there, and if more passed the clock is
-- past the last token again anyway.
--
-- The counter is written with SET ... GET (clock value, previous value in one
-- command); the rare previous value at or above the clock is written again.
local function issue_fence(counter_key, retention_ms)
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local previous = redis.call('SET', counter_key, string.format('%.0f', clock),
    'PX', retention_ms, 'GET')
  local stored = tonumber(previous) or 0
  if stored < clock then
    return clock
  end
  redis.call('SET', counter_key, string.format('%.0f', stored + 1), 'PX', retention_ms)
  return stored + 1
end
