-- Give one leased member of a set back if it is still ours: a permit of a
-- semaphore, or a read lease of a read/write lock.
-- KEYS[1]  lease set (a semaphore's holders, see semaphore_acquire.lua, or
--          a read/write lock's readers, see rw_read_acquire.lua), also the
--          release channel
-- ARGV[1]  owner token
-- Returns 1 when our lease was given back, 0 when it was no longer ours
-- (its lease had ended, or its member was removed): then nothing is
-- published.
--
-- The message `1` wakes one waiter of each listening process (see
-- backend/redis/notify.rs), which then tries again: a semaphore's waiter, or a
-- writer waiting for the readers to leave (only writers wait on the
-- readers' channel, and one writer at a time can take the lock). A lease
-- that merely ends publishes nothing, as waiters retry when the earliest
-- lease ends.
drop_expired_permits(KEYS[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PUBLISH', KEYS[1], '1')
return 1
