//! What [`LockManager::shutdown`](crate::LockManager::shutdown) does: release
//! every lease its manager holds, and wait for the releases in flight.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::lease::registry::Leases;
use crate::lease::Lease;

/// The longest `shutdown` waits for its releases and those in flight.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// Closes `leases` to new acquisitions, releases every lease still held in
/// it, all concurrently, and waits for those and the releases already in
/// flight, [`SHUTDOWN_LIMIT`] at most. Returns how many it released itself.
pub(crate) async fn release_all(leases: &Leases<Lease>) -> usize {
    leases.close();
    let held = leases.take_all();
    let released = held.len();
    let releases = join_all(held.into_iter().map(release_at_shutdown));
    let settle = async {
        releases.await;
        leases.settled().await;
    };
    if tokio::time::timeout(SHUTDOWN_LIMIT, settle).await.is_err() {
        tracing::warn!(
            limit = ?SHUTDOWN_LIMIT,
            "shutdown: releases still unanswered; their locks expire by their TTL"
        );
    }
    tracing::info!(released, "lock manager shut down");
    released
}

/// Releases `lease` for `shutdown`, unless its guard started releasing it
/// first (that release is in flight, and waited for).
async fn release_at_shutdown(lease: Arc<Lease>) {
    if !lease.claim_release() {
        return;
    }
    lease.stop_watchdog();
    lease.end_hold();
    // The holder is no longer protected: tell it, as a lost lease does.
    lease.mark_lost();
    if let Err(err) = lease.end().await {
        tracing::warn!(key = %lease.key.user(), error = %err, "shutdown: release failed; the lock expires after its TTL");
    }
}
