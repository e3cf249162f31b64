-- Take the write lease of a read/write lock, or say that this writer waits.
-- KEYS[1]  writer key (see rw_read_acquire.lua), also the release channel
-- KEYS[2]  readers
-- KEYS[3]  writers' intents
-- KEYS[4]  readers' turn (see rw_read_acquire.lua)
-- KEYS[5]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  0 to take the lock or not; else, when it is held, keep (or
--          refresh) this writer's intent for this many milliseconds
-- ARGV[4]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (DELAY_MS 0: none; see node_delay): in the node's delay
--          the answer is {2, ms}, nothing granted nor kept for ms more
-- Returns {1, 0}: the write lease is ours (the writer key holds our token
--            with a TTL of ARGV[2]); our intent, if any, is withdrawn,
--         {0, ms}: held by a writer (ms: its remaining lease), by readers
--            (ms: until the earliest reader's lease ends) or kept for
--            readers whose turn it is (ms: until the turn ends); -1 when
--            unknown.
--
-- A writer takes the lock only when no writer holds it and no reader's
-- lease is live. Writers' intents stop new readers (rw_read_acquire.lua) but
-- not other writers: among waiting writers, the first attempt after a
-- release wins. An intent expires unless its writer refreshes it with its
-- next attempt, so a writer that died stops holding readers back within
-- ARGV[3]. During the readers' turn no writer gets in. Fencing tokens are
-- issued on request by fence.lua, whose lock key is the writer key.
local token, lease, stay = ARGV[1], ARGV[2], tonumber(ARGV[3])
local delayed = node_delay(KEYS[5], ARGV[4], false)
if delayed > 0 then
  return {2, delayed}
end
local now_ms = drop_expired_permits(KEYS[2])
drop_expired_permits(KEYS[3])
local writer = redis.call('GET', KEYS[1])
local turn = redis.call('GET', KEYS[4]) == 'turn'
if writer == token or (not writer and not turn and redis.call('EXISTS', KEYS[2]) == 0) then
  redis.call('SET', KEYS[1], token, 'PX', lease)
  redis.call('ZREM', KEYS[3], token)
  return {1, 0}
end
if stay > 0 then
  redis.call('ZADD', KEYS[3], string.format('%.0f', now_ms + stay), token)
  expire_with_last_permit(KEYS[3])
end
if writer then
  return {0, redis.call('PTTL', KEYS[1])}
end
if turn then
  return {0, redis.call('PTTL', KEYS[4])}
end
local earliest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
return {0, tonumber(earliest) - now_ms}
