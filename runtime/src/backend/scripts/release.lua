-- Release the lock if we still own it, and hand it to the first live waiter.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  waiter queue (see acquire.lua)
-- KEYS[3]  waiter places
-- ARGV[1]  owner token
-- ARGV[2]  grant window in milliseconds; 0 never grants (Redlock, whose
--          nodes must not hand a lock over one by one)
-- Returns 1 when our lock was released, 0 when it was no longer ours (then
-- the token also leaves the queue: a waiter that gives up calls this; the
-- last to leave clears the holder's waiters' mark, see prelude.lua).
--
-- The hand-off: the first live waiter gets the lock at once, under its own
-- owner token, with a lease of the grant window, and its owner token as a
-- message on the lock's channel tells its process. The waiter confirms by
-- extending the lease to its own ttl; one that died or cannot answer loses
-- the grant when the window ends, and the next waiter takes the lock then.
-- With a grant window every waiter queues, so an empty queue means nobody to
-- tell: the lock is deleted and nothing is published (the uncontended
-- release costs GET, EXISTS, DEL). Otherwise (no live waiter, or too many
-- dead ones to look past in one script) the message `1` wakes one waiter of
-- each listening process, which then tries again.
local token, window = ARGV[1], tonumber(ARGV[2])
if not held_by(KEYS[1], token) then
  if leave_queue(KEYS[2], KEYS[3], token) == 0 then
    mark_waiters(KEYS[1], false)
  end
  return 0
end
if window > 0 then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[1])
    return 1
  end
  local first = first_live_waiter(KEYS[2], KEYS[3])
  if first then
    set_holder(KEYS[1], first, window, leave_queue(KEYS[2], KEYS[3], first))
    redis.call('PUBLISH', KEYS[1], first)
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], '1')
return 1
