-- Give a read lease back if it is still ours, and wake a waiting writer.
-- KEYS[1]  readers (see rw_read_acquire.lua), also the channel writers wait on
-- ARGV[1]  owner token
-- Returns 1 when our read lease was given back, 0 when it was no longer
-- ours (its lease had ended, or its member was removed): then nothing is
-- published.
--
-- The message `1` wakes one waiting writer of each listening process (see
-- backend/notify.rs): only writers wait for readers to leave, and one writer
-- at a time can take the lock.
drop_expired_permits(KEYS[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PUBLISH', KEYS[1], '1')
return 1
