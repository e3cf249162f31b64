-- Functions shared by acquire.lua, release.lua, fence.lua, the force-release
-- scripts, the semaphore scripts and the read/write lock scripts; prepended
-- to each of them when it is built, so each still runs as one atomic script.

-- The server's time in microseconds.
local function clock_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- A queued waiter's place, as acquire.lua keeps it in the places hash:
-- 'EXPIRES SEQ REFRESHED LEASE' (server ms, the waiter's refresh number,
-- server ms, ms). Returns expires, seq, refreshed, lease as numbers; nil for
-- a waiter with no place, and nil seq for one without the last three.
local function place_of(waiters_key, token)
  local place = redis.call('HGET', waiters_key, token)
  if not place then
    return nil
  end
  local expires, seq, refreshed, lease = string.match(place, '^(%d+) (%d+) (%d+) (%d+)$')
  if not expires then
    return tonumber(place)
  end
  return tonumber(expires), tonumber(seq), tonumber(refreshed), tonumber(lease)
end

-- The first waiter of the queue whose place has not expired; nil when there
-- is none. Waiters whose place expired (they died, or stopped waiting without
-- saying so) are dropped on the way, in batches that grow from 1 (the usual
-- case: the head is alive) to 896, at most 1024 per call so a script never
-- runs long; false when that many were dropped and the queue goes on: a
-- live waiter may be behind them, so nobody may take the lock past them yet
-- (the next call drops more).
local function first_live_waiter(queue_key, waiters_key)
  local now_ms = clock_us() / 1000
  local from = 0
  for _, batch in ipairs({1, 15, 112, 896}) do
    local heads = redis.call('ZRANGE', queue_key, from, from + batch - 1)
    if #heads == 0 then
      break
    end
    for i, head in ipairs(heads) do
      local expires = place_of(waiters_key, head)
      if expires and expires >= now_ms then
        if from + i > 1 then
          local dead = redis.call('ZRANGE', queue_key, 0, from + i - 2)
          redis.call('ZREM', queue_key, unpack(dead))
          redis.call('HDEL', waiters_key, unpack(dead))
        end
        return head
      end
    end
    from = from + #heads
  end
  if from > 0 then
    local dead = redis.call('ZRANGE', queue_key, 0, from - 1)
    redis.call('ZREM', queue_key, unpack(dead))
    redis.call('HDEL', waiters_key, unpack(dead))
  end
  if redis.call('EXISTS', queue_key) == 0 then
    return nil
  end
  return false
end

-- Removes `token` from the queue; how many waiters are left in it. The
-- queue is counted before the removal: during a slot migration a script may
-- not touch a key that is missing on its node, and the removal of the last
-- waiter deletes the queue.
local function leave_queue(queue_key, waiters_key, token)
  local queued = redis.call('ZCARD', queue_key)
  if queued == 0 then
    return 0
  end
  local removed = redis.call('ZREM', queue_key, token)
  redis.call('HDEL', waiters_key, token)
  return queued - removed
end

-- The waiters' mark: while waiters are queued for a held lock, its value is
-- the holder's owner token behind this prefix (owner tokens start with hex
-- digits, so no token starts with it). A server-native compare-and-delete
-- (DELIFEQ, DELEX IFEQ) or compare-and-renew (SET IFEQ) with the bare token
-- then fails, and the holder falls back to the scripts, which hand the lock
-- to the first waiter: no queued waiter is skipped by a native release.
local WAITERS_MARK = '!'

-- The owner token a lock's value names, without the waiters' mark.
local function holder_of(value)
  if value and string.sub(value, 1, 1) == WAITERS_MARK then
    return string.sub(value, 2)
  end
  return value
end

-- Whether the lock at `lock_key` is held by `token`, marked or not.
local function held_by(lock_key, token)
  return holder_of(redis.call('GET', lock_key)) == token
end

-- Sets the lock to `token` for `lease_ms`, with the waiters' mark when
-- `waiters_left` are queued.
local function set_holder(lock_key, token, lease_ms, waiters_left)
  local value = token
  if waiters_left > 0 then
    value = WAITERS_MARK .. token
  end
  redis.call('SET', lock_key, value, 'PX', lease_ms)
end

-- Marks a held lock's value that waiters are queued (`marked` true) or
-- clears the mark, keeping its TTL; no change when it is as asked.
local function mark_waiters(lock_key, marked)
  local value = redis.call('GET', lock_key)
  if not value then
    return
  end
  local holder = holder_of(value)
  if marked and value == holder then
    redis.call('SET', lock_key, WAITERS_MARK .. holder, 'KEEPTTL')
  elseif not marked and value ~= holder then
    redis.call('SET', lock_key, holder, 'KEEPTTL')
  end
end

