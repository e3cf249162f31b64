//! The single-instance Redis backend: one multiplexed, auto-reconnecting
//! connection for commands and one RESP3 connection for release notifications.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ProtocolVersion, PushInfo, PushKind, Value};

use super::{Attempt, LockKey};
use crate::scripts;
use crate::wait_queue::{WaitQueues, WaitTicket};
use crate::{LockError, OwnerToken};

/// Time limits of the Redis connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisConfig {
    /// Longest time to open a TCP connection (and its handshake).
    pub(crate) connect_timeout: Duration,
    /// Longest time to wait for the answer to one command.
    pub(crate) response_timeout: Duration,
}

/// Locks in one Redis server (or one master).
pub(crate) struct RedisBackend {
    commands: ConnectionManager,
    subscriptions: Option<Arc<Subscriptions>>,
    queues: Arc<WaitQueues>,
}

/// The release channels this process listens on, kept equal to the keys that have local waiters.
struct Subscriptions {
    connection: ConnectionManager,
    subscribed: tokio::sync::Mutex<HashSet<String>>,
    queues: Arc<WaitQueues>,
}

impl RedisBackend {
    /// Opens the command connection (failing within the configured time limits
    /// when Redis is unreachable) and, where the server speaks RESP3, the
    /// notification connection; without it waiters fall back to TTL timers.
    pub(crate) async fn connect(url: &str, config: RedisConfig) -> Result<Self, LockError> {
        let client = Client::open(url).map_err(|err| LockError::InvalidUrl {
            url: url.to_owned(),
            reason: err.to_string(),
        })?;
        let commands = open_manager(&client, manager_config(config)).await?;
        let slot: Arc<OnceLock<Weak<Subscriptions>>> = Arc::new(OnceLock::new());
        let hook_slot = Arc::clone(&slot);
        let queues = Arc::new(WaitQueues::with_empty_hook(move |key: &str| {
            if let Some(subscriptions) = hook_slot.get().and_then(Weak::upgrade) {
                subscriptions.reconcile_in_background(key.to_owned());
            }
        }));
        let subscriptions = match open_notifications(&client, config, &queues).await {
            Ok(connection) => {
                let subscriptions = Arc::new(Subscriptions {
                    connection,
                    subscribed: tokio::sync::Mutex::new(HashSet::new()),
                    queues: Arc::clone(&queues),
                });
                let _ = slot.set(Arc::downgrade(&subscriptions));
                Some(subscriptions)
            }
            Err(err) => {
                tracing::warn!(error = %err, "no pub/sub connection; waiters will retry when the holder's TTL runs out");
                None
            }
        };
        Ok(RedisBackend {
            commands,
            subscriptions,
            queues,
        })
    }

    pub(crate) async fn try_lock(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
    ) -> Result<Attempt, LockError> {
        let reply: Result<(i64, i64), redis::RedisError> = scripts::ACQUIRE
            .key(&key.lock)
            .key(&key.fence)
            .arg(token.as_str())
            .arg(ttl_ms)
            .invoke_async(&mut self.commands.clone())
            .await;
        match reply {
            Ok((1, fence)) => Ok(Attempt::Acquired {
                fence: u64::try_from(fence).unwrap_or(0),
            }),
            Ok((_, remaining_ms)) => Ok(Attempt::Busy {
                remaining: u64::try_from(remaining_ms).ok().map(Duration::from_millis),
            }),
            Err(err) => {
                let err = LockError::from(err);
                if matches!(err, LockError::Connection(_)) {
                    self.undo_unanswered_acquire(key, token);
                }
                Err(err)
            }
        }
    }

    /// The SET may have landed even though its answer was lost: free it with our
    /// token in the background, so it does not block others until the TTL ends.
    fn undo_unanswered_acquire(&self, key: &LockKey, token: &OwnerToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut commands = self.commands.clone();
        let (lock, token) = (key.lock.clone(), token.clone());
        runtime.spawn(async move {
            let _: Result<i64, _> = scripts::RELEASE
                .key(&lock)
                .arg(token.as_str())
                .arg(&lock)
                .invoke_async(&mut commands)
                .await;
        });
    }

    pub(crate) async fn unlock(
        &self,
        key: &LockKey,
        token: &OwnerToken,
    ) -> Result<bool, LockError> {
        let deleted: i64 = scripts::RELEASE
            .key(&key.lock)
            .arg(token.as_str())
            .arg(&key.lock)
            .invoke_async(&mut self.commands.clone())
            .await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn renew(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
    ) -> Result<bool, LockError> {
        let renewed: i64 = scripts::RENEW
            .key(&key.lock)
            .arg(token.as_str())
            .arg(ttl_ms)
            .invoke_async(&mut self.commands.clone())
            .await?;
        Ok(renewed == 1)
    }

    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        let ticket = self.queues.join(&key.lock);
        if let Some(subscriptions) = &self.subscriptions {
            subscriptions.reconcile(&key.lock).await;
        }
        ticket
    }
}

impl Subscriptions {
    /// Subscribes to `channel` when it has local waiters and is not subscribed,
    /// unsubscribes when it has none and is. Serialised, so it is order-proof.
    async fn reconcile(&self, channel: &str) {
        let mut subscribed = self.subscribed.lock().await;
        let wanted = self.queues.waiters(channel) > 0;
        let mut connection = self.connection.clone();
        if wanted && !subscribed.contains(channel) {
            match connection.subscribe(channel).await {
                Ok(()) => {
                    subscribed.insert(channel.to_owned());
                }
                Err(err) => {
                    tracing::debug!(channel, error = %err, "subscribe failed; waiter falls back to TTL timer")
                }
            }
        } else if !wanted && subscribed.remove(channel) {
            if let Err(err) = connection.unsubscribe(channel).await {
                tracing::debug!(channel, error = %err, "unsubscribe failed");
            }
        }
    }

    fn reconcile_in_background(self: Arc<Self>, channel: String) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { self.reconcile(&channel).await });
        }
    }
}

fn manager_config(config: RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(1)
        .set_max_delay(config.connect_timeout)
}

async fn open_manager(
    client: &Client,
    config: ConnectionManagerConfig,
) -> Result<ConnectionManager, LockError> {
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(|err| LockError::Connection(err.to_string()))
}

async fn open_notifications(
    client: &Client,
    config: RedisConfig,
    queues: &Arc<WaitQueues>,
) -> Result<ConnectionManager, LockError> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = Client::open(info.set_redis_settings(settings))?;
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
    let config = manager_config(config)
        .set_push_sender(deliver)
        .set_automatic_resubscription();
    open_manager(&client, config).await
}
