//! The single-instance Redis backend, which also serves Redis Cluster: one
//! multiplexed, auto-reconnecting connection for commands and one RESP3
//! connection for release notifications. Replicated acquisitions
//! (`LockOptions::min_replicas`) get a third connection, opened on first use,
//! so that their `WAIT` never holds up other commands.
//!
//! On a cluster the connections are redis-rs cluster connections, which send
//! each command (a script with all its keys in one slot, see `keys`) to the
//! primary serving the slot and follow `MOVED` / `ASK` and failovers; `WAIT`
//! is pipelined behind the acquisition, so it reaches the same primary.
//! Releases are announced on sharded channels (see `notify`).

pub(super) mod acl;
pub(super) mod admin;
pub(super) mod cluster_link;
pub(super) mod cluster_seeds;
pub(super) mod commands;
pub(super) mod connection;
mod kinds;
pub(super) mod lock_delay;
pub(super) mod native;
pub(super) mod notify;
pub(super) mod place_refresh;
pub(super) mod probe;
pub(super) mod renew_batch;
pub(super) mod rwlock;
pub(super) mod scripts;
pub(super) mod semaphore;
pub(super) mod session;
pub(super) mod tls;
pub(super) mod topology;

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use self::cluster_seeds::ClusterSeeds;
use self::commands::{
    acquire, acquire_checked, acquire_invocation, attempt_from_reply, confirm, hold_down,
    issue_fence, renew, try_set, try_set_checked, try_set_fenced,
};
use self::connection::{lock_error, RedisConfig};
use self::lock_delay::{run_id, LockDelay, LongestTtl, NodeCheck};
use self::native::{Native, NativeCommands};
use self::notify::Notifications;
use self::place_refresh::{PlaceRefresh, PlacesSeen};
use self::probe::{by_address, probe, settle, Needs, Via};
use self::renew_batch::renew_each;
use self::scripts::run_script;
use self::semaphore::renew_member;
use self::session::SessionScript;
use self::tls::TlsConfig;
use self::topology::{Commands, Topology};
use crate::backend::step::Renewal;
use crate::backend::step::{millis, Attempt, Claim, Taking};
use crate::backend::wait_queue::WaitTicket;
use crate::check::{CheckReport, LockDelayState, NodeRole};
use crate::keys::LockKey;
use crate::kinds::kind::Holding;
use crate::options::MinReplicas;
use crate::LockError;

/// How long a lock handed to the first queued waiter by a release stays
/// granted before the waiter confirms it (by renewing to its own ttl): a
/// waiter that died holds up the key at most this long.
pub(crate) const GRANT_WINDOW: Duration = Duration::from_secs(2);

/// Least time a deposed primary grants, hands over and renews nothing (see
/// [`RedisBackend::depose`]), whatever the lock-delay: Sentinel makes it a
/// replica within some seconds when it reaches it.
const LEAST_DEPOSITION: Duration = Duration::from_secs(30);

/// Locks in one Redis server (or one master), or in a Redis Cluster.
pub(crate) struct RedisBackend {
    topology: Topology,
    config: RedisConfig,
    commands: Commands,
    notifications: Notifications,
    /// The connection of replicated acquisitions, whose `WAIT` blocks it.
    replicated: OnceCell<Commands>,
    /// The server's own compare-and-delete and compare-and-renew (one
    /// server only: a cluster's nodes may run different versions).
    native: NativeCommands,
    /// The longest ttl asked for, shared with the backend of the primary
    /// a Sentinel failover leads to (the default lock-delay).
    longest_ttl: Arc<LongestTtl>,
    /// The server's `run_id` when this backend connected (empty when
    /// unknown, or no lock-delay is kept): a server without a marker that
    /// runs another process was restarted empty since (see `NodeCheck`).
    /// Always empty on a cluster: a script goes to whichever primary serves
    /// its slot, so no one `run_id` is the one expected there; a promoted
    /// primary is told by its `master_replid2` and the marker of each slot
    /// instead (see `lock_delay_ms`).
    seen_run_id: Box<str>,
    /// The uncontended attempt where a lock-delay is kept, sent under
    /// sessions so its check needs no `INFO` (see `session`).
    try_set_checked: SessionScript,
    /// The attempt that queues when busy, where a lock-delay is kept, sent
    /// under sessions as [`try_set_checked`](Self::try_set_checked) is.
    acquire_checked: SessionScript,
    /// `acquire_fenced.lua`, sent under sessions as
    /// [`try_set_checked`](Self::try_set_checked) is.
    acquire_fenced: SessionScript,
    /// `semaphore_acquire.lua`, under sessions too.
    semaphore_acquire: SessionScript,
    /// `rw_read_acquire.lua`, under sessions too.
    rw_read_acquire: SessionScript,
    /// `rw_write_acquire.lua`, under sessions too.
    rw_write_acquire: SessionScript,
}

