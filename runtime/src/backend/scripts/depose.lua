-- Depose this node (see DEPOSED in prelude.lua): a manager learned that the
-- Sentinels made another node the primary in its place, while this one may
-- still take writes (Sentinel makes it a replica when it reaches it, some
-- seconds later, or never if it cannot). From now on it grants, hands over
-- and renews nothing, so its holders learn at their next renewal that their
-- lease is lost, before the new primary's lock-delay ends.
-- KEYS[1]  the namespace's node marker
-- ARGV[1]  how long the deposition lasts, in milliseconds
-- Returns 1. A replica refuses the write (READONLY): it was made one
-- already, and grants nothing.
local until_ms = math.floor(clock_us() / 1000) + tonumber(ARGV[1])
redis.call('SET', KEYS[1], DEPOSED .. ' ' .. string.format('%.0f', until_ms))
return 1
