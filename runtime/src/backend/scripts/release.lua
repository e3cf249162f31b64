-- Delete the lock only if we still own it, and wake waiters.
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  release channel
-- Returns 1 when our lock was deleted, 0 when it was no longer ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
