//! Release notifications: one set of local wait queues, fed by the release
//! messages of one or more Redis servers.
//!
//! Every release script PUBLISHes on the lock key. A single-instance backend
//! listens on its one server; a Redlock backend listens on every node, so a
//! release seen on *any* node wakes a local waiter. Each server gets one RESP3
//! connection whose subscriptions are kept equal to the keys that have local
//! waiters. On Redis Cluster the scripts SPUBLISH on the lock key instead (a
//! sharded channel, which lives on the nodes of the key's slot) and one
//! RESP3 cluster connection SSUBSCRIBEs each key on the node that serves its
//! slot.
//!
//! ## Behavior
//!
//! - Subscriptions are kept per key: the SUBSCRIBE and UNSUBSCRIBE of one key
//!   are ordered by that key's own lock, so no key waits for another key's
//!   round trip. They run in spawned tasks, so a waiter cancelled halfway
//!   through [`Notifications::watch`] leaves no subscription and no queue
//!   membership behind. A key whose last local waiter left stays subscribed
//!   for [`LINGER`]: on a hot key the next waiter comes within milliseconds
//!   and finds it subscribed, instead of paying an UNSUBSCRIBE and a
//!   SUBSCRIBE round trip before it can queue.
//! - A connection that cannot be opened, or fails later (disconnected, or a
//!   SUBSCRIBE / UNSUBSCRIBE failed), is replaced by a fresh one, and every
//!   subscription made on the old one counts as gone. While some key has
//!   local waiters, a background task subscribes their keys again, pausing
//!   50 ms, then twice as long up to 1 s, between failed rounds, and wakes
//!   the waiters of every key it subscribed, as a release may have been
//!   missed meanwhile. Until then waiters sleep until the holder's TTL runs
//!   out, as they would without notifications.
//! - On a cluster, the failure of any node's connection counts as the
//!   failure of the whole listener (a failover moves slots, so every key is
//!   subscribed again where its slot now is); and a node that drops a
//!   sharded subscription by itself (its slot moved away) makes that key
//!   subscribe again, and wakes its waiters.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{Notify, OwnedMutexGuard};

use super::acl::permission_denied;
use super::cluster_seeds::ClusterSeeds;
use super::connection::{describe, manager_config, RedisConfig};
use super::topology::Topology;
use crate::backend::wait_queue::{Grant, WaitQueues, WaitTicket};

/// Pause after the first failed round of re-subscribing; it doubles per round.
const FIRST_REPAIR_PAUSE: Duration = Duration::from_millis(50);
/// Longest pause between two rounds of re-subscribing.
const LONGEST_REPAIR_PAUSE: Duration = Duration::from_secs(1);
/// How long a key stays subscribed after its last local waiter left.
const LINGER: Duration = Duration::from_millis(250);

/// The local waiters of one backend and the servers that wake them.
pub(crate) struct Notifications {
    queues: Arc<WaitQueues>,
    listeners: Vec<Arc<Listener>>,
}

/// The release channels this process listens on at one server, kept equal to
/// the keys that have local waiters.
struct Listener {
    me: Weak<Listener>,
    /// The server or cluster, spoken to in RESP3 (which carries pub/sub messages).
    topology: Topology,
    config: RedisConfig,
    link: Mutex<Link>,
    channels: Channels,
    queues: Arc<WaitQueues>,
    /// Raised when the connection failed and subscriptions must be restored.
    repair: Arc<Notify>,
}

/// The current connection and its generation, which counts replacements.
struct Link {
    generation: u64,
    /// `None` until first use after a failure (or at start-up).
    connection: Option<Subscriber>,
}

/// A RESP3 connection that subscribes: to plain channels on one server, to
/// sharded channels on a cluster.
#[derive(Clone)]
enum Subscriber {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Subscriber {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Server(connection) => connection.subscribe(channel).await,
            Subscriber::Cluster(connection) => connection.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Server(connection) => connection.unsubscribe(channel).await,
            Subscriber::Cluster(connection) => connection.sunsubscribe(channel).await,
        }
    }

    async fn ping(&mut self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            Subscriber::Server(connection) => ping.query_async(connection).await,
            Subscriber::Cluster(connection) => ping.query_async(connection).await,
        }
    }
}

