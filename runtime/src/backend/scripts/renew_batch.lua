-- Extend many leases at once, each only if it is still ours: a lock's (or a
-- writer's) key compared with GET (through the waiters' mark, see
-- prelude.lua) and extended with PEXPIRE, as renew.lua does; a member of a lease set (a semaphore's permit or a read lease)
-- compared with ZSCORE and extended with ZADD XX, as member_renew.lua does.
-- KEYS[i]      the i-th lease's key, or its lease set
-- ARGV[3i-2]   its owner token
-- ARGV[3i-1]   its new lease in milliseconds
-- ARGV[3i]     'k' for a key, 'm' for a member of a lease set
-- Returns one integer per lease, in order: 1 when extended, 0 when it is
-- gone or someone else's.
local renewed = {}
for i, key in ipairs(KEYS) do
  local token, ttl_ms, kind = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  renewed[i] = 0
  if kind == 'k' then
    if held_by(key, token) then
      renewed[i] = redis.call('PEXPIRE', key, ttl_ms)
    end
  else
    local now_ms = drop_expired_permits(key)
    if redis.call('ZSCORE', key, token) then
      redis.call('ZADD', key, 'XX',
        string.format('%.0f', now_ms + tonumber(ttl_ms)), token)
      expire_with_last_permit(key)
      renewed[i] = 1
    end
  end
end
return renewed