impl RedisBackend {
    /// Opens the command connection (failing within the configured time limits
    /// when Redis is unreachable) and, where the server speaks RESP3, the
    /// notification connection; without it waiters fall back to TTL timers.
    pub(crate) async fn connect(
        url: &str,
        config: RedisConfig,
        tls: &TlsConfig,
    ) -> Result<Self, LockError> {
        Self::open(tls.open_client(url)?, config).await
    }

    /// As [`connect`](Self::connect), to the Redis Cluster that the nodes at
    /// `urls` (any of its nodes; one that answers is enough) belong to.
    pub(crate) async fn connect_cluster(
        urls: &[String],
        config: RedisConfig,
        tls: &TlsConfig,
    ) -> Result<Self, LockError> {
        let seeds = ClusterSeeds::new(urls.to_vec(), tls.clone())?;
        Self::open_topology(Topology::Cluster(Box::new(seeds)), config).await
    }

    /// As [`connect`](Self::connect), to the server of `client`.
    pub(crate) async fn open(client: Client, config: RedisConfig) -> Result<Self, LockError> {
        Self::open_topology(Topology::Server(Box::new(client)), config).await
    }

    async fn open_topology(topology: Topology, config: RedisConfig) -> Result<Self, LockError> {
        let commands = topology.open(config, Some(config.response_timeout)).await?;
        let native = match &topology {
            Topology::Server(_) => Native::probe(&mut commands.clone()).await,
            Topology::Cluster(_) => Native::default(),
        };
        let native = NativeCommands::new(native);
        let notifications = Notifications::open(std::slice::from_ref(&topology), config).await;
        let seen_run_id = match &topology {
            Topology::Server(_) if config.lock_delay != LockDelay::Off => {
                run_id(&mut commands.clone()).await
            }
            _ => Box::default(),
        };
        let try_set_checked = session_script(&topology, &scripts::TRY_SET_CHECKED);
        let acquire_checked = session_script(&topology, &scripts::ACQUIRE_SOURCE);
        let acquire_fenced = session_script(&topology, &scripts::ACQUIRE_FENCED);
        let semaphore_acquire = session_script(&topology, &scripts::SEMAPHORE_ACQUIRE);
        let rw_read_acquire = session_script(&topology, &scripts::RW_READ_ACQUIRE);
        let rw_write_acquire = session_script(&topology, &scripts::RW_WRITE_ACQUIRE);
        Ok(RedisBackend {
            topology,
            config,
            commands,
            notifications,
            replicated: OnceCell::new(),
            native,
            longest_ttl: Arc::default(),
            seen_run_id,
            try_set_checked,
            acquire_checked,
            acquire_fenced,
            semaphore_acquire,
            rw_read_acquire,
            rw_write_acquire,
        })
    }

    /// This backend on a primary that Sentinel names, which a manager
    /// deposes once the Sentinels replace it (see [`depose`](Self::depose)):
    /// where a lock-delay is kept, leases are renewed by the scripts, which
    /// refuse on a deposed node; the server's own `SET … IFEQ` would go on
    /// renewing there.
    pub(crate) fn deposable(mut self) -> Self {
        if self.config.lock_delay != LockDelay::Off {
            let offered = self.native.in_use();
            self.native = NativeCommands::new(Native {
                renew: false,
                ..offered
            });
        }
        self
    }

