-- Take the lock and issue a fencing token, in one atomic step; or queue up.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  fencing counter key (see issue_fence in prelude.lua)
-- KEYS[3]  waiter queue: sorted set of owner tokens by arrival
-- KEYS[4]  waiter places: hash of owner token -> expiry (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  0 to take the lock or not, without queueing; else join (or stay
--          in) the queue for this many milliseconds if the lock is busy
-- Returns {1, fencing_token} when the lock is ours (taken now, or granted to
--            us by a release while we were queued: then its lease is set to
--            ARGV[2] from now, which confirms the grant),
--         {0, ms} when it is not: the holder's remaining TTL, or a short
--            pause when the lock is free but an earlier waiter is first.
--
-- Fairness: while waiters are queued, the lock goes to the first live one
-- (by the release that frees it, see release.lua, or by this script when it
-- is that waiter); a newcomer never overtakes them. Without waiters the
-- queue keys do not exist and cost one EXISTS.
local token, lease, stay = ARGV[1], ARGV[2], tonumber(ARGV[3])
if stay == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  if redis.call('SET', KEYS[1], token, 'NX', 'PX', lease) then
    return {1, issue_fence(KEYS[2], lease)}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local holder = redis.call('GET', KEYS[1])
if holder == token then
  redis.call('PEXPIRE', KEYS[1], lease)
  leave_queue(KEYS[3], KEYS[4], token)
  return {1, tonumber(redis.call('GET', KEYS[2])) or issue_fence(KEYS[2], lease)}
end
if not holder then
  local first = first_live_waiter(KEYS[3], KEYS[4])
  if not first or first == token then
    leave_queue(KEYS[3], KEYS[4], token)
    redis.call('SET', KEYS[1], token, 'PX', lease)
    return {1, issue_fence(KEYS[2], lease)}
  end
end
if stay > 0 then
  local now_us = clock_us()
  redis.call('ZADD', KEYS[3], 'NX', now_us, token)
  redis.call('HSET', KEYS[4], token, string.format('%.0f', now_us / 1000 + stay))
  redis.call('PEXPIRE', KEYS[3], stay)
  redis.call('PEXPIRE', KEYS[4], stay)
end
if not holder then
  return {0, 50}
end
return {0, redis.call('PTTL', KEYS[1])}
