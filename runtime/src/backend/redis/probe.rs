//! Checking one Redis node without taking a lock (`LockManager::check`): a
//! `PING`'s round trip, `HELLO`'s server and version, every command, key
//! pattern and channel pattern the locks need tried in a form that changes
//! nothing (so an ACL refusal shows now, not at the first lock), and the
//! settings `INFO` shows that weaken the lock's guarantees.
//!
//! Redis checks a command's ACL (its keys and channels included) before it
//! runs it, and before a cluster redirects it, so a harmless form of each
//! command is refused exactly when the lock's own use of it would be: `SET …
//! XX` and `ZADD … XX` on a key that does not exist, `EVALSHA` of a script
//! the server does not know (`NOSCRIPT` when allowed), `WAIT 0 0`. The
//! writes are `HSET` of a probe hash, deleted at once, and `SCRIPT LOAD` of
//! a one-line script that returns 0; the probe keys have a random name in
//! the manager's namespace, which no lock uses.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, Pipeline, RedisError, RedisResult, Value};

use super::acl::permission_denied;
use super::connection::lock_error;
use super::native::{server_of, Native, NativeRelease};
use crate::check::{CheckReport, LockDelayState, NodeReport, NodeRole, Risk};
use crate::keys::LockKey;
use crate::LockError;

/// A clock that moved this much more or less than ours during the check,
/// beyond the check's round trips, is reported.
const CLOCK_JUMP: Duration = Duration::from_millis(250);

/// How a probe reaches its node.
pub(in crate::backend) enum Via {
    /// The manager's connection to one server.
    Server(ConnectionManager),
    /// One node of a cluster, addressed through the cluster connection.
    ClusterNode {
        connection: ClusterConnection,
        /// The node's route, by its address.
        node: SingleNodeRoutingInfo,
        /// The slot ranges it serves, whose node markers show its lock-delay.
        slots: Vec<RangeInclusive<usize>>,
    },
}

/// The route to the cluster node at `host:port`.
pub(in crate::backend) fn by_address(host: String, port: u16) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::ByAddress { host, port }
}

impl Via {
    async fn run(&mut self, command: &Cmd) -> RedisResult<Value> {
        match self {
            Via::Server(connection) => command.query_async(connection).await,
            Via::ClusterNode {
                connection, node, ..
            } => {
                let route = RoutingInfo::SingleNode(node.clone());
                connection.route_command(command.clone(), route).await
            }
        }
    }

    /// The replies to `count` commands sent in one `pipeline`.
    async fn run_pipeline(&mut self, pipeline: Pipeline, count: usize) -> RedisResult<Vec<Value>> {
        match self {
            Via::Server(connection) => pipeline.query_async(connection).await,
            Via::ClusterNode {
                connection, node, ..
            } => {
                let node = node.clone();
                connection.route_pipeline(pipeline, 0, count, node).await
            }
        }
    }
}

/// What the locks of a deployment need of each node.
pub(in crate::backend) struct Needs<'a> {
    /// Names in the manager's namespace that no lock uses.
    pub(in crate::backend) key: &'a LockKey,
    /// Sharded pub/sub and `CLUSTER SLOTS` (a cluster) instead of plain.
    pub(in crate::backend) cluster: bool,
    /// `ROLE`, with which a Sentinel's primary is confirmed.
    pub(in crate::backend) sentinel: bool,
    /// The native commands the locks use on this node.
    pub(in crate::backend) native: Native,
    /// Whether the grant scripts keep a lock-delay there, which reads
    /// `INFO` and the namespace's node marker: `Some` with the `run_id` the
    /// manager saw when it connected (empty if unknown; always on a
    /// cluster, whose primaries keep the delay per slot).
    pub(in crate::backend) lock_delay: Option<&'a str>,
}

/// What one node's probe found.
pub(in crate::backend) struct Probed {
    pub(in crate::backend) node: NodeReport,
    pub(in crate::backend) risks: Vec<Risk>,
    /// The ACL's refusals (`PermissionDenied`), one per missing rule.
    pub(in crate::backend) refused: Vec<LockError>,
}

