-- Refresh the places of one process's queued waiters in a lock's queue all
-- at once (a place is what acquire.lua keeps for a waiter), and say what
-- those waiters may have missed.
-- KEYS[1]  lock key
-- KEYS[2]  waiter queue (see acquire.lua)
-- KEYS[3]  waiter places
-- ARGV[1]  the refresh's number, kept with its server time in each place so
--          that a release can grant the lock counted from it (release.lua)
-- ARGV[2]  how long each place lasts, in milliseconds
-- ARGV[3], ARGV[4], ...  each waiter's owner token and lease in milliseconds
-- Returns {first, missing...}: when the lock is free, the first live
-- waiter, who may take it ('' when the lock is held, or nobody is queued);
-- then the tokens without a place in the queue. A token that holds the lock
-- (a release granted it) comes as 'token PTTL': the lock's remaining time
-- now, which counted from when the refresh was sent ends before the
-- server's expiry, so the waiter holds at once even if the grant's message
-- is late or lost. The others (left, or dropped as dead) come bare: each
-- must try again. A place is only refreshed, never created, so a waiter
-- that left is not brought back.
local seq, stay = ARGV[1], tonumber(ARGV[2])
local now_ms = math.floor(clock_us() / 1000)
local reply = {''}
local kept = false
for i = 3, #ARGV, 2 do
  local token = ARGV[i]
  if redis.call('ZSCORE', KEYS[2], token) then
    redis.call('HSET', KEYS[3], token,
      string.format('%.0f %s %.0f %s', now_ms + stay, seq, now_ms, ARGV[i + 1]))
    kept = true
  elseif held_by(KEYS[1], token) then
    reply[#reply + 1] = token .. ' ' .. redis.call('PTTL', KEYS[1])
  else
    reply[#reply + 1] = token
  end
end
if kept then
  redis.call('PEXPIRE', KEYS[2], stay)
  redis.call('PEXPIRE', KEYS[3], stay)
  mark_waiters(KEYS[1], true)
end
if kept and redis.call('EXISTS', KEYS[1]) == 0 then
  reply[1] = first_live_waiter(KEYS[2], KEYS[3]) or ''
end
return reply