    /// Tells this server, a primary the Sentinels replaced by `successor`,
    /// to grant, hand over and renew nothing (see `depose.lua`) for the
    /// lock-delay, and at least [`LEAST_DEPOSITION`]; `marker` is the
    /// namespace's node marker. Whether it was deposed: not when it is
    /// `successor` itself, under another address. A replica refuses (it
    /// grants nothing anyway).
    pub(crate) async fn depose(
        &self,
        marker: &str,
        successor: &RedisBackend,
    ) -> Result<bool, LockError> {
        let lasts = self.lock_delay_ms(0).max(millis(LEAST_DEPOSITION));
        let successor = &*successor.seen_run_id;
        self.on_commands(async |commands, _| {
            let deposed: i64 = run_script!(
                scripts::DEPOSE,
                commands,
                keys[marker],
                args[lasts, successor]
            )?;
            Ok(deposed == 1)
        })
        .await
    }

    /// This backend, counting its longest ttl with `previous`'s: the
    /// primary a failover led to keeps the lock-delay its predecessor's
    /// leases need.
    pub(crate) fn succeeding(mut self, previous: &RedisBackend) -> Self {
        self.longest_ttl = Arc::clone(&previous.longest_ttl);
        self
    }

    /// The lock-delay in ms that a step for a lease of `ttl_ms` asks the
    /// server to keep (see `lock_delay`), for every kind. On a cluster each
    /// primary keeps it per slot: the node marker is in the lock's slot
    /// (see `keys`), so the script that grants reads it on the primary that
    /// serves the slot now, and a promoted one grants nothing in a slot
    /// until the delay it started there has passed.
    fn lock_delay_ms(&self, ttl_ms: u64) -> u64 {
        self.config.lock_delay.millis_for(ttl_ms, &self.longest_ttl)
    }

