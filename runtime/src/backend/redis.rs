//! The single-instance Redis backend: one multiplexed, auto-reconnecting
//! connection for commands and one RESP3 connection for release notifications.
//! Replicated acquisitions (`LockOptions::min_replicas`) get a third connection,
//! opened on first use, so that their `WAIT` never holds up other commands.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::OnceCell;

use super::commands::{
    acquire, acquire_invocation, attempt_from_reply, issue_fence, release, renew, try_set,
};
use super::connection::{lock_error, manager_config, open_manager, RedisConfig};
use super::notify::Notifications;
use super::tls::TlsConfig;
use super::{Attempt, LockKey};
use crate::options::MinReplicas;
use crate::token::OwnerToken;
use crate::wait_queue::WaitTicket;
use crate::LockError;

/// How long a lock handed to the first queued waiter by a release stays
/// granted before the waiter confirms it (by renewing to its own ttl): a
/// waiter that died holds up the key at most this long.
pub(crate) const GRANT_WINDOW: Duration = Duration::from_secs(2);

/// Locks in one Redis server (or one master).
pub(crate) struct RedisBackend {
    client: Client,
    config: RedisConfig,
    commands: ConnectionManager,
    notifications: Notifications,
    /// The connection of replicated acquisitions, whose `WAIT` blocks it.
    replicated: OnceCell<ConnectionManager>,
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

    /// As [`connect`](Self::connect), to the server of `client`.
    pub(crate) async fn open(client: Client, config: RedisConfig) -> Result<Self, LockError> {
        let commands = open_manager(&client, manager_config(config)).await?;
        let notifications = Notifications::open(std::slice::from_ref(&client), config).await;
        Ok(RedisBackend {
            client,
            config,
            commands,
            notifications,
            replicated: OnceCell::new(),
        })
    }

    /// One attempt; a busy lock keeps (or gives) us a place in its waiter
    /// queue for `queue_for` unless that is zero. With `replicas`, acquire
    /// and `WAIT` in one round trip.
    pub(crate) async fn try_lock(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
        replicas: Option<MinReplicas>,
        queue_for: Duration,
    ) -> Result<Attempt, LockError> {
        if let Some(replicas) = replicas {
            return self
                .try_lock_replicated(key, token, ttl_ms, replicas, queue_for)
                .await;
        }
        let connection = &mut self.commands.clone();
        let reply = if queue_for.is_zero() {
            try_set(connection, key, token, ttl_ms).await
        } else {
            acquire(connection, key, token, ttl_ms, queue_for).await
        };
        match reply {
            Ok(attempt) => Ok(attempt),
            Err(err) => {
                let err = lock_error(err);
                if matches!(err, LockError::Connection(_)) {
                    undo_unanswered_acquire(self.commands.clone(), key, token, ttl_ms);
                }
                Err(err)
            }
        }
    }

    /// The acquire script and `WAIT replicas timeout`, pipelined on the
    /// replicated-acquire connection (NOSCRIPT: load the script, send again).
    /// Granted but acknowledged by too few replicas: released, `NotReplicated`.
    async fn try_lock_replicated(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
        replicas: MinReplicas,
        queue_for: Duration,
    ) -> Result<Attempt, LockError> {
        let connection = self.replicated_connection().await?;
        let invocation = acquire_invocation(key, token, ttl_ms, queue_for);
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
        let send = |mut connection: ConnectionManager| {
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
                if matches!(err, LockError::Connection(_)) {
                    undo_unanswered_acquire(connection.clone(), key, token, ttl_ms);
                }
                return Err(err);
            }
        };
        let attempt = attempt_from_reply(granted, value);
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        if matches!(attempt, Attempt::Busy { .. }) || acknowledged >= replicas.replicas {
            return Ok(attempt);
        }
        tracing::warn!(
            key = %key.user,
            acknowledged,
            required = replicas.replicas,
            "lock reached too few replicas in time; releasing it"
        );
        if let Err(err) = self.unlock(key, token).await {
            tracing::warn!(key = %key.user, error = %err, "release of the unreplicated lock failed; it expires after its TTL");
        }
        Err(LockError::NotReplicated {
            key: key.user.clone(),
            acknowledged,
            required: replicas.replicas,
        })
    }

    /// The connection for replicated acquisitions, opened on first use. It has
    /// no response timeout of its own: each call bounds itself by the
    /// configured response timeout plus its `WAIT` timeout.
    async fn replicated_connection(&self) -> Result<&ConnectionManager, LockError> {
        self.replicated
            .get_or_try_init(|| {
                open_manager(
                    &self.client,
                    manager_config(self.config).set_response_timeout(None),
                )
            })
            .await
    }

    pub(crate) async fn unlock(
        &self,
        key: &LockKey,
        token: &OwnerToken,
    ) -> Result<bool, LockError> {
        release(&mut self.commands.clone(), key, token, GRANT_WINDOW)
            .await
            .map_err(lock_error)
    }

    pub(crate) async fn renew(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
    ) -> Result<bool, LockError> {
        renew(&mut self.commands.clone(), key, token, ttl_ms)
            .await
            .map_err(lock_error)
    }

    pub(crate) async fn fence(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
    ) -> Result<Option<u64>, LockError> {
        issue_fence(&mut self.commands.clone(), key, token, ttl_ms)
            .await
            .map_err(lock_error)
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.notifications.local_waiters(&key.lock)
    }

    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        self.notifications.watch(&key.lock, 1).await
    }
}

/// The SET may have landed even though its answer was lost: free it with our
/// token in the background, so it does not block others until the TTL ends.
/// Sent on the `connection` that carried the acquisition, so it arrives after
/// it; given up after the ttl, when the lock has expired anyway.
fn undo_unanswered_acquire(
    mut connection: ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (key, token) = (key.clone(), token.clone());
    runtime.spawn(async move {
        let release = release(&mut connection, &key, &token, GRANT_WINDOW);
        let _ = tokio::time::timeout(Duration::from_millis(ttl_ms), release).await;
    });
}

/// A replicated acquisition that got no answer within `limit`.
fn no_answer(limit: Duration) -> LockError {
    LockError::Connection(format!("no answer to acquire + WAIT within {limit:?}"))
}
