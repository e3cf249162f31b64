-- Release the lock if we still own it, and hand it to the first live waiter.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  waiter queue (see acquire.lua)
-- KEYS[3]  waiter places
-- KEYS[4]  the lock's record (see keys.rs): deleted with the lock, or
--          noting the hand-off
-- KEYS[5]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  grant window in milliseconds; 0 never grants (Redlock, whose
--          nodes must not hand a lock over one by one)
-- ARGV[3]  how long the record of a grant is kept, in milliseconds
-- ARGV[4]  the lock-delay in milliseconds (0: none): a node in its delay,
--          or deposed, hands nothing over; it deletes the lock and wakes the waiters
-- Returns 1 when our lock was released, 0 when it was no longer ours (then
-- the token also leaves the queue: a waiter that gives up calls this; the
-- last to leave clears the holder's waiters' mark, see prelude.lua).
--
-- The hand-off: the first live waiter gets the lock at once, under its own
-- owner token. The grant lasts until its place would have ended, or its
-- lease from the place's refresh if that is shorter: min(place, lease)
-- counted from the server time of the refresh. When at least half of that
-- is left, the lock gets what is left and the message `=SEQ=token` names
-- the refresh: the waiter counts the same length from when it sent refresh
-- SEQ, which is before the server received it, so its validity ends before
-- this expiry; it holds at once, in one trip, and its first renewal (a
-- third of the way) gives it its own lease. A waiter that died holds the
-- key no longer than its place would have. Otherwise the lock gets the
-- grant window and the message is the bare token: the waiter confirms by
-- extending the lease to its own ttl; one that died or cannot answer loses
-- the grant when the window ends, and the next waiter takes the lock then.
-- With a grant window every waiter queues and marks the lock's value, so an
-- unmarked value means nobody to tell: the lock is deleted and nothing is
-- published (the uncontended release costs GET and DEL, as a hand-written
-- one does). The one gap is a lock taken by a plain SET NX after an expiry
-- while waiters were queued: unmarked until their places' next refresh,
-- which then gives the free lock to the first of them (a native release
-- does the same). Otherwise (no live waiter, or too many
-- dead ones to look past in one script) the message `1` wakes one waiter of
-- each listening process, which then tries again.
local token, window = ARGV[1], tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
if value == token and window > 0 then
  -- No waiters' mark, so nobody is queued (prelude.lua): a plain
  -- compare-and-delete, as the server's native one does it, before the
  -- shared functions are even built.
  redis.call('DEL', KEYS[1], KEYS[4])
  return 1
end
-- (the shared functions of prelude.lua are defined here)
if holder_of(value) ~= token then
  if leave_queue(KEYS[2], KEYS[3], token) == 0 then
    mark_waiters(KEYS[1], false)
  end
  return 0
end
if window > 0 then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[4])
    return 1
  end
  local first = first_live_waiter(KEYS[2], KEYS[3])
  if first and node_delay(KEYS[5], ARGV[4], true) == 0 then
    local expires, seq, refreshed, lease = place_of(KEYS[3], first)
    local granted_ms, left_ms = 0, 0
    if seq and seq > 0 then
      granted_ms = math.min(expires - refreshed, lease)
      left_ms = refreshed + granted_ms - math.floor(clock_us() / 1000)
    end
    record_grant(KEYS[4], KEYS[2], first, ARGV[3])
    local waiters_left = leave_queue(KEYS[2], KEYS[3], first)
    if granted_ms > 0 and left_ms * 2 >= granted_ms then
      set_holder(KEYS[1], first, left_ms, waiters_left)
      redis.call('PUBLISH', KEYS[1], '=' .. seq .. '=' .. first)
    else
      set_holder(KEYS[1], first, window, waiters_left)
      redis.call('PUBLISH', KEYS[1], first)
    end
    return 1
  end
end
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('PUBLISH', KEYS[1], '1')
return 1
