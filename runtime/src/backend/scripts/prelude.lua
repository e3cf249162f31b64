-- Functions shared by acquire.lua and release.lua; prepended to each script
-- when it is built, so each still runs as one atomic script.

-- The server's time in microseconds.
local function clock_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- Issues the next fencing token of a lock taken for `lease_ms` and returns it.
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
-- Redis accepted), so idle keys leave nothing behind. A clock set back by
-- less than the retention still cannot repeat a token: if less than that
-- passed since the last acquisition the counter is still there, and if more
-- passed the clock is past the last token again anyway.
--
-- The counter is written with SET ... GET (clock value, previous value in one
-- command); the rare previous value at or above the clock is written again.
local function issue_fence(fence_key, lease_ms)
  local clock = clock_us()
  local retention = string.format('%.0f',
    math.min(math.max(2 * tonumber(lease_ms), 600000), 3155760000000))
  local previous = redis.call('SET', fence_key, string.format('%.0f', clock),
    'PX', retention, 'GET')
  local stored = tonumber(previous) or 0
  if stored < clock then
    return clock
  end
  redis.call('SET', fence_key, string.format('%.0f', stored + 1), 'PX', retention)
  return stored + 1
end

-- The first waiter of the queue whose place has not expired, or nil. Waiters
-- whose place expired (they died, or stopped waiting without saying so) are
-- dropped on the way, at most 64 per call so a script never runs long.
local function first_live_waiter(queue_key, waiters_key)
  local now_ms = clock_us() / 1000
  for _ = 1, 64 do
    local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
    if not head then
      return nil
    end
    local expires = tonumber(redis.call('HGET', waiters_key, head))
    if expires and expires >= now_ms then
      return head
    end
    redis.call('ZREM', queue_key, head)
    redis.call('HDEL', waiters_key, head)
  end
  return nil
end

-- Removes `token` from the queue.
local function leave_queue(queue_key, waiters_key, token)
  redis.call('ZREM', queue_key, token)
  redis.call('HDEL', waiters_key, token)
end

