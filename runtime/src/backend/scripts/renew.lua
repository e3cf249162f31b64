-- Extend the lease only if we still own the lock.
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds
-- Returns 1 when extended, 0 when the lock is gone or owned by someone else.
-- The value may carry the waiters' mark (see prelude.lua).
if held_by(KEYS[1], ARGV[1]) then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
