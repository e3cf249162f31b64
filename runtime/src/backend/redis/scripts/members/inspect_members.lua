-- What one semaphore or read/write lock looks like now, for operators;
-- changes nothing.
-- KEYS[1]  lease set: a semaphore's holders or a read/write lock's readers,
--          sorted set of owner token -> lease end (server ms)
-- KEYS[2]  (read/write lock only) writer key
-- KEYS[3]  (read/write lock only) writers' intents, as KEYS[1]
-- KEYS[4]  (read/write lock only) writers' fencing counter
-- ARGV[1]  most lease holders to return
-- Returns {live lease holders, earliest lease end first (at most ARGV[1]),
-- flattened as owner token, remaining ms (a string), ...; number of live lease holders;
-- writer's owner token or ''; its remaining TTL in ms (-2: none); live
-- writers' intents; writers' fencing counter or ''}. Leases that ended but
-- were not dropped yet are not counted.
local now_ms = math.floor(clock_us() / 1000)
local after_now = '(' .. now_ms
local members = redis.call('ZRANGEBYSCORE', KEYS[1], after_now, '+inf', 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[1]))
local live = {}
for i = 1, #members, 2 do
  live[#live + 1] = members[i]
  live[#live + 1] = tostring(tonumber(members[i + 1]) - now_ms)
end
local count = redis.call('ZCOUNT', KEYS[1], after_now, '+inf')
if #KEYS == 1 then
  return {live, count, '', -2, 0, ''}
end
return {
  live,
  count,
  redis.call('GET', KEYS[2]) or '',
  redis.call('PTTL', KEYS[2]),
  redis.call('ZCOUNT', KEYS[3], after_now, '+inf'),
  redis.call('GET', KEYS[4]) or '',
}
