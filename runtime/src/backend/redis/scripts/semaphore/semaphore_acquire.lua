-- Take one permit of a counting semaphore, if fewer than N are held.
-- KEYS[1]  holder set: sorted set of owner token -> lease expiry (server ms);
--          also the release channel
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- KEYS[2]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[3]  N, the number of permits (at least 1), as this caller sees it
-- ARGV[4]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (DELAY_MS 0: none; see node_delay)
-- Returns {1, free}: the permit is ours, with a lease of ARGV[2] from now;
--            `free` permits were left after it (by this caller's N),
--         {0, ms}: all N permits are held; the earliest lease ends in `ms`,
--         {2, ms}: the node is in its lock-delay for `ms` more.
--
-- Leases that ended are dropped first, so a crashed holder's permit comes
-- back when its lease ends; there is no shared counter to leak. N is not
-- stored: each acquisition counts the current holders against its own N.
-- With a smaller N than holders, newcomers wait until holders drop below it;
-- holders are never revoked. A token already in the set (an attempt whose
-- answer was lost, sent again) keeps its permit, with a fresh lease.
local token, lease, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delayed = node_delay(KEYS[2], ARGV[4], false)
if delayed > 0 then
  return {2, delayed}
end
local now_ms = drop_expired_permits(KEYS[1])
local expires = string.format('%.0f', now_ms + lease)
local held = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], token) then
  redis.call('ZADD', KEYS[1], 'XX', expires, token)
  expire_with_last_permit(KEYS[1])
  return {1, math.max(permits - held, 0)}
end
if held < permits then
  redis.call('ZADD', KEYS[1], expires, token)
  expire_with_last_permit(KEYS[1])
  return {1, permits - held - 1}
end
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
return {0, tonumber(earliest) - now_ms}
