-- Functions shared by acquire.lua, release.lua, fence.lua, the force-release
-- scripts, the semaphore scripts and the read/write lock scripts; prepended
-- to each of them when it is built, so each still runs as one atomic script.

-- The server's time in microseconds.
local function clock_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- The first waiter of the queue whose place has not expired; nil when there
-- is none. Waiters whose place expired (they died, or stopped waiting without
-- saying so) are dropped on the way, in batches that grow from 1 (the usual
-- case: the head is alive) to 896, at most 1024 per call so a script never
-- runs long; false when that many were dropped and the queue goes on: a
-- live waiter may be behind them, so nobody may take the lock past them yet
-- (the next call drops more).
local function first_live_waiter(queue_key, waiters_key)
  local now_ms = clock_us() / 1000
  local from = 0
  for _, batch in ipairs({1, 15, 112, 896}) do
    local heads = redis.call('ZRANGE', queue_key, from, from + batch - 1)
    if #heads == 0 then
      break
    end
    for i, head in ipairs(heads) do
      local expires = tonumber(redis.call('HGET', waiters_key, head))
      if expires and expires >= now_ms then
        if from + i > 1 then
          local dead = redis.call('ZRANGE', queue_key, 0, from + i - 2)
          redis.call('ZREM', queue_key, unpack(dead))
          redis.call('HDEL', waiters_key, unpack(dead))
        end
        return head
      end
    end
    from = from + #heads
  end
  if from > 0 then
    local dead = redis.call('ZRANGE', queue_key, 0, from - 1)
    redis.call('ZREM', queue_key, unpack(dead))
    redis.call('HDEL', waiters_key, unpack(dead))
  end
  if redis.call('EXISTS', queue_key) == 0 then
    return nil
  end
  return false
end

-- Removes `token` from the queue.
local function leave_queue(queue_key, waiters_key, token)
  redis.call('ZREM', queue_key, token)
  redis.call('HDEL', waiters_key, token)
end

-- Drops the members of a semaphore's holder set whose lease has ended (their
-- score, the expiry in server ms, is not after now), so that a crashed
-- holder's permit comes back when its lease ends; also serves a read/write
-- lock's readers and writers' intents. Returns now in ms.
local function drop_expired_permits(holders_key)
  local now_ms = math.floor(clock_us() / 1000)
  redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', now_ms)
  return now_ms
end

-- Sets the holder set to expire with its last lease, so an idle semaphore
-- leaves nothing behind.
local function expire_with_last_permit(holders_key)
  local last = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', holders_key, last)
  end
end

-- Raises the fencing counter at `counter_key` to max(counter + 1, server
-- time in µs), kept for `retention_ms`: above every token issued so far, so
-- storage that has seen it rejects an evicted holder's writes. Returns the
-- new value as a string.
local function raise_fence(counter_key, retention_ms)
  local raised = (tonumber(redis.call('GET', counter_key)) or 0) + 1
  local clock = clock_us()
  if clock > raised then
    raised = clock
  end
  local text = string.format('%.0f', raised)
  redis.call('SET', counter_key, text, 'PX', retention_ms)
  return text
end