/// Probes the node at `address` through `via`; with `subscriber`, a client
/// for the same node, also tries the subscription waiters need.
pub(in crate::backend) async fn probe(
    via: &mut Via,
    address: String,
    role: NodeRole,
    needs: &Needs<'_>,
    subscriber: Option<&Client>,
) -> Probed {
    let mut probed = Probed {
        node: NodeReport::new(address, role),
        risks: Vec::new(),
        refused: Vec::new(),
    };
    let started = Instant::now();
    if let Err(err) = via.run(&redis::cmd("PING")).await {
        probed.node.failure = Some(lock_error(err));
        return probed;
    }
    probed.node.round_trip = Some(started.elapsed());
    let clock_before = (Instant::now(), server_time(via).await);
    if let Ok(hello) = via.run(&redis::cmd("HELLO")).await {
        let (server, version) = server_of(hello);
        if !server.is_empty() {
            probed.node.server = Some(format!("{server} {version}"));
        }
    }
    probed.node.native = needs.native.names();
    for command in commands(needs) {
        if let Err(err) = via.run(&command).await {
            refuse(&mut probed.refused, &err);
        }
    }
    if let Some(client) = subscriber
        && let Err(err) = try_subscribe(client, needs.key.channel()).await
    {
        refuse(&mut probed.refused, &err);
    }
    match via.run(&redis::cmd("INFO")).await {
        Ok(info) => {
            let text = redis::from_redis_value::<String>(info).unwrap_or_default();
            probed.risks = risks_in(&probed.node.address, &text);
            if let Some(seen) = needs.lock_delay {
                probed.node.lock_delay = match needs.cluster {
                    true => slots_lock_delay_of(via, needs.key, &text).await,
                    false => lock_delay_of(via, needs.key.node(), &text, seen).await,
                };
            }
        }
        Err(err) if permission_denied(&err).is_some() => {
            probed.risks.push(Risk::SettingsUnreadable {
                node: probed.node.address.clone(),
            });
        }
        Err(_) => {}
    }
    let clock_after = (Instant::now(), server_time(via).await);
    if let (Some(before), Some(after)) = (clock_before.1, clock_after.1) {
        let ours = clock_after.0.duration_since(clock_before.0);
        let theirs_us = i128::from(after) - i128::from(before);
        let drift_us = theirs_us - i128::try_from(ours.as_micros()).unwrap_or(i128::MAX);
        let allowed = CLOCK_JUMP.saturating_add(probed.node.round_trip.unwrap_or_default() * 2);
        if drift_us.unsigned_abs() > allowed.as_micros() {
            probed.risks.push(Risk::ClockJump {
                node: probed.node.address.clone(),
                drift_ms: i64::try_from(drift_us / 1000).unwrap_or(i64::MAX),
            });
        }
    }
    probed
}

/// Adds what `probed` found to `report`. Fails with every ACL refusal in
/// one `PermissionDenied` (each missing rule named), with a refused login
/// (`Auth`), or with the failure of a `required` node (a primary); an
/// optional node's other failure stays in the report.
pub(in crate::backend) fn settle(
    report: &mut CheckReport,
    probed: Probed,
    required: bool,
) -> Result<(), LockError> {
    let Probed {
        node,
        risks,
        refused,
    } = probed;
    if let Some(denied) = merged(refused) {
        return Err(denied);
    }
    match &node.failure {
        Some(failure @ LockError::Auth { .. }) => return Err(failure.clone()),
        Some(failure) if required => return Err(failure.clone()),
        _ => {}
    }
    report.nodes.push(node);
    report.risks.extend(risks);
    Ok(())
}

/// Several ACL refusals as one `PermissionDenied` that names every rule.
fn merged(refused: Vec<LockError>) -> Option<LockError> {
    let mut details = Vec::new();
    let mut rules = Vec::new();
    let mut first_source = None;
    for denied in refused {
        if let LockError::PermissionDenied {
            detail,
            rule,
            source,
        } = denied
        {
            details.push(detail);
            rules.push(rule);
            first_source = first_source.or(source);
        }
    }
    (!rules.is_empty()).then(|| LockError::PermissionDenied {
        detail: details.join("; "),
        rule: rules.join(" and "),
        source: first_source,
    })
}

/// Adds `err`'s rule to `refused` when it is an ACL refusal of a rule not
/// yet listed.
fn refuse(refused: &mut Vec<LockError>, err: &RedisError) {
    let Some(denied) = permission_denied(err) else {
        return;
    };
    let rule_of = |err: &LockError| match err {
        LockError::PermissionDenied { rule, .. } => Some(rule.clone()),
        _ => None,
    };
    if !refused.iter().any(|seen| rule_of(seen) == rule_of(&denied)) {
        refused.push(denied);
    }
}

