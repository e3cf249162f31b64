//! Lock scopes: the locks held by the body that is running now.
//!
//! The owner of a lock, for re-entrancy, is the *lock scope*: the future run by
//! `LockManager::with_lock` or an annotated function, and everything it awaits.
//! A nested call inside it re-enters; a spawned task or a sibling future
//! (`join!`) is a different owner and must wait, as a different thread would.
//!
//! A permit's lease is in its scope too, so that the body cannot wait for
//! another permit of the semaphore it holds one of; permits are not locks,
//! so what this module tells the body (fencing tokens, held locks, lost
//! leases) passes them over.

use std::sync::Arc;

use crate::lease::{Lease, Leasing};
use crate::LockError;

/// The chain of leases held by the current scope, innermost first.
#[derive(Clone)]
pub(crate) struct HeldLocks {
    lease: Arc<Lease>,
    outer: Option<Arc<HeldLocks>>,
}

tokio::task_local! {
    static HELD: Arc<HeldLocks>;
}

impl HeldLocks {
    /// Every lease of the scope and its enclosing scopes, innermost first.
    fn iter(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Lease>> {
        std::iter::successors(Some(self.as_ref()), |held| held.outer.as_deref())
            .map(|held| &held.lease)
    }

    /// The locks among them: every lease but permits.
    fn locks(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Lease>> {
        self.iter().filter(|lease| lease.key.kind.scoped())
    }
}

/// Runs `body` with every lease of `leases` added to the current scope's
/// held locks (the last one innermost).
pub(crate) async fn enter_all<F: std::future::Future>(
    leases: impl IntoIterator<Item = Arc<Lease>>,
    body: F,
) -> F::Output {
    let outer = HELD.try_with(Arc::clone).ok();
    let held = leases.into_iter().fold(outer, |outer, lease| {
        Some(Arc::new(HeldLocks { lease, outer }))
    });
    match held {
        Some(held) => HELD.scope(held, body).await,
        None => body.await,
    }
}

/// The lease the current scope holds on `lock_key` of the manager whose
/// leases share `leasing`, if any.
pub(crate) fn find(leasing: &Arc<Leasing>, lock_key: &str) -> Option<Arc<Lease>> {
    HELD.try_with(|held| {
        held.iter()
            .find(|lease| Arc::ptr_eq(&lease.leasing, leasing) && lease.key.lock() == lock_key)
            .cloned()
    })
    .ok()
    .flatten()
}

/// The fencing token of the innermost lock scope's key: in
/// `stock:1 → order:9 → stock:1` (the last one re-entered), `stock:1`'s.
///
/// Pass it to storage with each write (`UPDATE … SET fence = $t WHERE fence < $t`)
/// so that a holder whose lease was lost cannot overwrite newer data. Issued
/// on the first call for the scope's lease (one round trip), then the same;
/// see [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).
/// `Err(LockError::NotHeld)` outside a lock scope. For a given key's token
/// use [`fencing_token_for`].
pub async fn fencing_token() -> Result<u64, LockError> {
    let lease = HELD
        .try_with(|held| held.locks().next().cloned())
        .ok()
        .flatten()
        .ok_or(LockError::NotHeld { key: None })?;
    lease.fencing_token().await
}

/// The fencing token of the plain lock on `key` (as given to `acquire`,
/// without namespace) held by the running lock scope or one of its enclosing
/// scopes, the innermost if several managers hold one; a read/write lock or
/// semaphore on the same key is not that lock and is passed over.
/// `Err(LockError::NotHeld)` when none of them holds the lock `key`.
/// Otherwise as [`fencing_token`].
pub async fn fencing_token_for(key: &str) -> Result<u64, LockError> {
    let lease = HELD
        .try_with(|held| {
            held.locks()
                .find(|lease| lease.key.kind.is_lock() && lease.key.user() == key)
                .cloned()
        })
        .ok()
        .flatten()
        .ok_or_else(|| LockError::NotHeld {
            key: Some(key.to_owned()),
        })?;
    lease.fencing_token().await
}

/// Whether any lock held by the running lock scope has lost its lease.
/// Useful with `OnLost::Continue`; `false` outside a lock scope.
pub fn lease_lost() -> bool {
    HELD.try_with(|held| held.locks().any(|lease| lease.is_lost()))
        .unwrap_or(false)
}

/// The keys (without namespace) held by the running lock scope, innermost
/// first, each once (a re-entered key is listed where it was first taken).
pub fn held_locks() -> Vec<String> {
    HELD.try_with(|held| {
        let leases: Vec<&Arc<Lease>> = held.locks().collect();
        leases
            .iter()
            .enumerate()
            .filter(|(index, lease)| {
                !leases[index + 1..]
                    .iter()
                    .any(|outer| Arc::ptr_eq(outer, lease))
            })
            .map(|(_, lease)| lease.key.user().to_owned())
            .collect()
    })
    .unwrap_or_default()
}
