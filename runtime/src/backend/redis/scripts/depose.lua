-- Depose this node (see DEPOSED in prelude.lua): a manager learned that the
-- Sentinels made another node the primary in its place, while this one may
-- still take writes (Sentinel makes it a replica when it reaches it, some
-- seconds later, or never if it cannot). From now on it grants, hands over
-- and renews nothing, so its holders learn at their next renewal that their
-- lease is lost, before the new primary's lock-delay ends.
-- KEYS[1]  the namespace's node marker
-- ARGV[1]  how long the deposition lasts, in milliseconds
-- ARGV[2]  the run_id of the node the Sentinels name now ('': unknown): a
--          node of that run_id is that primary under another address (the
--          Sentinels announce it otherwise), and is not deposed
-- Returns 1 when deposed, 0 when this node is the new primary itself. A
-- replica refuses the write (READONLY): it was made one already, and grants
-- nothing.
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if ARGV[2] ~= '' and run_id == ARGV[2] then
  return 0
end
local until_ms = math.floor(clock_us() / 1000) + tonumber(ARGV[1])
redis.call('SET', KEYS[1], DEPOSED .. ' ' .. string.format('%.0f', until_ms))
return 1
