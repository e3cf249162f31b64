//! Lock scopes: the locks held by the body that is running now.
//!
//! The owner of a lock, for re-entrancy, is the *lock scope*: the future run by
//! `LockManager::with_lock` or an annotated function, and everything it awaits.
//! A nested call inside it re-enters; a spawned task or a sibling future
//! (`join!`) is a different owner and must wait, as a different thread would.

use std::sync::Arc;

use crate::lease::Lease;

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
    fn iter(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Lease>> {
        std::iter::successors(Some(self.as_ref()), |held| held.outer.as_deref())
            .map(|held| &held.lease)
    }
}

/// Runs `body` with `lease` added to the current scope's held locks.
pub(crate) async fn enter<F: std::future::Future>(lease: Arc<Lease>, body: F) -> F::Output {
    let outer = HELD.try_with(Arc::clone).ok();
    HELD.scope(Arc::new(HeldLocks { lease, outer }), body).await
}

/// The lease the current scope holds on `lock_key` of this manager, if any.
pub(crate) fn find(manager: &crate::LockManager, lock_key: &str) -> Option<Arc<Lease>> {
    HELD.try_with(|held| {
        held.iter()
            .find(|lease| lease.manager.same_as(manager) && lease.key.lock == lock_key)
            .cloned()
    })
    .ok()
    .flatten()
}

fn innermost<T>(read: impl FnOnce(&Lease) -> T) -> Option<T> {
    HELD.try_with(|held| read(&held.lease)).ok()
}

/// The fencing token of the innermost lock scope's key: in
/// `stock:1 → order:9 → stock:1` (the last one re-entered), `stock:1`'s.
///
/// Pass it to storage with each write (`UPDATE … SET fence = $t WHERE fence < $t`)
/// so that a holder whose lease was lost cannot overwrite newer data.
/// `None` outside a lock scope. For a given key's token use
/// [`fencing_token_for`].
pub fn fencing_token() -> Option<u64> {
    innermost(|lease| lease.fence)
}

/// The fencing token of the lock on `key` (as given to `acquire`, without
/// namespace) held by the running lock scope or one of its enclosing scopes;
/// `None` when none of them holds `key`.
pub fn fencing_token_for(key: &str) -> Option<u64> {
    HELD.try_with(|held| {
        held.iter()
            .find(|lease| lease.key.user == key)
            .map(|lease| lease.fence)
    })
    .ok()
    .flatten()
}

/// Whether any lock held by the running lock scope has lost its lease.
/// Useful with `OnLost::Continue`; `false` outside a lock scope.
pub fn lease_lost() -> bool {
    HELD.try_with(|held| held.iter().any(|lease| lease.is_lost()))
        .unwrap_or(false)
}

/// The keys (without namespace) held by the running lock scope, innermost
/// first, each once (a re-entered key is listed where it was first taken).
pub fn held_locks() -> Vec<String> {
    HELD.try_with(|held| {
        let leases: Vec<&Arc<Lease>> = held.iter().collect();
        leases
            .iter()
            .enumerate()
            .filter(|(index, lease)| {
                !leases[index + 1..]
                    .iter()
                    .any(|outer| Arc::ptr_eq(outer, lease))
            })
            .map(|(_, lease)| lease.key.user.clone())
            .collect()
    })
    .unwrap_or_default()
}