    /// What a grant step for a lease of `ttl_ms` tells the server to keep
    /// the lock-delay (see [`lock_delay_ms`](Self::lock_delay_ms)).
    fn node_check(&self, ttl_ms: u64) -> NodeCheck<'_> {
        NodeCheck {
            delay_ms: self.lock_delay_ms(ttl_ms),
            after_start: self.config.delay_after_start,
            seen_run_id: &self.seen_run_id,
        }
    }

    /// One attempt on a lock; busy, it keeps (or gives) us a place in its
    /// waiter queue for `place` unless that is zero. With `replicas`,
    /// acquire and `WAIT` in one round trip.
    async fn take_lock(&self, claim: Claim<'_>, taking: Taking) -> Result<Attempt, LockError> {
        let Taking {
            replicas,
            place,
            seq,
        } = taking;
        if let Some(replicas) = replicas {
            // Boxed: its state is several times an unreplicated attempt's.
            return Box::pin(self.take_replicated(claim, replicas, place)).await;
        }
        let connection = &mut self.commands.clone();
        // A plain `SET NX` cannot check the lock-delay: with one, the
        // uncontended attempt is a script.
        let check = self.node_check(claim.ttl_ms);
        let reply = match (place.is_zero(), check.delay_ms) {
            (true, 0) => try_set(connection, claim).await,
            (true, _) => try_set_checked(connection, &self.try_set_checked, claim, check).await,
            (false, 0) => acquire(connection, claim, place, seq, check).await,
            (false, _) => {
                let script = &self.acquire_checked;
                acquire_checked(connection, script, claim, (place, seq), check).await
            }
        };
        reply.map_err(|err| self.undone_if_unanswered(&self.commands, claim, lock_error(err)))
    }

    /// One attempt that also issues the fencing token of the lock it takes,
    /// in one script call (`acquire_fenced.lua`): the token when granted and
    /// issued. An attempt whose answer was lost is undone in the background,
    /// as [`take`](Self::take)'s.
    pub(crate) async fn take_fenced(
        &self,
        claim: Claim<'_>,
    ) -> Result<(Attempt, Option<u64>), LockError> {
        let check = self.node_check(claim.ttl_ms);
        let connection = &mut self.commands.clone();
        let reply = try_set_fenced(connection, &self.acquire_fenced, claim, check).await;
        reply.map_err(|err| self.undone_if_unanswered(&self.commands, claim, lock_error(err)))
    }

    /// The acquire script and `WAIT replicas timeout`, pipelined on the
    /// replicated-acquire connection (NOSCRIPT: load the script, send again).
    /// Granted but acknowledged by too few replicas: released, `NotReplicated`.
    async fn take_replicated(
        &self,
        claim: Claim<'_>,
        replicas: MinReplicas,
        place: Duration,
    ) -> Result<Attempt, LockError> {
        let Claim { key, token, .. } = claim;
        let connection = self.replicated_connection().await?;
        let invocation = acquire_invocation(claim, place, 0, self.node_check(claim.ttl_ms));
        let wait_ms = u64::try_from(replicas.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut pipeline = redis::pipe();
        pipeline
            .invoke_script(&invocation)
            .cmd("WAIT")
            .arg(replicas.replicas)
            .arg(wait_ms);
        let limit = self
            .config
            .response_timeout
            .saturating_add(replicas.timeout);
        let send = |mut connection: Commands| {
            let pipeline = &pipeline;
            async move {
                match tokio::time::timeout(limit, pipeline.query_async(&mut connection)).await {
                    Ok(reply) => reply.map_err(Some),
                    Err(_) => Err(None),
                }
            }
        };
        let mut reply: Result<((i64, i64), i64), Option<RedisError>> =
            send(connection.clone()).await;
        if matches!(&reply, Err(Some(err)) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        {
            match tokio::time::timeout(limit, invocation.load_async(&mut connection.clone())).await
            {
                Ok(Ok(_)) => reply = send(connection.clone()).await,
                Ok(Err(err)) => return Err(lock_error(err)),
                Err(_) => return Err(no_answer(limit)),
            }
        }
        let ((granted, value), acknowledged) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                let err = err.map_or_else(|| no_answer(limit), lock_error);
                return Err(self.undone_if_unanswered(connection, claim, err));
            }
        };
        let attempt = attempt_from_reply(granted, value);
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        if attempt != Attempt::GRANTED || acknowledged >= replicas.replicas {
            return Ok(attempt);
        }
        tracing::warn!(
            key = %key.user(),
            acknowledged,
            required = replicas.replicas,
            "lock reached too few replicas in time; releasing it"
        );
        if let Err(err) = self.release(key, token, true).await {
            tracing::warn!(key = %key.user(), error = %err, "release of the unreplicated lock failed; it expires after its TTL");
        }
        Err(LockError::NotReplicated {
            key: key.user().to_owned(),
            acknowledged,
            required: replicas.replicas,
        })
    }

    /// The connection for replicated acquisitions, opened on first use. It has
    /// no response timeout of its own: each call bounds itself by the
    /// configured response timeout plus its `WAIT` timeout.
    async fn replicated_connection(&self) -> Result<&Commands, LockError> {
        self.replicated
            .get_or_try_init(|| self.topology.open(self.config, None))
            .await
    }

    /// Whether this backend's keys must share a hash slot per lock (Redis Cluster).
    pub(crate) fn needs_hash_tags(&self) -> bool {
        self.topology.sharded_pubsub()
    }

    /// Keeps the lock of `claim` for what is left of its `hold_at_least`
    /// (`claim.ttl_ms`), noting in its record that its holder released it.
    pub(crate) async fn hold_down(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        self.on_commands(async |commands, _| hold_down(commands, claim).await)
            .await
    }

    /// Renews with the server's compare-and-renew where it has one and the
    /// lease is held as a key's value (a lock's, a writer's), falling back to the scripts (see
    /// `native`). A native renewal that fails is sent again as the script,
    /// which also tells a server restarted without its data that it lost
    /// grants (see `node_delay` in `prelude.lua`).
    pub(crate) async fn renew(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        let key = claim.key;
        let lock_delay_ms = self.lock_delay_ms(claim.ttl_ms);
        self.on_commands(async |commands, _| match key.kind.holding() {
            Holding::Key => {
                if self.native.renew() {
                    let renewed = native::renew(commands, claim).await;
                    if let Some(answer) = self.native.settled(renewed) {
                        return answer;
                    }
                }
                renew(commands, claim, lock_delay_ms).await
            }
            Holding::Member => renew_member(commands, key.members(), claim, lock_delay_ms).await,
        })
        .await
    }

    /// Confirms a lock a release handed to the claim's token, extending it
    /// to the claim's ttl, in one round trip also on a server whose script
    /// cache is empty (see `commands::confirm`). Not native: the handed-over
    /// lock's value carries the waiters' mark while others wait, which the
    /// server's compare would refuse, costing a second trip.
    pub(crate) async fn confirm(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        self.on_commands(async |commands, _| confirm(commands, claim).await)
            .await
    }

    pub(crate) async fn fence(&self, claim: Claim<'_>) -> Result<Option<u64>, LockError> {
        self.on_commands(async |commands, _| issue_fence(commands, claim).await)
            .await
    }

    /// `err` as the answer to an attempt on `connection`. A connection error
    /// means the attempt may have landed though its answer was lost: it is
    /// freed with the claim's token in the background, so it does not block
    /// others until the TTL ends. Sent on the `connection` that carried the
    /// acquisition, so it arrives after it; given up after the ttl, when the
    /// lock has expired anyway.
    fn undone_if_unanswered(
        &self,
        connection: &Commands,
        claim: Claim<'_>,
        err: LockError,
    ) -> LockError {
        if !matches!(err, LockError::Connection { .. }) {
            return err;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return err;
        };
        let (key, token, ttl) = (claim.key.clone(), claim.token.clone(), claim.ttl());
        let (mut connection, sharded) = (connection.clone(), self.topology.sharded_pubsub());
        let lock_delay_ms = self.lock_delay_ms(claim.ttl_ms);
        runtime.spawn(async move {
            let release = Self::release_on(&mut connection, &key, &token, (sharded, lock_delay_ms));
            let _ = tokio::time::timeout(ttl, release).await;
        });
        err
    }

    /// Runs `step` once on the command connection, telling it whether
    /// release messages go out on sharded channels (Redis Cluster).
    pub(super) async fn on_commands<T>(
        &self,
        step: impl AsyncFnOnce(&mut Commands, bool) -> Result<T, RedisError>,
    ) -> Result<T, LockError> {
        let sharded = self.topology.sharded_pubsub();
        step(&mut self.commands.clone(), sharded)
            .await
            .map_err(lock_error)
    }

    pub(crate) async fn refresh_places(
        &self,
        key: &LockKey,
        refresh: PlaceRefresh<'_>,
    ) -> Result<PlacesSeen, LockError> {
        self.on_commands(async |commands, _| place_refresh::refresh(commands, key, refresh).await)
            .await
    }

    /// The keys matching the glob `pattern` on the server, or on every
    /// primary of a cluster.
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        let mut found = Vec::new();
        match &self.commands {
            Commands::Server(connection) => {
                let connection = connection.clone();
                found = admin::scan(pattern, |command| {
                    let mut connection = connection.clone();
                    async move { command.query_async(&mut connection).await }
                })
                .await
                .map_err(lock_error)?;
            }
            Commands::Cluster(link) => {
                let connection = link.connection();
                for Primary { host, port, .. } in cluster_primaries(connection.clone()).await? {
                    let keys = admin::scan(pattern, |command| {
                        let mut connection = connection.clone();
                        let route = RoutingInfo::SingleNode(by_address(host.clone(), port));
                        async move {
                            let reply = connection.route_command(command, route).await?;
                            redis::from_redis_value(reply).map_err(RedisError::from)
                        }
                    })
                    .await
                    .map_err(lock_error)?;
                    found.extend(keys);
                }
            }
        }
        Ok(found)
    }

    /// Checks every primary without taking a lock (see `probe`), using the
    /// names of `key`, which no lock uses; `sentinel` when the server is a
    /// Sentinel's primary (which needs `ROLE` too).
    pub(crate) async fn check(
        &self,
        key: &LockKey,
        sentinel: bool,
    ) -> Result<CheckReport, LockError> {
        match &self.commands {
            Commands::Server(connection) => {
                let mut report = CheckReport::new("one server");
                let needs = Needs {
                    key,
                    cluster: false,
                    sentinel,
                    native: self.native.in_use(),
                    lock_delay: (self.config.lock_delay != LockDelay::Off)
                        .then_some(&*self.seen_run_id),
                };
                let Topology::Server(client) = &self.topology else {
                    return Ok(report);
                };
                let address = client.get_connection_info().addr().to_string();
                let mut via = Via::Server(connection.clone());
                let probed =
                    probe(&mut via, address, NodeRole::Primary, &needs, Some(client)).await;
                settle(&mut report, probed, true)?;
                Ok(report)
            }
            Commands::Cluster(link) => {
                let connection = link.connection();
                let mut report = CheckReport::new("Redis Cluster");
                let needs = Needs {
                    key,
                    cluster: true,
                    sentinel,
                    native: Native::default(),
                    lock_delay: (self.config.lock_delay != LockDelay::Off).then_some(""),
                };
                for Primary { host, port, slots } in cluster_primaries(connection.clone()).await? {
                    let address = format!("{host}:{port}");
                    let mut via = Via::ClusterNode {
                        connection: connection.clone(),
                        node: by_address(host, port),
                        slots,
                    };
                    let probed = probe(&mut via, address, NodeRole::Primary, &needs, None).await;
                    settle(&mut report, probed, true)?;
                }
                Ok(report)
            }
        }
    }

    /// Where the server stands in its lock-delay now (read as `check`
    /// reads it, through the names of `key`); `None` on a cluster, which
    /// keeps none yet, and when this manager keeps none.
    pub(crate) async fn lock_delay_state(
        &self,
        key: &LockKey,
    ) -> Result<Option<LockDelayState>, LockError> {
        match &self.commands {
            Commands::Server(connection) if self.config.lock_delay != LockDelay::Off => {
                probe::lock_delay_now(connection.clone(), key.node(), &self.seen_run_id).await
            }
            _ => Ok(None),
        }
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.notifications.local_waiters(key.channel())
    }

    /// Wakes every local waiter of every key, so that each tries again.
    pub(crate) fn wake_every_waiter(&self) {
        self.notifications.wake_every_waiter();
    }

    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        self.notifications.watch(key.channel(), 1).await
    }

    /// Renews a batch of leases (of one hash tag on a cluster) with one
    /// script call, or a lone lease as [`renew`](Self::renew) does; see
    /// `batch`.
    pub(crate) async fn renew_batch(
        &self,
        claims: &[Claim<'_>],
    ) -> Result<Vec<Renewal>, LockError> {
        // A lease due alone is renewed as `renew` does it: with the server's
        // own compare-and-renew where it has one, no script.
        let renewed = match claims {
            [claim] => vec![self.renew(*claim).await?],
            _ => {
                // One look at the node per batch (of one ttl).
                let lock_delay_ms = self.lock_delay_ms(claims[0].ttl_ms);
                self.on_commands(async |commands, _| {
                    renew_each(commands, claims, lock_delay_ms).await
                })
                .await?
            }
        };
        Ok(renewed.into_iter().map(Renewal::from_server).collect())
    }
}