/// Per-channel subscription state, one async lock per channel.
#[derive(Default)]
struct Channels {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// The generation of the connection the channel is subscribed on, if any.
/// Held across the channel's SUBSCRIBE or UNSUBSCRIBE round trip.
type Slot = tokio::sync::Mutex<Option<u64>>;

/// What bringing one channel in line with its waiters did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Nothing to do, or unsubscribed.
    Settled,
    /// Subscribed now, on the current connection.
    Subscribed,
    /// The command failed; the connection is being replaced.
    Failed,
}

impl Notifications {
    /// Opens one notification connection per topology, concurrently (a
    /// cluster topology must speak RESP3). A server that cannot be reached now
    /// is connected again on first use. When the last local waiter of a key
    /// leaves, the key is unsubscribed on every server, [`LINGER`] later.
    pub(crate) async fn open(topologies: &[Topology], config: RedisConfig) -> Self {
        let slot: Arc<OnceLock<Vec<Weak<Listener>>>> = Arc::new(OnceLock::new());
        let hook_slot = Arc::clone(&slot);
        let queues = Arc::new(WaitQueues::with_empty_hook(move |key: &str| {
            for listener in hook_slot.get().into_iter().flatten() {
                if let Some(listener) = listener.upgrade() {
                    listener.unsubscribe_later(key.to_owned());
                }
            }
        }));
        let listeners: Vec<Arc<Listener>> = topologies
            .iter()
            .filter_map(|topology| Listener::start(topology, config, &queues))
            .collect();
        futures_util::future::join_all(listeners.iter().map(|listener| listener.connect())).await;
        let _ = slot.set(listeners.iter().map(Arc::downgrade).collect());
        Notifications { queues, listeners }
    }

    /// Wakes every local waiter of every key, so that each tries again.
    pub(crate) fn wake_every_waiter(&self) {
        for key in self.queues.waited_keys() {
            self.queues.wake_every(&key);
        }
    }

    /// How many waiters of this process are queued for `lock_key` now.
    pub(crate) fn local_waiters(&self, lock_key: &str) -> usize {
        self.queues.waiters(lock_key)
    }

    /// Joins the waiters of `lock_key` and subscribes to its release channel.
    ///
    /// Returns once `needed` servers confirmed the subscription (or every server
    /// answered, successfully or not); slower servers finish in the background.
    /// Cancel-safe: dropped halfway, it leaves the queue, and the subscription
    /// it started is undone once it completes.
    pub(crate) async fn watch(&self, lock_key: &str, needed: usize) -> WaitTicket {
        let ticket = self.queues.join(lock_key);
        let mut pending: FuturesUnordered<_> = self
            .listeners
            .iter()
            .map(|listener| {
                let (listener, key) = (Arc::clone(listener), lock_key.to_owned());
                tokio::spawn(async move { listener.reconcile(&key).await })
            })
            .collect();
        let mut confirmed = 0;
        while confirmed < needed {
            let Some(done) = pending.next().await else {
                break;
            };
            confirmed += usize::from(matches!(done, Ok(Outcome::Settled | Outcome::Subscribed)));
        }
        ticket
    }
}

