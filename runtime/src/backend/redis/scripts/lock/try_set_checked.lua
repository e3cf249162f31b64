-- The uncontended attempt where a lock-delay is kept: the node's check (see
-- node_delay in prelude.lua), then `SET key token NX PX ttl`, the plain
-- attempt commands.rs sends alone when none is kept. Like it, this does not
-- look at the waiter queue.
-- KEYS[1]  lock key
-- KEYS[2]  the namespace's node marker
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (see node_delay)
-- Returns one integer: 1 when the lock is ours now, 0 when it is held, and
-- -ms when the node is in its lock-delay for ms more.
local delayed = node_delay(KEYS[2], ARGV[3], false)
if delayed > 0 then
  return -delayed
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
