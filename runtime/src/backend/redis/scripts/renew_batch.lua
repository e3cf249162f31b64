-- Extend many leases of one length at once, each only if it is still ours: a
-- lock's (or a writer's) key compared with GET (through the waiters' mark,
-- see prelude.lua) and extended with PEXPIRE, as renew.lua does; a member of
-- a lease set (a semaphore's permit or a read lease) compared with ZSCORE and
-- extended with ZADD XX, as member_renew.lua does. One argument per lease
-- (its token), so the server parses and interns as little as it can.
-- KEYS[1..n]    the keys of the plain leases
-- KEYS[n+1..]   the lease sets of the members
-- KEYS[#KEYS]   the namespace's node marker (see node_delay in prelude.lua)
-- ARGV[1]       the new lease of every one, in milliseconds
-- ARGV[2]       n, how many of KEYS are plain leases
-- ARGV[2+i]     the owner token of the lease at KEYS[i]
-- ARGV[#ARGV]   the lock-delay in milliseconds (0: none): the node is
--               looked at as renew.lua does (a lease still found is renewed)
-- Returns one character per key, in order, as one string: '1' when extended,
-- '0' when it is gone or someone else's, or the node was deposed (see
-- DEPOSED in prelude.lua; one reply to build and parse, not one integer per
-- lease).
local ttl_ms, plain = ARGV[1], tonumber(ARGV[2])
local leases = #KEYS - 1
if node_delay(KEYS[#KEYS], ARGV[#ARGV], true) < 0 then
  return string.rep('0', leases)
end
local renewed = {}
for i = 1, plain do
  local key, token = KEYS[i], ARGV[2 + i]
  local value = redis.call('GET', key)
  renewed[i] = '0'
  if (value == token or holder_of(value) == token)
      and redis.call('PEXPIRE', key, ttl_ms) == 1 then
    renewed[i] = '1'
  end
end
for i = plain + 1, leases do
  local key, token = KEYS[i], ARGV[2 + i]
  local now_ms = drop_expired_permits(key)
  renewed[i] = '0'
  if redis.call('ZSCORE', key, token) then
    redis.call('ZADD', key, 'XX',
      string.format('%.0f', now_ms + tonumber(ttl_ms)), token)
    expire_with_last_permit(key)
    renewed[i] = '1'
  end
end
return table.concat(renewed)