impl Listener {
    /// A listener on `topology` with a supervisor task that restores its
    /// subscriptions after failures; connects on first use.
    fn start(
        topology: &Topology,
        config: RedisConfig,
        queues: &Arc<WaitQueues>,
    ) -> Option<Arc<Self>> {
        let topology = match topology {
            Topology::Server(client) => {
                let info = client.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                match Client::open(info.set_redis_settings(settings)) {
                    Ok(client) => Topology::Server(Box::new(client)),
                    Err(err) => {
                        tracing::warn!(error = %describe(&err), "no pub/sub connection; waiters will retry when the holder's TTL runs out");
                        return None;
                    }
                }
            }
            Topology::Cluster(client) => Topology::Cluster(client.clone()),
        };
        let repair = Arc::new(Notify::new());
        let listener = Arc::new_cyclic(|me| Listener {
            me: me.clone(),
            topology,
            config,
            link: Mutex::new(Link {
                generation: 0,
                connection: None,
            }),
            channels: Channels::default(),
            queues: Arc::clone(queues),
            repair: Arc::clone(&repair),
        });
        tokio::spawn(supervise(Arc::downgrade(&listener), repair));
        Some(listener)
    }

    /// Opens the connection now (a `PING`), so the first waiter need not.
    async fn connect(&self) {
        let (generation, Some(mut connection)) = self.link() else {
            return;
        };
        if let Err(err) = connection.ping().await {
            tracing::warn!(error = %describe(&err), "no pub/sub connection yet; waiters retry when the holder's TTL runs out until it is established");
            self.connection_failed(generation);
        }
    }

    /// The current connection and its generation, creating the connection
    /// (which connects on first use) if there is none.
    fn link(&self) -> (u64, Option<Subscriber>) {
        let mut link = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        if link.connection.is_none() {
            link.connection = self.new_connection(link.generation);
        }
        (link.generation, link.connection.clone())
    }

    /// A lazily connecting RESP3 connection of `generation` that delivers
    /// release messages into the queues and reports its disconnection.
    fn new_connection(&self, generation: u64) -> Option<Subscriber> {
        let (queues, me) = (Arc::clone(&self.queues), self.me.clone());
        let deliver = move |push: PushInfo| -> Result<(), Infallible> {
            match push.kind {
                PushKind::Message | PushKind::SMessage => deliver_release(&queues, &push.data),
                PushKind::Disconnection => {
                    if let Some(listener) = me.upgrade() {
                        listener.connection_failed(generation);
                    }
                }
                PushKind::SUnsubscribe => {
                    if let (Some(listener), Some(channel)) = (me.upgrade(), text(push.data.first()))
                    {
                        listener.resubscribe_in_background(channel.to_owned());
                    }
                }
                _ => {}
            }
            Ok(())
        };
        match &self.topology {
            Topology::Server(client) => {
                let config = manager_config(self.config).set_push_sender(deliver);
                ConnectionManager::new_lazy_with_config((**client).clone(), config)
                    .map(Subscriber::Server)
                    .map_err(|err| tracing::warn!(error = %describe(&err), "no pub/sub connection; waiters will retry when the holder's TTL runs out"))
                    .ok()
            }
            Topology::Cluster(seeds) => {
                let timeout = Some(self.config.response_timeout);
                let settings =
                    ClusterSeeds::settings(self.config, timeout).set_push_sender(deliver);
                seeds
                    .client(self.config, timeout)
                    .map(|client| {
                        Subscriber::Cluster(client.get_pending_async_connection_with_config(settings))
                    })
                    .map_err(|err| tracing::warn!(error = %err, "no pub/sub connection; waiters will retry when the holder's TTL runs out"))
                    .ok()
            }
        }
    }

    /// Drops the connection of `generation` (unless it was replaced already),
    /// so the next use opens a new one, and starts restoring subscriptions.
    fn connection_failed(&self, generation: u64) {
        let failed = {
            let mut link = self.link.lock().unwrap_or_else(PoisonError::into_inner);
            if link.generation != generation {
                return;
            }
            link.generation += 1;
            link.connection.take()
        };
        drop(failed);
        self.repair.notify_one();
    }

