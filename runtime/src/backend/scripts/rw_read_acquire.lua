-- Take a read lease of a read/write lock, if no writer holds it or waits.
-- KEYS[1]  writer key: the writer's owner token, with its lease as TTL
-- KEYS[2]  readers: sorted set of owner token -> lease expiry (server ms)
-- KEYS[3]  writers' intents: sorted set of waiting writer's owner token ->
--          when its place expires (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- Returns {1, 0}: the read lease is ours, for ARGV[2] from now,
--         {0, ms}: a writer holds the lock (ms: its remaining lease) or
--            waits for it (ms: until its place expires unless refreshed);
--            -1 when unknown.
--
-- Writers are not starved: while a writer's intent is live, no new reader
-- gets in, so the readers inside drain and the writer takes the lock. A
-- reader already in the set (an attempt whose answer was lost, sent again)
-- keeps its lease, refreshed. Expired readers and intents are dropped first,
-- so a crashed reader blocks writers at most until its own lease ends.
local token, lease = ARGV[1], tonumber(ARGV[2])
local now_ms = drop_expired_permits(KEYS[2])
drop_expired_permits(KEYS[3])
local expires = string.format('%.0f', now_ms + lease)
if redis.call('ZSCORE', KEYS[2], token) then
  redis.call('ZADD', KEYS[2], 'XX', expires, token)
  expire_with_last_permit(KEYS[2])
  return {1, 0}
end
local writer_ttl = redis.call('PTTL', KEYS[1])
if writer_ttl ~= -2 then
  return {0, writer_ttl}
end
local intent = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if intent then
  return {0, tonumber(intent) - now_ms}
end
redis.call('ZADD', KEYS[2], expires, token)
expire_with_last_permit(KEYS[2])
return {1, 0}
