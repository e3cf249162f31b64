//! One keeper per key and process for its queued waiters' places: it
//! refreshes all of them with one call a [`PLACE_REFRESH`], where each
//! waiter used to run a script of its own, and tells a waiter to try again
//! when it may have missed something (a lock left free with it first in
//! line; a place that was dropped), so waiters between releases sleep
//! without polling. A waiter whose place is gone because a release granted
//! it the lock is told so with the lock's remaining time, and holds at once
//! even when the grant's own message comes late or is lost.
//!
//! A keeper runs while any waiter of its key keeps a place, on the runtime
//! of the waiter that started it; if that runtime shuts down, the next
//! waiter to wake starts another. A refresh that fails tells every waiter to
//! try again on its own: each then rides out the failure as it always did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::wait_queue::{Grant, Keeping, Wake};
use crate::backend::{Backend, PlaceRefresh};
use crate::keys::LockKey;

/// How long a waiter's place on the server (in a key's queue, a writer's
/// intent, a reader's mark that readers wait) lasts without being
/// refreshed: a waiter that died holds up the key at most this long.
pub(crate) const PLACE_KEPT: Duration = Duration::from_secs(3);

/// Longest time between two refreshes of a place that is kept: a lock
/// waiter's by its key's keeper, the others' by their own attempts.
pub(crate) const PLACE_REFRESH: Duration = Duration::from_secs(1);

/// Most places one refresh call names, so that a script never runs long
/// (each place is a ZSCORE and an HSET); more are refreshed in more calls,
/// all under one refresh number, whose send time precedes them all.
const PLACES_PER_CALL: usize = 500;

/// The numbers of place refreshes, one sequence for the whole process: a
/// waiter's own attempts and its key's keeper's refreshes never share one.
static REFRESH_NUMBERS: AtomicU64 = AtomicU64::new(1);

/// A number for the place refresh about to be sent.
pub(crate) fn next_refresh_number() -> u64 {
    REFRESH_NUMBERS.fetch_add(1, Ordering::Relaxed)
}

/// Starts the keeper of `key`'s places that `keeping` holds, on the current
/// runtime (none: nothing starts, and the next waiter to look tries again).
pub(crate) fn keep(backend: &Arc<Backend>, key: &LockKey, keeping: Keeping) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(refresh_places(Arc::clone(backend), key.clone(), keeping));
    }
}

/// Refreshes the places every [`PLACE_REFRESH`] until no waiter keeps one.
async fn refresh_places(backend: Arc<Backend>, key: LockKey, mut keeping: Keeping) {
    loop {
        tokio::time::sleep(PLACE_REFRESH).await;
        let seq = next_refresh_number();
        let Some(waiters) = keeping.due(seq, Instant::now()) else {
            return;
        };
        for waiters in waiters.chunks(PLACES_PER_CALL) {
            let refresh = PlaceRefresh {
                seq,
                place: PLACE_KEPT,
                waiters,
            };
            match backend.refresh_places(&key, refresh).await {
                Ok(seen) => {
                    for (token, left) in &seen.holding {
                        keeping.tell(
                            token,
                            Wake::Granted(Grant::HeldAtRefresh { seq, left: *left }),
                        );
                    }
                    for token in seen.first.iter().chain(&seen.missing) {
                        keeping.tell(token, Wake::Woken);
                    }
                }
                Err(err) => {
                    tracing::debug!(key = key.user(), error = %err, "waiters' places not refreshed; each tries again on its own");
                    for (token, _) in waiters {
                        keeping.tell(token, Wake::Woken);
                    }
                }
            }
        }
    }
}
