-- Free a read/write lock whoever holds it, writer and readers alike (an
-- operator's decision), and fence off the evicted writer.
-- KEYS[1]  writer key (see rw_read_acquire.lua), also the channel readers
--          wait on
-- KEYS[2]  readers, also the channel writers wait on
-- KEYS[3]  writers' fencing counter
-- ARGV[1]  retention of the counter in milliseconds, as in fence.lua
-- ARGV[2]  most evicted readers to return
-- Returns {the evicted writer's owner token or '' (none); owner tokens of
-- the evicted readers, earliest lease end first (at most ARGV[2]); how many
-- readers were evicted; the writers' fencing counter now}.
--
-- The counter is raised to max(counter + 1, server time in µs), as
-- force_release.lua raises a lock's: above every writer's token issued so
-- far, so storage that has seen it rejects the evicted writer's writes.
-- Every evicted holder's next renewal is refused (renew.lua for the writer,
-- member_renew.lua for a reader) and its body is cancelled. Waiting
-- writers' intents are kept: those writers still wait, in front of new
-- readers, and take the lock next. Waiters are woken as by a writer's
-- release: every reader (`*`) and one writer of each process (`1`).
local writer = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
drop_expired_permits(KEYS[2])
local readers = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
local reader_count = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2])
local raised = raise_fence(KEYS[3], ARGV[1])
redis.call('PUBLISH', KEYS[1], '*')
redis.call('PUBLISH', KEYS[2], '1')
return {writer or '', readers, reader_count, raised}
