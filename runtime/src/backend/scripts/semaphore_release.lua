-- Give one permit back if it is still ours, and wake waiters.
-- KEYS[1]  holder set (see semaphore_acquire.lua), also the release channel
-- ARGV[1]  owner token
-- Returns 1 when our permit was given back, 0 when it was no longer ours
-- (its lease had ended, or its member was removed): then nothing is
-- published.
--
-- The message `1` wakes one waiter of each listening process (see
-- backend/notify.rs), which then tries again; a permit whose lease merely
-- ends publishes nothing, as waiters retry when the earliest lease ends.
drop_expired_permits(KEYS[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PUBLISH', KEYS[1], '1')
return 1
