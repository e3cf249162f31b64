-- Take every permit of a semaphore back whoever holds them (an operator's
-- decision), and wake every waiter.
-- KEYS[1]  holder set (see semaphore_acquire.lua), also the release channel
-- ARGV[1]  most evicted holders to return
-- Returns {owner tokens of the evicted holders, earliest lease end first (at
-- most ARGV[1]); how many permits were held}. Leases that had ended are not
-- counted.
--
-- Each evicted holder's next renewal (member_renew.lua) finds its member
-- gone and is refused, so its body is cancelled as for any lost lease. The
-- message `*` wakes every waiting acquirer of each listening process (see
-- backend/redis/notify.rs): any number of permits may now be free.
drop_expired_permits(KEYS[1])
local evicted = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local count = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], '*')
return {evicted, count}
