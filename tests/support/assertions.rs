//! Checks on what the lock API returned: lost leases, owner tokens, validity.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::{LockError, LockGuard};

use crate::NO_HANG;

/// Asserts that `result` is `Err(LockError::LeaseLost)` for `key`.
#[track_caller]
pub fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T, LockError>, key: &str) {
    match result {
        Err(LockError::LeaseLost { key: lost }) => assert_eq!(lost, key),
        other => panic!("expected LeaseLost for `{key}`, got {other:?}"),
    }
}

/// Asserts that `result` is `Err(LockError::NotReplicated)` for `key`, with
/// no replica of the one required acknowledging.
#[track_caller]
pub fn assert_not_replicated<T: std::fmt::Debug>(result: Result<T, LockError>, key: &str) {
    match result {
        Err(LockError::NotReplicated {
            key: refused,
            acknowledged: 0,
            required: 1,
        }) => assert_eq!(refused, key),
        other => panic!("expected NotReplicated for `{key}`, got {other:?}"),
    }
}

/// Whether `token` looks like an owner token: 32 lowercase hex digits (128
/// random bits), then `|` and who holds the lock.
pub fn is_owner_token(token: &str) -> bool {
    let (random, identity) = token.split_at(token.len().min(32));
    random.len() == 32
        && random
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        && identity.starts_with('|')
}

/// Whether `guard`'s lease is still certainly valid now: a second holder at
/// this moment means mutual exclusion was broken.
pub fn lease_still_valid(guard: &LockGuard) -> bool {
    guard
        .valid_until()
        .is_some_and(|until| until > Instant::now())
}

/// The guard of a waiter that waits out a lock-delay (`acquire`, with a
/// wait of [`DELAY_WAIT`]): it must get the lock, and only once the first
/// holder's lease, which may still have been believed valid, has ended at
/// `first_lease_ends`.
pub async fn granted_after_the_first_lease(
    first_lease_ends: Instant,
    acquire: impl Future<Output = Result<LockGuard, LockError>>,
) -> LockGuard {
    let waiter = tokio::time::timeout(DELAY_WAIT + NO_HANG, acquire)
        .await
        .expect("the waiter returns within its wait");
    let waiter = match waiter {
        Ok(guard) => guard,
        Err(LockError::Timeout { .. }) => panic!("the lock-delay never ended"),
        Err(err) => panic!("the waiter failed: {err:?}"),
    };
    assert!(
        Instant::now() >= first_lease_ends,
        "the waiter got the lock while the first lease may have been valid"
    );
    assert!(!waiter.is_lost());
    waiter
}

/// How long the waiters of [`granted_after_the_first_lease`] wait: far
/// beyond any lock-delay the tests keep.
pub const DELAY_WAIT: Duration = Duration::from_secs(30);
