//! A Redis Cluster command connection that is replaced when it stalls.
//!
//! redis-rs's cluster client, once calls to a killed primary fail, can start
//! a slot refresh that never reports back: from then on every call to every
//! shard times out, while a new connection to the same cluster answers at
//! once (found by `cluster_batches`, which holds 10,000 leases across the
//! kill; redis-rs issue #2092 describes a similar stall). So after
//! [`STALLED_CALLS`] calls in a row failed for want of an answer, with none
//! answered in between, a new connection is opened in the background and
//! used from then on, at most once per [`REOPEN_PAUSE`]. A failover alone
//! does not trigger it while the other shards answer, and a cluster that is
//! down keeps the old connection until a new one can be opened.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use redis::RedisResult;

use super::cluster_seeds::ClusterSeeds;
use super::connection::RedisConfig;

/// Calls in a row that got no answer before the connection counts as
/// stalled.
const STALLED_CALLS: u32 = 3;

/// Shortest time between two new connections.
const REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// A cluster command connection, shared by its clones, and what it takes to
/// open another.
#[derive(Clone)]
pub(in crate::backend) struct ClusterLink(Arc<Link>);

struct Link {
    current: Mutex<ClusterConnection>,
    unanswered_in_a_row: AtomicU32,
    reopening: AtomicBool,
    reopened_at: Mutex<Option<Instant>>,
    seeds: ClusterSeeds,
    config: RedisConfig,
    response_timeout: Option<Duration>,
}

impl ClusterLink {
    /// `connection`, opened from `seeds` with `config` and
    /// `response_timeout`, which a replacement is opened with too.
    pub(in crate::backend) fn new(
        connection: ClusterConnection,
        seeds: ClusterSeeds,
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> Self {
        ClusterLink(Arc::new(Link {
            current: Mutex::new(connection),
            unanswered_in_a_row: AtomicU32::new(0),
            reopening: AtomicBool::new(false),
            reopened_at: Mutex::new(None),
            seeds,
            config,
            response_timeout,
        }))
    }

    /// The connection in use now (clones share it).
    pub(in crate::backend) fn connection(&self) -> ClusterConnection {
        self.0
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counts how a call ended: an answer (even an error reply) ends a run
    /// of unanswered calls; a stalled run starts a replacement.
    pub(in crate::backend) fn observe<T>(&self, answer: &RedisResult<T>) {
        let unanswered = answer.as_ref().err().is_some_and(|err| {
            err.is_timeout()
                || err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
        });
        if !unanswered {
            self.0.unanswered_in_a_row.store(0, Ordering::Relaxed);
            return;
        }
        let in_a_row = self.0.unanswered_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row >= STALLED_CALLS {
            self.reopen_in_background();
        }
    }

    /// Opens a new connection and uses it from then on, unless one is being
    /// opened, or was less than [`REOPEN_PAUSE`] ago.
    fn reopen_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut reopened_at = self
                .0
                .reopened_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if reopened_at.is_some_and(|at| at.elapsed() < REOPEN_PAUSE)
                || self.0.reopening.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *reopened_at = Some(Instant::now());
        }
        let link = Arc::clone(&self.0);
        runtime.spawn(async move {
            match link
                .seeds
                .open(link.config, link.response_timeout)
                .await
            {
                Ok(fresh) => {
                    tracing::warn!("cluster connection stalled ({STALLED_CALLS} calls in a row unanswered); replaced by a new one");
                    *link.current.lock().unwrap_or_else(PoisonError::into_inner) = fresh;
                    link.unanswered_in_a_row.store(0, Ordering::Relaxed);
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cluster connection stalled; a new one could not be opened yet");
                }
            }
            link.reopening.store(false, Ordering::Release);
        });
    }
}
