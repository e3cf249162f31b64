-- Release the lock if we still own it, and hand it to the first live waiter.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  fencing counter key
-- KEYS[3]  waiter queue (see acquire.lua)
-- KEYS[4]  waiter places
-- ARGV[1]  owner token
-- ARGV[2]  grant window in milliseconds; 0 never grants (Redlock, whose
--          nodes must not hand a lock over one by one)
-- Returns 1 when our lock was released, 0 when it was no longer ours (then
-- the token also leaves the queue: a waiter that gives up calls this).
--
-- The hand-off: the first live waiter gets the lock at once, under its own
-- owner token, with a fresh fencing token and a lease of the grant window,
-- and the message `<token>:<fencing token>` on the lock's channel tells its
-- process. The waiter confirms by extending the lease to its own ttl; one
-- that died or cannot answer loses the grant when the window ends, and the
-- next waiter takes the lock then. With nobody queued the message is `1`,
-- which wakes one waiter of each listening process that did not queue.
local token, window = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', KEYS[1]) ~= token then
  leave_queue(KEYS[3], KEYS[4], token)
  return 0
end
if window > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  local first = first_live_waiter(KEYS[3], KEYS[4])
  if first then
    leave_queue(KEYS[3], KEYS[4], first)
    redis.call('SET', KEYS[1], first, 'PX', window)
    local fence = issue_fence(KEYS[2], window)
    redis.call('PUBLISH', KEYS[1], first .. ':' .. string.format('%.0f', fence))
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], '1')
return 1
