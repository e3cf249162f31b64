//! What a `redis-server` holds, read directly with the testkit's client:
//! lock keys, fencing counters, release-channel subscribers, command counts.
//! The names follow the default namespace (`lock:<key>`, `lock-fence:<key>`).

use leasehold_testkit::{RedisServer, RespValue};

use super::wait::{poll_async, PROMPTLY};

/// The value of the lock key of `key` (`lock:<key>`) on `server`: the
/// holder's owner token (behind the waiters' mark `!` while waiters are
/// queued), or `Nil` when nobody holds it there.
pub fn lock_value(server: &RedisServer, key: &str) -> RespValue {
    server
        .command(&["GET", &format!("lock:{key}")])
        .unwrap_or_else(|err| panic!("GET lock:{key} failed: {err}"))
}

/// The owner token a lock key's value names, without the waiters' mark.
pub fn holder_token(value: &RespValue) -> Option<&str> {
    value
        .as_str()
        .map(|value| value.strip_prefix('!').unwrap_or(value))
}

/// The fencing counter of `key` (`lock-fence:<key>`) on `server`, if any.
pub fn fence_counter(server: &RedisServer, key: &str) -> Option<u64> {
    let reply = server
        .command(&["GET", &format!("lock-fence:{key}")])
        .unwrap_or_else(|err| panic!("GET lock-fence:{key} failed: {err}"));
    reply.as_str().map(|value| {
        value
            .parse()
            .unwrap_or_else(|_| panic!("fencing counter {value:?} is not a u64"))
    })
}

/// Calls of `command` (lowercase, as `INFO commandstats` names it) the
/// server has answered.
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    server
        .info_commandstats()
        .get(command)
        .copied()
        .unwrap_or(0)
}

/// The channels the server has subscribers for, among those matching `pattern`.
pub fn subscribed_channels(server: &RedisServer, pattern: &str) -> Vec<String> {
    match server.command(&["PUBSUB", "CHANNELS", pattern]) {
        Ok(RespValue::Array(channels)) => channels
            .iter()
            .filter_map(|channel| channel.as_str().map(str::to_owned))
            .collect(),
        other => panic!("PUBSUB CHANNELS replied {other:?}"),
    }
}

/// The keys the server holds that match the glob `pattern`, fencing
/// counters and the namespace's node marker aside (they outlive every lease
/// on purpose).
pub fn keys_besides_fences(server: &RedisServer, pattern: &str) -> Vec<String> {
    match server.command(&["KEYS", pattern]) {
        Ok(RespValue::Array(keys)) => keys
            .iter()
            .filter_map(|key| key.as_str().map(str::to_owned))
            .filter(|key| !key.contains("fence") && !key.contains("-node:"))
            .collect(),
        other => panic!("KEYS replied {other:?}"),
    }
}

/// Asserts that the server gets a subscriber for `channel` (and no other
/// channel matching it) within [`PROMPTLY`]: a waiter that has not subscribed
/// can only be woken by the holder's TTL.
pub async fn assert_subscribed_soon(server: &RedisServer, channel: &str) {
    let subscribed = poll_async(PROMPTLY, || async {
        subscribed_channels(server, channel) == [channel]
    })
    .await;
    assert!(
        subscribed,
        "no subscriber for `{channel}` within {PROMPTLY:?}: the waiter can only be woken by the holder's TTL"
    );
}
