-- Issue the next fencing token of a lock to its current holder (see
-- `issue_fence` in prelude.lua for what a token is and why it always rises).
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key
-- ARGV[1]  owner token
-- ARGV[2]  retention of the counter in milliseconds: max(2 x lease,
--          10 minutes), capped at 100 years (computed by the client)
-- Returns the token, or -1 when the lock is not ours (then nobody gets one:
-- a holder whose lease ended cannot obtain a token newer than its
-- successor's).
if not held_by(KEYS[1], ARGV[1]) then
  return -1
end
return issue_fence(KEYS[2], ARGV[2])
