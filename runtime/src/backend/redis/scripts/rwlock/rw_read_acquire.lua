-- Take a read lease of a read/write lock, if no writer holds it or waits,
-- or if it is the readers' turn.
-- KEYS[1]  writer key: the writer's owner token, with its lease as TTL
-- KEYS[2]  readers: sorted set of owner token -> lease expiry (server ms)
-- KEYS[3]  writers' intents: sorted set of waiting writer's owner token ->
--          when its place expires (server ms)
-- KEYS[4]  readers' turn: `waiting` while a reader waits, `turn` for a
--          moment after a writer left while one waited
-- KEYS[5]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  0 to take the lease or not; else, when it is blocked, mark that
--          a reader waits, for this many milliseconds
-- ARGV[4]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (DELAY_MS 0: none; see node_delay): in the node's delay
--          the answer is {2, ms}, nothing granted nor kept for ms more
-- Returns {1, 0}: the read lease is ours, for ARGV[2] from now,
--         {0, ms}: a writer holds the lock (ms: its remaining lease) or
--            waits for it (ms: until its place expires unless refreshed);
--            -1 when unknown.
--
-- Writers are not starved: while a writer's intent is live, no new reader
-- gets in, so the readers inside drain and the writer takes the lock.
-- Readers are not starved either: a blocked reader that waits marks it, and
-- a writer that releases while one is marked gives the readers a turn
-- (rw_write_release.lua), during which readers get in past the intents and
-- no writer does. So a waiting reader waits at most for the writer holding
-- the lock and the one that takes it next. A reader already in the set (an
-- attempt whose answer was lost, sent again) keeps its lease, refreshed.
-- Expired readers and intents are dropped first, so a crashed reader blocks
-- writers at most until its own lease ends.
local token, lease, stay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delayed = node_delay(KEYS[5], ARGV[4], false)
if delayed > 0 then
  return {2, delayed}
end
local now_ms = drop_expired_permits(KEYS[2])
drop_expired_permits(KEYS[3])
local expires = string.format('%.0f', now_ms + lease)
if redis.call('ZSCORE', KEYS[2], token) then
  redis.call('ZADD', KEYS[2], 'XX', expires, token)
  expire_with_last_permit(KEYS[2])
  return {1, 0}
end
local turn = redis.call('GET', KEYS[4]) == 'turn'
local function blocked(ms)
  if stay > 0 and not turn then
    redis.call('SET', KEYS[4], 'waiting', 'PX', stay)
  end
  return {0, ms}
end
local writer_ttl = redis.call('PTTL', KEYS[1])
if writer_ttl ~= -2 then
  return blocked(writer_ttl)
end
local intent = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if intent and not turn then
  return blocked(tonumber(intent) - now_ms)
end
redis.call('ZADD', KEYS[2], expires, token)
expire_with_last_permit(KEYS[2])
return {1, 0}