/// The node's clock (`TIME`) in µs; `None` when it did not say.
async fn server_time(via: &mut Via) -> Option<u64> {
    let reply = via.run(&redis::cmd("TIME")).await.ok()?;
    let (seconds, micros): (u64, u64) = redis::from_redis_value(reply).ok()?;
    Some(seconds * 1_000_000 + micros)
}

/// Subscribes to `channel` and leaves it again on a connection of its own.
async fn try_subscribe(client: &Client, channel: &str) -> Result<(), RedisError> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    pubsub.unsubscribe(channel).await
}

/// Each command the locks use, in a form that changes nothing (see the
/// module's documentation).
fn commands(needs: &Needs<'_>) -> Vec<Cmd> {
    let names = needs.key.as_lock();
    let (lock, queue, waiters) = (names.lock, names.queue, names.places);
    let command = |words: &[&str]| {
        let mut command = redis::cmd(words[0]);
        for word in &words[1..] {
            command.arg(*word);
        }
        command
    };
    let unknown_script = "0".repeat(40);
    let mut commands = vec![
        command(&["SET", lock, "probe", "XX", "PX", "1"]),
        command(&["GET", lock]),
        command(&["EXISTS", lock]),
        command(&["PEXPIRE", lock, "1"]),
        command(&["PEXPIREAT", lock, "1"]),
        command(&["PTTL", lock]),
        command(&["TIME"]),
        command(&["EVALSHA", &unknown_script, "1", lock]),
        command(&["SCRIPT", "LOAD", "return 0"]),
        command(&["ZADD", queue, "XX", "0", "probe"]),
        command(&["ZCARD", queue]),
        command(&["ZCOUNT", queue, "0", "0"]),
        command(&["ZRANGE", queue, "0", "0"]),
        command(&["ZRANGEBYSCORE", queue, "0", "0"]),
        command(&["ZREM", queue, "probe"]),
        command(&["ZREMRANGEBYSCORE", queue, "0", "0"]),
        command(&["ZSCORE", queue, "probe"]),
        command(&["HGET", waiters, "probe"]),
        command(&["HSET", waiters, "probe", "1"]),
        command(&["HDEL", waiters, "probe"]),
        command(&["HGET", needs.key.as_lock().record, "probe"]),
        command(&["DEL", lock, waiters]),
        command(&["WAIT", "0", "0"]),
    ];
    if needs.cluster {
        commands.push(command(&["SPUBLISH", needs.key.channel(), ""]));
        commands.push(command(&["CLUSTER", "SLOTS"]));
    } else {
        commands.push(command(&["PUBLISH", needs.key.channel(), ""]));
    }
    if needs.sentinel {
        commands.push(command(&["ROLE"]));
    }
    if needs.lock_delay.is_some() {
        commands.push(command(&["INFO", "replication"]));
    }
    match needs.native.release {
        Some(NativeRelease::DelIfEq) => commands.push(command(&["DELIFEQ", lock, "probe"])),
        Some(NativeRelease::DelExIfEq) => {
            commands.push(command(&["DELEX", lock, "IFEQ", "probe"]));
        }
        None => {}
    }
    commands
}

/// Where the server behind `connection` stands in its lock-delay now, as
/// [`probe`] reports it (its `INFO`, node marker `marker_key` and clock,
/// against the `run_id` the manager saw, `seen`): for `dlock show` and
/// `LockManager::lock_delay_state`. Fails only when `INFO` does.
pub(in crate::backend) async fn lock_delay_now(
    connection: ConnectionManager,
    marker_key: &str,
    seen: &str,
) -> Result<Option<LockDelayState>, LockError> {
    let mut via = Via::Server(connection);
    let info = via.run(&redis::cmd("INFO")).await.map_err(lock_error)?;
    let text = redis::from_redis_value::<String>(info).unwrap_or_default();
    Ok(lock_delay_of(&mut via, marker_key, &text, seen).await)
}

/// Where the node stands in its lock-delay: its node marker (`marker_key`)
/// read against its identity in `INFO`'s `text`, the `run_id` the manager
/// saw (`seen`) and its clock.
async fn lock_delay_of(
    via: &mut Via,
    marker_key: &str,
    text: &str,
    seen: &str,
) -> Option<LockDelayState> {
    let marker = via.run(redis::cmd("GET").arg(marker_key)).await.ok()?;
    let marker: Option<String> = redis::from_redis_value(marker).ok()?;
    let now_ms = server_time(via).await? / 1000;
    lock_delay_in(text, marker.as_deref(), seen, now_ms)
}

