-- What one lock looks like now, for operators; changes nothing.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- KEYS[3]  waiter queue (see acquire.lua)
-- KEYS[4]  waiter places
-- KEYS[5]  the lock's record (see keys.rs)
-- ARGV[1]  most queued waiters to return
-- Returns {holder's owner token or '', its remaining TTL in ms (-2: no
-- lock), fencing counter or '', queued waiters' owner tokens in arrival
-- order whose place has not expired (at most ARGV[1]), number of queued
-- waiters, ms since the holder was granted the lock, ms it waited in the
-- queue before (these two -1 when the record notes no grant to this
-- holder, or no place in the queue), 1 when the holder released it within
-- its hold_at_least (it ends with the hold) else 0}. ('' rather than false:
-- RESP3 clients would get a boolean.)
local now_ms = clock_us() / 1000
local queued = redis.call('ZRANGE', KEYS[3], 0, -1)
local live = {}
for _, token in ipairs(queued) do
  local expires = place_of(KEYS[4], token)
  if expires and expires >= now_ms and #live < tonumber(ARGV[1]) then
    live[#live + 1] = token
  end
end
local holder = holder_of(redis.call('GET', KEYS[1]))
local granted_ago, waited = -1, -1
local record = redis.call('HGET', KEYS[5], 'granted')
if holder and record then
  local granted, queued, token = string.match(record, '^(%d+) (%S+) (.*)$')
  if token == holder then
    granted_ago = math.max(0, math.floor(now_ms) - tonumber(granted))
    if tonumber(queued) then
      waited = math.max(0, tonumber(granted) - tonumber(queued))
    end
  end
end
return {
  holder or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]) or '',
  live,
  #queued,
  granted_ago,
  waited,
  (holder and redis.call('HGET', KEYS[5], 'released') == holder) and 1 or 0,
}