-- Notes in the lock's record (see keys.rs) that `token` is granted the lock
-- now, after waiting since it joined the queue (its score there) when it is
-- queued: 'GRANTED QUEUED TOKEN' (server ms; QUEUED '-' when not queued),
-- kept `retention_ms`. Called before the token leaves the queue. Only a
-- waiter's grant is noted: a lock taken at the first attempt was granted
-- when its token was made.
local function record_grant(record_key, queue_key, token, retention_ms)
  local now_ms = math.floor(clock_us() / 1000)
  local queued = redis.call('ZSCORE', queue_key, token)
  local since = '-'
  if queued then
    since = string.format('%.0f', math.floor(tonumber(queued) / 1000))
  end
  redis.call('HSET', record_key, 'granted',
    string.format('%.0f %s %s', now_ms, since, token))
  redis.call('PEXPIRE', record_key, retention_ms)
end

-- Drops the members of a semaphore's holder set whose lease has ended (their
-- score, the expiry in server ms, is not after now), so that a crashed
-- holder's permit comes back when its lease ends; also serves a read/write
-- lock's readers and writers' intents. Returns now in ms.
local function drop_expired_permits(holders_key)
  local now_ms = math.floor(clock_us() / 1000)
  redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', now_ms)
  return now_ms
end

-- Sets the holder set to expire with its last lease, so an idle semaphore
-- leaves nothing behind.
local function expire_with_last_permit(holders_key)
  local last = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', holders_key, last)
  end
end

-- Raises the fencing counter at `counter_key` to max(counter + 1, server
-- time in µs), kept for `retention_ms`: above every token issued so far, so
-- storage that has seen it rejects an evicted holder's writes. Returns the
-- new value as a string.
local function raise_fence(counter_key, retention_ms)
  local raised = (tonumber(redis.call('GET', counter_key)) or 0) + 1
  local clock = clock_us()
  if clock > raised then
    raised = clock
  end
  local text = string.format('%.0f', raised)
  redis.call('SET', counter_key, text, 'PX', retention_ms)
  return text
end

-- What a deposition (see depose.lua) writes in the node marker, as
-- 'deposed UNTIL' (server ms): a manager learned that the Sentinels made
-- another node the primary while this one still takes writes. Until UNTIL
-- the node grants, hands over and renews nothing. A replica it is made gets
-- its data, marker and all, from the new primary; still a primary past
-- UNTIL (Sentinel never reached it, or made it the primary again), it
-- starts its lock-delay at the next grant or renewal (see node_delay).
local DEPOSED = 'deposed'

-- The error a deposed node's grants end in: a manager that follows
-- Sentinel reads it as the node's refusal as no longer the primary, and
-- asks the Sentinels where the primary went.
local DEPOSED_ERROR = 'DEPOSED this server was replaced as the primary (a manager learned of the failover) and grants no lock; reach the primary through the Sentinels'

-- The session a backend's script was sent under (see backend/redis/session.rs):
-- a random nonce written into the script's text, so the script exists only
-- in the one server process where that backend loaded and ran it first.
-- Empty in a script sent without one, and before Redis 7 (whose snapshots
-- keep scripts, and whose replicas get them): such a script never takes
-- node_delay's fast path.
local SESSION = ''