/// Node markers read in one round trip by [`slots_lock_delay_of`].
const MARKERS_PER_TRIP: usize = 1024;

/// Where a cluster primary stands in its lock-delay, which it keeps per
/// slot (see `keys`): the longest delay running in a slot it serves, else
/// a delay still to start in one (a marker of another identity: the node
/// was promoted, or the slot moved here, since it last granted there). A
/// slot without a marker is not counted: unused, or its marker lost with a
/// promotion, the report cannot tell (the next grant there would start a
/// delay on a promoted node).
async fn slots_lock_delay_of(via: &mut Via, key: &LockKey, text: &str) -> Option<LockDelayState> {
    let markers: Vec<String> = match via {
        Via::ClusterNode { slots, .. } => slots
            .iter()
            .flat_map(Clone::clone)
            .map(|slot| key.node_of_slot(slot))
            .collect(),
        Via::Server(_) => return None,
    };
    let now_ms = server_time(via).await? / 1000;
    let mut shown = None;
    for batch in markers.chunks(MARKERS_PER_TRIP) {
        let mut pipeline = redis::pipe();
        for marker in batch {
            pipeline.cmd("GET").arg(marker);
        }
        for value in via.run_pipeline(pipeline, batch.len()).await.ok()? {
            if let Ok(Some(marker)) = redis::from_redis_value::<Option<String>>(value) {
                shown = to_show(shown, lock_delay_in(text, Some(&marker), "", now_ms));
            }
        }
    }
    shown
}

/// Of two slots' states on one node, the one its report shows: a
/// deposition (the longer), else a running delay (the longer), else one
/// still to start.
fn to_show(a: Option<LockDelayState>, b: Option<LockDelayState>) -> Option<LockDelayState> {
    use LockDelayState::{Deposed, Pending, Running};
    match (a, b) {
        (Some(Deposed { left: x }), Some(Deposed { left: y })) => Some(Deposed { left: x.max(y) }),
        (Some(deposed @ Deposed { .. }), _) | (_, Some(deposed @ Deposed { .. })) => Some(deposed),
        (Some(Running { left: x }), Some(Running { left: y })) => Some(Running { left: x.max(y) }),
        (Some(running @ Running { .. }), _) | (_, Some(running @ Running { .. })) => Some(running),
        (Some(Pending), _) | (_, Some(Pending)) => Some(Pending),
        (None, None) => None,
    }
}

/// What `node_delay` in `scripts/prelude.lua` would decide now (`now_ms`,
/// the server's clock) on a node whose `INFO` is `text` and whose node
/// marker is `marker`: running when the marker is of this identity and its
/// end is ahead, deposed when a deposition's end is (see `depose.lua`),
/// pending when the identity changed since (or a node with no marker was
/// promoted, or runs another process than the manager saw, `seen`, or a
/// deposition ended), none otherwise.
fn lock_delay_in(
    text: &str,
    marker: Option<&str>,
    seen: &str,
    now_ms: u64,
) -> Option<LockDelayState> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_default()
    };
    let identity = format!("{}:{}", field("run_id"), field("master_replid"));
    let promoted = field("master_replid2").chars().any(|c| c != '0');
    let restarted = !seen.is_empty() && seen != field("run_id");
    let Some((marked, until_ms)) = marker.and_then(|marker| marker.split_once(' ')) else {
        return (promoted || restarted).then_some(LockDelayState::Pending);
    };
    let left = until_ms
        .parse::<u64>()
        .ok()?
        .checked_sub(now_ms)
        .filter(|&left| left > 0)
        .map(Duration::from_millis);
    match (marked, left) {
        (DEPOSED, Some(left)) => Some(LockDelayState::Deposed { left }),
        _ if marked != identity => Some(LockDelayState::Pending),
        (_, left) => left.map(|left| LockDelayState::Running { left }),
    }
}

/// The word a deposition writes in the node marker, before its end
/// (`DEPOSED` in `scripts/prelude.lua`).
const DEPOSED: &str = "deposed";

