-- Extend the lease only if we still own the lock.
-- KEYS[1]  lock key
-- KEYS[2]  the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds
-- ARGV[3]  the lock-delay in milliseconds (0: none)
-- Returns 1 when extended, 0 when the lock is gone or owned by someone else,
-- or the node was deposed.
-- The value may carry the waiters' mark (see prelude.lua).
-- A deposed node (see DEPOSED in prelude.lua) renews nothing: its holders
-- learn at once that their lease is lost.
-- A renewal also looks at the node (node_delay): one whose identity
-- changed, or that lost the marker with its data, starts its lock-delay.
-- A lease still found here is renewed all the same: its grant survived,
-- and nobody else is granted the lock while it lasts.
if node_delay(KEYS[2], ARGV[3], true) < 0 then
  return 0
end
if held_by(KEYS[1], ARGV[1]) then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