    /// Subscribes to `channel` when it has local waiters and is not subscribed
    /// on the current connection, unsubscribes when it has none and is.
    /// Serialised per channel, so it is order-proof: whatever ran last saw the
    /// latest waiters.
    async fn reconcile(&self, channel: &str) -> Outcome {
        let mut subscribed_on = self.channels.slot(channel).lock_owned().await;
        let (generation, connection) = self.link();
        if *subscribed_on != Some(generation) {
            *subscribed_on = None;
        }
        let wanted = self.queues.waiters(channel) > 0;
        let outcome = match (connection, wanted, subscribed_on.is_some()) {
            (Some(mut connection), true, false) => match connection.subscribe(channel).await {
                Ok(()) => {
                    *subscribed_on = Some(generation);
                    Outcome::Subscribed
                }
                Err(err) => {
                    match permission_denied(&err) {
                        Some(denied) => {
                            tracing::warn!(channel, error = %denied, "subscribe refused; waiters fall back to the holder's TTL until it succeeds")
                        }
                        None => {
                            tracing::debug!(channel, error = %describe(&err), "subscribe failed; waiters fall back to the holder's TTL until it succeeds")
                        }
                    }
                    Outcome::Failed
                }
            },
            (None, true, false) => Outcome::Failed,
            (Some(mut connection), false, true) => {
                *subscribed_on = None;
                match connection.unsubscribe(channel).await {
                    Ok(()) => Outcome::Settled,
                    Err(err) => {
                        tracing::debug!(channel, error = %describe(&err), "unsubscribe failed; the connection is replaced");
                        Outcome::Failed
                    }
                }
            }
            _ => Outcome::Settled,
        };
        if outcome == Outcome::Failed {
            self.connection_failed(generation);
        }
        self.channels.settle(channel, subscribed_on);
        outcome
    }

    /// After a node dropped the sharded subscription of `channel` (our own
    /// SUNSUBSCRIBE, or its slot moved away): forgets it, subscribes again if
    /// the key has local waiters, and wakes them, as a release may have been
    /// missed. After our own unsubscribe it finds nothing to do.
    fn resubscribe_in_background(self: Arc<Self>, channel: String) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                {
                    let mut subscribed_on = self.channels.slot(&channel).lock_owned().await;
                    *subscribed_on = None;
                    self.channels.settle(&channel, subscribed_on);
                }
                if self.reconcile(&channel).await == Outcome::Subscribed {
                    self.queues.wake_all(&channel);
                }
            });
        }
    }

    /// After [`LINGER`], unsubscribes `channel` if it still has no local
    /// waiter.
    fn unsubscribe_later(self: Arc<Self>, channel: String) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                self.reconcile(&channel).await
            });
        }
    }

    /// One round of restoring subscriptions: subscribes every key that has
    /// local waiters, then wakes the waiters of each key it subscribed.
    /// Whether every such key is subscribed now.
    async fn resubscribe(&self) -> bool {
        let keys = self.queues.waited_keys();
        let outcomes =
            futures_util::future::join_all(keys.iter().map(|key| self.reconcile(key))).await;
        let mut complete = true;
        for (key, outcome) in keys.iter().zip(outcomes) {
            match outcome {
                Outcome::Subscribed => self.queues.wake_all(key),
                Outcome::Failed => complete = false,
                Outcome::Settled => {}
            }
        }
        complete
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Lets the supervisor see that the listener is gone, and end.
        self.repair.notify_one();
    }
}

/// After each connection failure, restores the subscriptions of `listener`
/// in rounds until one succeeds; ends when the listener is dropped.
async fn supervise(listener: Weak<Listener>, repair: Arc<Notify>) {
    loop {
        repair.notified().await;
        let mut pause = FIRST_REPAIR_PAUSE;
        loop {
            let Some(listener) = listener.upgrade() else {
                return;
            };
            if listener.resubscribe().await {
                break;
            }
            drop(listener);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_REPAIR_PAUSE);
        }
    }
}

impl Channels {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state of `channel`, created unsubscribed if it has none.
    fn slot(&self, channel: &str) -> Arc<Slot> {
        Arc::clone(self.lock().entry(channel.to_owned()).or_default())
    }

