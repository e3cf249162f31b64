-- Give the write lease back if it is still ours, or withdraw a waiting
-- writer's intent; wake every waiter either way.
-- KEYS[1]  writer key (see rw_read_acquire.lua), also the channel readers
--          wait on
-- KEYS[2]  writers' intents
-- KEYS[3]  readers, also the channel writers wait on
-- KEYS[4]  readers' turn (see rw_read_acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  how long the readers' turn lasts, in milliseconds
-- Returns 1 when our write lease was given back, 0 when it was no longer
-- ours (its lease had ended, or the key was deleted or taken over).
--
-- A writer that gives up waiting calls this too: its intent leaves the set,
-- and if that was the last one, readers it held back may now get in. Both
-- cases publish `*` to readers, which wakes every waiting reader of each
-- listening process (see backend/redis/notify.rs), as any number of them may
-- enter at once, and `1` to writers, which wakes one of each process. A
-- writer that gives the lock back while a reader waits gives the readers
-- their turn: for ARGV[2], readers get in past the intents and no writer
-- does.
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
  if redis.call('GET', KEYS[4]) == 'waiting' then
    redis.call('SET', KEYS[4], 'turn', 'PX', ARGV[2])
  end
end
local withdrawn = redis.call('ZREM', KEYS[2], ARGV[1])
if released == 1 or withdrawn == 1 then
  redis.call('PUBLISH', KEYS[1], '*')
  redis.call('PUBLISH', KEYS[3], '1')
end
return released
