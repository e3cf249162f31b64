-- Release a lock within its hold_at_least: keep it, but only until the hold
-- ends, and note in the lock's record that its holder released it, so that
-- operators tell the hold's designed end from a holder that stopped
-- renewing (both are an expiry).
-- KEYS[1]  lock key
-- KEYS[2]  the lock's record (see keys.rs)
-- ARGV[1]  owner token
-- ARGV[2]  what is left of the hold, in milliseconds
-- Returns 1 when the lock was ours (and now ends with the hold), 0 when it
-- is gone or someone else's. The record ends with the lock.
if not held_by(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 'released', ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