-- Sets the marker to `value`, an identity under which the node may grant,
-- and leaves what node_delay's fast path needs: the marker's write goes to
-- replicas and the AOF as every write does; with a SESSION, `value` is also
-- kept, for half the delay and at most a second, under the marker's name
-- followed by SESSION (the note), written without replication: no replica
-- and no AOF gets it. The note is this process's own:
-- - a process that becomes a replica loses it in a full resynchronisation
--   (its data is replaced by its primary's, which never had it); a partial
--   one is accepted only from a replica whose replicated history ends
--   before its new primary's promotion, so the note, written with the
--   marker's write, is older than the promotion and ends before the
--   promoted node's delay does: nothing granted there can be missing here
--   while the note lasts (as the delay itself, this assumes the managers of
--   a namespace keep one delay);
-- - a process started from a snapshot that holds it cannot run the script
--   of its SESSION (see SESSION).
local function vouch(marker_key, value, delay_ms)
  redis.call('SET', marker_key, value)
  if SESSION == '' then
    return
  end
  local kept_ms = math.max(1, math.min(1000, math.floor(delay_ms / 2)))
  redis.set_repl(redis.REPL_NONE)
  redis.call('SET', marker_key .. SESSION, value, 'PX', kept_ms)
  redis.set_repl(redis.REPL_ALL)
end

-- The lock-delay (see the guide, deployments, "Failover and restarts"): a node promoted
-- to primary, or restarted without its data or from a stale snapshot, may
-- have lost grants whose holders still believe them valid, so it grants and
-- hands over nothing until `delay_ms` after it first sees the change (a
-- lease still held there is renewed: its grant survived). Decided in
-- the script that grants or renews, so every manager honours it and no grant
-- slips in between the change and the delay. The marker, one key per
-- namespace, holds 'RUN_ID:REPLID UNTIL': the identity this node last
-- granted under (its process's run_id, new at every start; its replication
-- id, new at a promotion and at a start without its data) and the server ms
-- its delay ends (0: none). Another identity in the marker (promoted,
-- restarted from a snapshot), no marker on a node that was promoted (it never
-- reached it), no marker when a lease is `renewed` or released (the data
-- that held it was lost), or no marker on a node whose run_id is not the one
-- the caller saw when it connected (restarted empty since) starts a delay. A
-- node never promoted and never marked, of the run_id the caller saw (or
-- the caller saw none), is new: it marks itself and grants, unless the
-- caller asks (a '+' after DELAY_MS) that a node up for less than the delay
-- keeps it until it has been up that long (it may have restarted empty).
-- `check` is the caller's argument 'DELAY_MS[+][ SEEN_RUN_ID]'; a DELAY_MS of
-- 0 turns the check off. Returns the ms left of the delay; 0 when the node
-- may grant. A deposed node (see DEPOSED) fails a grant with DEPOSED_ERROR,
-- and answers a hand-over or renewal (`renewed`) with -1: it hands over and
-- renews nothing.
--
-- The fast path, without INFO: a script of a SESSION runs only in the
-- process where it was sent (see SESSION), so the marker equal to what the
-- full path left for that SESSION in this process's own data (see vouch)
-- means the full path would answer 0 as it did then.
local function node_delay(marker_key, check, renewed)
  local delay_ms = tonumber(string.match(check or '0', '^%d+') or '0')
  if delay_ms <= 0 then
    return 0
  end
  local marker = redis.call('GET', marker_key)
  if SESSION ~= '' and marker and marker == redis.call('GET', marker_key .. SESSION) then
    return 0
  end
  local server = redis.call('INFO', 'server')
  local replication = redis.call('INFO', 'replication')
  local run_at = string.find(server, 'run_id:', 1, true) + 7
  local replid_at = string.find(replication, 'master_replid:', 1, true) + 14
  local identity = string.sub(server, run_at, run_at + 39) .. ':'
    .. string.sub(replication, replid_at, replid_at + 39)
  if marker == identity .. ' 0' then
    if SESSION ~= '' then
      vouch(marker_key, marker, delay_ms)
    end
    return 0
  end
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local marked, until_ms = string.match(marker or '', '^(%S+) (%d+)$')
  if marked == DEPOSED and tonumber(until_ms) > now_ms then
    if renewed then
      return -1
    end
    error({err = DEPOSED_ERROR})
  end
  if marked == identity then
    local left = tonumber(until_ms) - now_ms
    if left > 0 then
      return left
    end
    vouch(marker_key, identity .. ' 0', delay_ms)
    return 0
  end
  local second_at = string.find(replication, 'master_replid2:', 1, true) + 15
  local promoted = string.find(string.sub(replication, second_at, second_at + 39), '[^0]')
  local seen = string.match(check, ' (%x+)$')
  local same_process = not seen or seen == string.sub(server, run_at, run_at + 39)
  if not marker and not promoted and not renewed and same_process then
    local up_ms = tonumber(string.match(server, 'uptime_in_seconds:(%d+)')) * 1000
    if not string.find(check, '+', 1, true) or up_ms >= delay_ms then
      vouch(marker_key, identity .. ' 0', delay_ms)
      return 0
    end
    delay_ms = delay_ms - up_ms
  end
  redis.call('SET', marker_key, identity .. ' ' .. string.format('%.0f', now_ms + delay_ms))
  return delay_ms
end

-- The fencing token's issue, shared by fence.lua (a holder asks) and
-- acquire_fenced.lua (the acquisition that takes the lock issues it). The
-- caller has checked that the lock is held by the owner the token goes to:
-- tokens of a key are issued only to its holders.
--
-- Token = max(counter + 1, server time in microseconds), and the counter is
-- set to it. Every token is then above every earlier token of the key, even
-- when the counter came back stale or not at all: a restart from an old
-- snapshot or an unsynced AOF, a failover to a lagging replica, an expired
-- counter. Tokens of one key are issued only to its holders, one holder at a
-- time, and each issue takes a round trip, far more than a microsecond, so as
-- long as the server clock does not step back every token is at most the
-- clock when it was issued, and the clock alone puts a new token above all of
-- them. The counter covers a clock that does step back (an NTP correction) or
-- runs behind another node's (Redlock writes its token back with
-- fence_floor.lua): while it lives, tokens keep rising until the clock
-- catches up.
--
-- Retention: the counter expires `retention_ms` after the last token was
-- issued, so idle keys leave nothing behind. A clock set back by less than
-- the retention still cannot repeat a token: if less than that passed since
-- the last token the counter is still there, and if more passed the clock is
-- past the last token again anyway.
--
-- The counter is written with SET ... GET (clock value, previous value in one
-- command); the rare previous value at or above the clock is written again.
local function issue_fence(counter_key, retention_ms)
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local previous = redis.call('SET', counter_key, string.format('%.0f', clock),
    'PX', retention_ms, 'GET')
  local stored = tonumber(previous) or 0
  if stored < clock then
    return clock
  end
  redis.call('SET', counter_key, string.format('%.0f', stored + 1), 'PX', retention_ms)
  return stored + 1
end