/// A script whose lock-delay check is sent under sessions on one server
/// (see `session`), and always as it is on a cluster.
fn session_script(topology: &Topology, source: &'static str) -> SessionScript {
    match topology {
        Topology::Server(_) => SessionScript::new(source),
        Topology::Cluster(_) => SessionScript::without_sessions(source),
    }
}

/// A cluster primary, from `CLUSTER SLOTS`.
struct Primary {
    host: String,
    port: u16,
    /// The slot ranges it serves.
    slots: Vec<RangeInclusive<usize>>,
}

/// A cluster's primaries, from `CLUSTER SLOTS`, each named once with
/// every slot range it serves.
async fn cluster_primaries(mut connection: ClusterConnection) -> Result<Vec<Primary>, LockError> {
    let reply = connection
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
        .map_err(lock_error)?;
    let ranges: Vec<Vec<Value>> =
        redis::from_redis_value(reply).map_err(|err| LockError::Server {
            detail: "the reply to CLUSTER SLOTS could not be read".to_owned(),
            source: Some(std::sync::Arc::new(err)),
        })?;
    let mut primaries: Vec<Primary> = Vec::new();
    for range in ranges {
        let mut fields = range.into_iter();
        let (Some(start), Some(end), Some(Value::Array(node))) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let mut node = node.into_iter();
        let (Some(host), Some(port)) = (node.next(), node.next()) else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(host), Ok(port)) = (
            redis::from_redis_value::<usize>(start),
            redis::from_redis_value::<usize>(end),
            redis::from_redis_value::<String>(host),
            redis::from_redis_value::<u16>(port),
        ) else {
            continue;
        };
        match primaries
            .iter_mut()
            .find(|p| p.host == host && p.port == port)
        {
            Some(primary) => primary.slots.push(start..=end),
            None => primaries.push(Primary {
                host,
                port,
                slots: vec![start..=end],
            }),
        }
    }
    primaries.sort_unstable_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    Ok(primaries)
}

/// A replicated acquisition that got no answer within `limit`.
fn no_answer(limit: Duration) -> LockError {
    LockError::connection(format!("no answer to acquire + WAIT within {limit:?}"))
}
