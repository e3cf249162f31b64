-- Extend one leased member of a set if it is still ours: a permit of a
-- semaphore, or a read lease of a read/write lock.
-- KEYS[1]  lease set (a semaphore's holders or a read/write lock's readers)
-- KEYS[2]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds
-- ARGV[3]  the lock-delay in milliseconds (0: none): the node is looked at
--          as renew.lua does (a lease still found is renewed)
-- Returns 1 when extended, 0 when the lease is gone: its lease ended (it
-- is dropped here if still listed) or its member was removed, or the node
-- was deposed (see DEPOSED in prelude.lua).
if node_delay(KEYS[2], ARGV[3], true) < 0 then
  return 0
end
local now_ms = drop_expired_permits(KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX',
  string.format('%.0f', now_ms + tonumber(ARGV[2])), ARGV[1])
expire_with_last_permit(KEYS[1])
return 1
