//! Cancellation safety of acquisitions: an attempt in flight whose caller goes
//! away (its future dropped by `timeout`, `select!`, or a client that hung
//! up) may still be granted by the server, and a waiter queued in Redis may
//! be handed the lock by a release at any moment. Both are undone when the
//! caller leaves without a guard.

use std::sync::Arc;

use crate::backend::Backend;
use crate::keys::LockKey;
use crate::token::OwnerToken;

/// One acquisition attempt sent (or about to be sent), or a queued wait, with
/// `token` (a clone: a waiter that starts over with a fresh token drops this
/// one, which gives back what the old token may hold). Dropped before [`settled`](Self::settled), it spawns a release
/// with the same token on the current runtime: compare-and-delete only frees
/// the lock if it was granted to `token` (and then hands it to the next
/// waiter), otherwise it takes `token` out of the key's waiter queue; on a
/// single server it travels on the connection that carried the attempt, so it
/// arrives after it.
pub(crate) struct PendingAcquire<'a> {
    backend: &'a Arc<Backend>,
    key: &'a LockKey,
    token: OwnerToken,
    settled: bool,
}

impl<'a> PendingAcquire<'a> {
    /// Marks an attempt that is about to be sent.
    pub(crate) fn new(backend: &'a Arc<Backend>, key: &'a LockKey, token: &OwnerToken) -> Self {
        PendingAcquire {
            backend,
            key,
            token: token.clone(),
            settled: false,
        }
    }

    /// The attempt's answer reached its caller, who owns the outcome now.
    pub(crate) fn settled(mut self) {
        self.settled = true;
    }

    /// [`settled`](Self::settled), for one that may not have been made.
    pub(crate) fn settle(pending: Option<Self>) {
        if let Some(pending) = pending {
            pending.settled();
        }
    }
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key.user(), "an acquisition was cancelled outside a Tokio runtime; if it was granted, the lock expires after its TTL");
            return;
        };
        let (backend, key, token) = (
            Arc::clone(self.backend),
            self.key.clone(),
            self.token.clone(),
        );
        tracing::debug!(key = %key.user(), "acquisition abandoned; giving back what it may have been granted");
        runtime.spawn(async move {
            if let Err(err) = backend.release(&key, &token, true).await {
                tracing::warn!(key = %key.user(), error = %err, "could not undo a cancelled acquisition; if it was granted, the lock expires after its TTL");
            }
        });
    }
}
