-- What one lock looks like now, for operators; changes nothing.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- KEYS[3]  waiter queue (see acquire.lua)
-- KEYS[4]  waiter places
-- ARGV[1]  most queued waiters to return
-- Returns {holder's owner token or '', its remaining TTL in ms (-2: no
-- lock), fencing counter or '', queued waiters' owner tokens in arrival
-- order whose place has not expired (at most ARGV[1]), number of queued
-- waiters}. ('' rather than false: RESP3 clients would get a boolean.)
local now_ms = clock_us() / 1000
local queued = redis.call('ZRANGE', KEYS[3], 0, -1)
local live = {}
for _, token in ipairs(queued) do
  local expires = place_of(KEYS[4], token)
  if expires and expires >= now_ms and #live < tonumber(ARGV[1]) then
    live[#live + 1] = token
  end
end
return {
  holder_of(redis.call('GET', KEYS[1])) or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]) or '',
  live,
  #queued,
}