    /// Ends a change of `channel`'s state, forgetting the state if it is
    /// unsubscribed and no other task waits for it, so the table only holds
    /// channels in use.
    fn settle(&self, channel: &str, state: OwnedMutexGuard<Option<u64>>) {
        let mut slots = self.lock();
        let idle = state.is_none()
            && slots.get(channel).is_some_and(|slot| {
                // Ours, and held only by the table and this guard.
                Arc::ptr_eq(slot, OwnedMutexGuard::mutex(&state)) && Arc::strong_count(slot) == 2
            });
        if idle {
            slots.remove(channel);
        }
        // Released under the table's lock: a task queued on this slot checks
        // the count only after this guard's reference is gone.
        drop(state);
    }
}

/// The text of a bulk string of a push message.
fn text(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::BulkString(bytes)) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// Routes one release message, `[channel, payload]`: `1` (see
/// `release.lua`) wakes one local waiter of the channel, `*` (see
/// `rw_write_release.lua`) every one of them; any other payload is
/// the owner token of the queued waiter the lock was handed to, which gets
/// it if it waits in this process.
fn deliver_release(queues: &WaitQueues, data: &[Value]) {
    let Some(channel) = text(data.first()) else {
        return;
    };
    match text(data.get(1)) {
        Some("1") | None => queues.wake_one(channel),
        Some("*") => queues.wake_every(channel),
        Some(message) => {
            let (token, grant) = grant_of(message);
            queues.grant(channel, token, grant);
        }
    }
}

/// The owner token and kind of a grant message of `release.lua`: the bare
/// token for a grant to confirm, `=SEQ=token` for one counted from the
/// waiter's place refresh number SEQ. (Owner tokens start with hex digits,
/// never `=`.)
fn grant_of(message: &str) -> (&str, Grant) {
    let counted = message.strip_prefix('=').and_then(|rest| {
        let (seq, token) = rest.split_once('=')?;
        Some((
            token,
            Grant::FromRefresh {
                seq: seq.parse().ok()?,
            },
        ))
    });
    counted.unwrap_or((message, Grant::ToConfirm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_messages_name_the_token_and_how_it_was_granted() {
        let token = "3f9c|1764833000123|30000|4242|web-7|api|a=b=c";
        assert_eq!(grant_of(token), (token, Grant::ToConfirm));
        let counted = format!("=17={token}");
        assert_eq!(grant_of(&counted), (token, Grant::FromRefresh { seq: 17 }));
        assert_eq!(grant_of("=x=abc"), ("=x=abc", Grant::ToConfirm));
    }

    #[test]
    fn a_round_trip_in_flight_for_one_channel_does_not_hold_up_another() {
        let channels = Channels::default();
        let _subscribing_a = channels.slot("a").try_lock_owned().unwrap();
        assert!(
            channels.slot("b").try_lock_owned().is_ok(),
            "channel b waits for channel a"
        );
        assert!(
            channels.slot("a").try_lock_owned().is_err(),
            "two changes of one channel ran at once"
        );
    }

    #[test]
    fn unsubscribed_channel_is_forgotten_unless_another_task_waits_for_it() {
        let channels = Channels::default();
        let state = channels.slot("a").try_lock_owned().unwrap();
        channels.settle("a", state);
        assert!(channels.lock().is_empty());

        let state = channels.slot("a").try_lock_owned().unwrap();
        let queued = channels.slot("a");
        channels.settle("a", state);
        assert!(
            channels.lock().contains_key("a"),
            "forgotten while another task waits for it"
        );
        channels.settle("a", queued.try_lock_owned().unwrap());
        assert!(channels.lock().is_empty());
    }

    #[test]
    fn subscribed_channel_is_remembered() {
        let channels = Channels::default();
        let mut state = channels.slot("a").try_lock_owned().unwrap();
        *state = Some(0);
        channels.settle("a", state);
        let state = channels.slot("a").try_lock_owned().unwrap();
        assert_eq!(*state, Some(0));
    }
}
