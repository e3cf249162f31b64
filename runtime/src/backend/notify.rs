//! Release notifications: one set of local wait queues, fed by the release
//! messages of one or more Redis servers.
//!
//! Every release script PUBLISHes on the lock key. A single-instance backend
//! listens on its one server; a Redlock backend listens on every node, so a
//! release seen on *any* node wakes a local waiter. Each server gets one RESP3
//! connection whose subscriptions are kept equal to the keys that have local
//! waiters.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock, Weak};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionManager;
use redis::{Client, ProtocolVersion, PushInfo, PushKind, Value};

use super::redis::{manager_config, open_manager, RedisConfig};
use crate::wait_queue::{WaitQueues, WaitTicket};

/// What to do when a server's notification connection cannot be opened now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhenUnreachable {
    /// Go without notifications from it; waiters fall back to TTL timers.
    DoWithout,
    /// Connect on first use instead (a Redlock node that is down at start-up).
    ConnectLater,
}

/// The local waiters of one backend and the servers that wake them.
pub(crate) struct Notifications {
    queues: Arc<WaitQueues>,
    listeners: Vec<Arc<Listener>>,
}

/// The release channels this process listens on at one server, kept equal to
/// the keys that have local waiters.
struct Listener {
    connection: ConnectionManager,
    subscribed: tokio::sync::Mutex<HashSet<String>>,
    queues: Arc<WaitQueues>,
}

impl Notifications {
    /// Opens one notification connection per client, concurrently. When the
    /// last local waiter of a key leaves, the key is unsubscribed on every server.
    pub(crate) async fn open(
        clients: &[Client],
        config: RedisConfig,
        when_unreachable: WhenUnreachable,
    ) -> Self {
        let slot: Arc<OnceLock<Vec<Weak<Listener>>>> = Arc::new(OnceLock::new());
        let hook_slot = Arc::clone(&slot);
        let queues = Arc::new(WaitQueues::with_empty_hook(move |key: &str| {
            for listener in hook_slot.get().into_iter().flatten() {
                if let Some(listener) = listener.upgrade() {
                    listener.reconcile_in_background(key.to_owned());
                }
            }
        }));
        let opened = futures_util::future::join_all(
            clients
                .iter()
                .map(|client| open_listener(client, config, &queues, when_unreachable)),
        )
        .await;
        let listeners: Vec<Arc<Listener>> = opened
            .into_iter()
            .flatten()
            .map(|connection| {
                Arc::new(Listener {
                    connection,
                    subscribed: tokio::sync::Mutex::new(HashSet::new()),
                    queues: Arc::clone(&queues),
                })
            })
            .collect();
        let _ = slot.set(listeners.iter().map(Arc::downgrade).collect());
        Notifications { queues, listeners }
    }

    /// How many waiters of this process are queued for `lock_key` now.
    pub(crate) fn local_waiters(&self, lock_key: &str) -> usize {
        self.queues.waiters(lock_key)
    }

    /// Joins the waiters of `lock_key` and subscribes to its release channel.
    ///
    /// Returns once `needed` servers confirmed the subscription (or every server
    /// answered, successfully or not); slower servers finish in the background.
    /// With one server this is one SUBSCRIBE, awaited in place.
    pub(crate) async fn watch(&self, lock_key: &str, needed: usize) -> WaitTicket {
        let ticket = self.queues.join(lock_key);
        match self.listeners.as_slice() {
            [] => {}
            [only] => {
                only.reconcile(lock_key).await;
            }
            many => {
                let mut pending: FuturesUnordered<_> = many
                    .iter()
                    .map(|listener| {
                        let (listener, key) = (Arc::clone(listener), lock_key.to_owned());
                        tokio::spawn(async move { listener.reconcile(&key).await })
                    })
                    .collect();
                let mut confirmed = 0;
                while let Some(done) = pending.next().await {
                    confirmed += usize::from(matches!(done, Ok(true)));
                    if confirmed >= needed {
                        break;
                    }
                }
            }
        }
        ticket
    }
}

impl Listener {
    /// Subscribes to `channel` when it has local waiters and is not subscribed,
    /// unsubscribes when it has none and is. Serialised, so it is order-proof.
    /// Returns whether the subscription now matches the waiters.
    async fn reconcile(&self, channel: &str) -> bool {
        let mut subscribed = self.subscribed.lock().await;
        let wanted = self.queues.waiters(channel) > 0;
        let mut connection = self.connection.clone();
        if wanted && !subscribed.contains(channel) {
            match connection.subscribe(channel).await {
                Ok(()) => {
                    subscribed.insert(channel.to_owned());
                }
                Err(err) => {
                    tracing::debug!(channel, error = %err, "subscribe failed; waiter falls back to TTL timer");
                    return false;
                }
            }
        } else if !wanted && subscribed.remove(channel) {
            if let Err(err) = connection.unsubscribe(channel).await {
                tracing::debug!(channel, error = %err, "unsubscribe failed");
                return false;
            }
        }
        true
    }

    fn reconcile_in_background(self: Arc<Self>, channel: String) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { self.reconcile(&channel).await });
        }
    }
}

/// The RESP3 connection that delivers release messages of one server into `queues`.
async fn open_listener(
    client: &Client,
    config: RedisConfig,
    queues: &Arc<WaitQueues>,
    when_unreachable: WhenUnreachable,
) -> Option<ConnectionManager> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = match Client::open(info.set_redis_settings(settings)) {
        Ok(client) => client,
        Err(err) => {
            tracing::warn!(error = %err, "no pub/sub connection; waiters will retry when the holder's TTL runs out");
            return None;
        }
    };
    let queues = Arc::clone(queues);
    let deliver = move |push: PushInfo| -> Result<(), Infallible> {
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(channel)) = push.data.first() {
                    if let Ok(channel) = std::str::from_utf8(channel) {
                        queues.wake_one(channel);
                    }
                }
            }
            PushKind::Disconnection => queues.wake_all(),
            _ => {}
        }
        Ok(())
    };
    let manager = manager_config(config)
        .set_push_sender(deliver)
        .set_automatic_resubscription();
    match open_manager(&client, manager.clone()).await {
        Ok(connection) => Some(connection),
        Err(err) => match when_unreachable {
            WhenUnreachable::DoWithout => {
                tracing::warn!(error = %err, "no pub/sub connection; waiters will retry when the holder's TTL runs out");
                None
            }
            WhenUnreachable::ConnectLater => ConnectionManager::new_lazy_with_config(client, manager)
                .map_err(|err| tracing::warn!(error = %err, "no pub/sub connection to this node; its releases will not wake waiters"))
                .ok(),
        },
    }
}
