//! What a holder and a waiter of one lock do across a failover, as the
//! Sentinel and Cluster tests check it alike.

use std::time::Duration;

use leasehold::{LockError, LockGuard};
use tokio::task::JoinHandle;

use crate::{lease_still_valid, within};

/// After a failover, one of two outcomes, whichever the servers chose:
/// the waiter got the lock (the lock had not reached the promoted replica,
/// or its copy expired there), and then the holder must learn it lost the
/// lease within `follow`; or the waiter is still waiting after `keep`, and
/// then the holder's lease must still be valid (its renewals followed the
/// promotion, checked further by `kept`), and once it releases the waiter
/// gets the lock within `follow`. Returns the waiter's guard and fencing
/// token.
pub async fn holder_keeps_or_loses_and_the_waiter_follows(
    guard: LockGuard,
    mut waiting: JoinHandle<(LockGuard, u64)>,
    (keep, follow): (Duration, Duration),
    kept: impl FnOnce(&LockGuard),
) -> (LockGuard, u64) {
    match tokio::time::timeout(keep, &mut waiting).await {
        Ok(joined) => {
            let won = joined.expect("the waiter did not panic");
            tokio::time::timeout(follow, guard.lost())
                .await
                .expect("the first holder learns it lost the lease instead of hanging");
            let released = within(guard.release()).await;
            assert!(
                matches!(released, Err(LockError::LeaseLost { .. })),
                "{released:?}"
            );
            won
        }
        Err(_) => {
            assert!(
                lease_still_valid(&guard),
                "the waiter has waited {keep:?} although the holder's lease is gone"
            );
            kept(&guard);
            within(guard.release()).await.expect("the holder releases");
            tokio::time::timeout(follow, waiting)
                .await
                .expect("the waiter gets the released lock")
                .expect("the waiter did not panic")
        }
    }
}