/// The risks that `INFO`'s `text` shows on `node`.
fn risks_in(node: &str, text: &str) -> Vec<Risk> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    let number = |name: &str| field(name).and_then(|value| value.parse::<u64>().ok());
    let node = node.to_owned();
    let mut risks = Vec::new();
    let policy = field("maxmemory_policy").unwrap_or("noeviction");
    if number("maxmemory").unwrap_or(0) > 0 && policy != "noeviction" {
        risks.push(Risk::Eviction {
            node: node.clone(),
            policy: policy.to_owned(),
        });
    }
    let replicas = number("connected_slaves").unwrap_or(0);
    if field("role") == Some("master") && replicas > 0 && field("min_slaves_good_slaves").is_none()
    {
        risks.push(Risk::AsyncReplication {
            node: node.clone(),
            replicas: u32::try_from(replicas).unwrap_or(u32::MAX),
        });
    }
    if field("aof_enabled") == Some("0") {
        risks.push(Risk::NoAppendOnlyFile { node });
    }
    risks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_shows_eviction_only_under_a_memory_limit() {
        let limited = "maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\naof_enabled:1\r\n";
        assert_eq!(
            risks_in("n:1", limited),
            vec![Risk::Eviction {
                node: "n:1".to_owned(),
                policy: "allkeys-lru".to_owned()
            }]
        );
        let unlimited = "maxmemory:0\r\nmaxmemory_policy:volatile-lru\r\naof_enabled:1\r\n";
        assert!(risks_in("n:1", unlimited).is_empty());
    }

    #[test]
    fn replicas_without_a_minimum_and_no_aof_are_risks() {
        let info = "role:master\r\nconnected_slaves:2\r\naof_enabled:0\r\n";
        assert_eq!(risks_in("n:1", info).len(), 2);
        let guarded =
            "role:master\r\nconnected_slaves:2\r\nmin_slaves_good_slaves:2\r\naof_enabled:1\r\n";
        assert!(risks_in("n:1", guarded).is_empty());
    }

    #[test]
    fn a_cluster_primary_shows_its_longest_running_slot_delay_else_one_to_start() {
        let running = |ms| {
            Some(LockDelayState::Running {
                left: Duration::from_millis(ms),
            })
        };
        let pending = Some(LockDelayState::Pending);
        assert_eq!(to_show(running(5), running(9)), running(9));
        assert_eq!(to_show(running(9), running(5)), running(9));
        assert_eq!(to_show(pending, running(5)), running(5));
        assert_eq!(to_show(running(5), None), running(5));
        assert_eq!(to_show(None, pending), pending);
        assert_eq!(to_show(None, None), None);
    }

    #[test]
    fn the_node_marker_read_against_the_identity_shows_the_lock_delay() {
        let info = |replid2: &str| {
            format!("run_id:r1\r\nmaster_replid:a1\r\nmaster_replid2:{replid2}\r\n")
        };
        let never_promoted = info("0000");
        let promoted = info("b2");
        let running = Some(LockDelayState::Running {
            left: Duration::from_millis(1_500),
        });
        assert_eq!(
            lock_delay_in(&never_promoted, Some("r1:a1 0"), "r1", 10_000),
            None
        );
        assert_eq!(
            lock_delay_in(&never_promoted, Some("r1:a1 11500"), "r1", 10_000),
            running
        );
        assert_eq!(
            lock_delay_in(&never_promoted, Some("r1:a1 9000"), "r1", 10_000),
            None
        );
        assert_eq!(
            lock_delay_in(&never_promoted, Some("r0:a0 0"), "r1", 10_000),
            Some(LockDelayState::Pending),
            "restarted or promoted since the marker was written"
        );
        assert_eq!(
            lock_delay_in(&never_promoted, Some("deposed 12000"), "r1", 10_000),
            Some(LockDelayState::Deposed {
                left: Duration::from_secs(2)
            })
        );
        assert_eq!(
            lock_delay_in(&never_promoted, Some("deposed 9000"), "r1", 10_000),
            Some(LockDelayState::Pending),
            "a deposition that ended starts the delay at the next grant"
        );
        assert_eq!(lock_delay_in(&never_promoted, None, "r1", 10_000), None);
        assert_eq!(lock_delay_in(&never_promoted, None, "", 10_000), None);
        assert_eq!(
            lock_delay_in(&never_promoted, None, "r0", 10_000),
            Some(LockDelayState::Pending),
            "restarted empty since the manager connected"
        );
        assert_eq!(
            lock_delay_in(&promoted, None, "r1", 10_000),
            Some(LockDelayState::Pending),
            "promoted before the marker reached it"
        );
    }
}
