-- Free a lock whoever holds it (an operator's decision), and fence off the
-- evicted holder.
-- KEYS[1]  lock key (also the release channel)
-- KEYS[2]  fencing counter
-- ARGV[1]  retention of the counter in milliseconds, as in fence.lua
-- Returns {the evicted holder's owner token or '' (none), the fencing
-- counter now}.
--
-- The counter is raised to max(counter + 1, server time in µs), as fence.lua
-- issues tokens: above every token issued so far, so storage that has seen
-- the raised value (or any later holder's token) rejects the evicted
-- holder's writes. The evicted holder's next renewal fails and its body is
-- cancelled. Waiters are woken as by a release; queued waiters keep their
-- places and take the lock in arrival order.
local holder = holder_of(redis.call('GET', KEYS[1]))
redis.call('DEL', KEYS[1])
local raised = raise_fence(KEYS[2], ARGV[1])
redis.call('PUBLISH', KEYS[1], '1')
return {holder or '', raised}
