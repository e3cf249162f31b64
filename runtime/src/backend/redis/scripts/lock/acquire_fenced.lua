-- Take a lock with SET NX PX, as the uncontended attempt does (see
-- commands.rs: like it, this does not look at the waiter queue), and issue
-- its fencing token in the same call (see `issue_fence` in prelude.lua): the first
-- attempt of a `fenced` lock, one script instead of a SET and fence.lua.
-- Only the owner that took the lock gets the token.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key
-- KEYS[3]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  retention of the counter in milliseconds, as in fence.lua
-- ARGV[4]  the lock-delay check, 'DELAY_MS' or 'DELAY_MS SEEN_RUN_ID'
--          (DELAY_MS 0: none; see node_delay)
-- Returns one integer (a table reply costs Redis more to build and send):
--   the token (at least 1) when the lock is ours now,
--   0 when it is ours but its token could not be issued (the counter key
--     holds another type): the lock stays taken, as a SET's would, and the
--     holder asks for the token on request,
--   -2 - ms when it is held: ms is the holder's remaining TTL (-1: none);
-- or {2, ms} when the node is in its lock-delay for ms more (rare, so the
-- table costs nothing on the usual path).
-- A failed write of the counter is caught: Redis does not undo the SET of a
-- script that fails after it, which would leave a lock nobody knows it has.
local delayed = node_delay(KEYS[3], ARGV[4], false)
if delayed > 0 then
  return {2, delayed}
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -2 - redis.call('PTTL', KEYS[1])
end
local issued, fence = pcall(issue_fence, KEYS[2], ARGV[3])
if not issued then
  return 0
end
return fence
