-- Take the lock by the waiter queue's rules, or queue up. The uncontended
-- attempt without queueing is a plain `SET key token NX PX ttl` instead (see
-- commands.rs); this script serves queued waiters, the confirmation of a lock
-- handed over by a release, and replicated acquisitions.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  waiter queue: sorted set of owner tokens by arrival
-- KEYS[3]  waiter places: hash of owner token -> expiry (server ms)
-- KEYS[4]  the lock's record (see keys.rs): a waiter's grant is noted there
-- KEYS[5]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  0 to take the lock or not, without queueing; else join (or stay
--          in) the queue for this many milliseconds if the lock is busy
-- ARGV[4]  the waiter's number for this place refresh (0: none), kept with
--          the server time of the refresh, so that a release can grant the
--          lock with the waiter's own lease counted from then (release.lua)
-- ARGV[5]  how long the record of a grant is kept, in milliseconds
-- ARGV[6]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (DELAY_MS 0: none; see node_delay)
-- Returns {1, 0} when the lock is ours (taken now, or granted to us by a
--            release while we were queued: then its lease is set to ARGV[2]
--            from now, which confirms the grant),
--         {0, ms} when it is not: the holder's remaining TTL, or a short
--            pause when the lock is free but an earlier waiter is first,
--         {2, ms} when the node is in its lock-delay for ms more: nothing
--            is granted, not even to the holder (a waiter still queues).
--
-- While waiters are queued, a held lock's value carries the waiters' mark
-- (see prelude.lua), so its holder's native release falls back to
-- release.lua, which hands the lock over.
--
-- Fairness: while waiters are queued, the lock goes to the first live one
-- (by the release that frees it, see release.lua, or by this script when it
-- is that waiter); a newcomer never overtakes them here. Fencing tokens are
-- issued on request by fence.lua, not here.
local token, lease, stay, seq = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4] or '0')
-- Joins the queue, or keeps our place in it, for `stay` ms from now, with
-- the refresh's number and server time (what a release's grant counts from).
local function keep_place()
  local now_us = clock_us()
  redis.call('ZADD', KEYS[2], 'NX', now_us, token)
  local now_ms = math.floor(now_us / 1000)
  redis.call('HSET', KEYS[3], token,
    string.format('%.0f %.0f %.0f %s', now_ms + stay, seq, now_ms, lease))
  redis.call('PEXPIRE', KEYS[2], stay)
  redis.call('PEXPIRE', KEYS[3], stay)
end
local delayed = node_delay(KEYS[5], ARGV[6], false)
if delayed > 0 then
  if stay > 0 then
    keep_place()
  end
  return {2, delayed}
end
if stay == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], token, 'NX', 'PX', lease) then
    return {1, 0}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local holder = holder_of(redis.call('GET', KEYS[1]))
if holder == token then
  redis.call('PEXPIRE', KEYS[1], lease)
  mark_waiters(KEYS[1], leave_queue(KEYS[2], KEYS[3], token) > 0)
  return {1, 0}
end
if not holder then
  local first = first_live_waiter(KEYS[2], KEYS[3])
  if first == nil or first == token then
    local waiters_left = 0
    if stay > 0 then
      record_grant(KEYS[4], KEYS[2], token, ARGV[5])
    end
    if first then
      waiters_left = leave_queue(KEYS[2], KEYS[3], token)
    end
    set_holder(KEYS[1], token, lease, waiters_left)
    return {1, 0}
  end
end
if stay > 0 then
  keep_place()
  mark_waiters(KEYS[1], true)
end
if not holder then
  return {0, 50}
end
return {0, redis.call('PTTL', KEYS[1])}
