//! The entry points the `#[distributed_lock]` expansion calls. Not a stable API.

use std::future::Future;

use crate::{installed, LockError, LockManager, LockOptions};

/// Runs the annotated body under the lock on `key`, taken from `client` or
/// else from the installed default manager. Lock failures (busy after `wait`,
/// Redis down, lease lost, nothing installed) come back as `Err(e.into())`,
/// and the body does not run, or is cancelled.
pub async fn locked<F, T, E>(
    client: Option<LockManager>,
    key: String,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(manager.with_lock(&key, options, body).await),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// The body's result, or the lock's error converted to the body's error type.
fn flatten<T, E: From<LockError>>(outcome: Result<Result<T, E>, LockError>) -> Result<T, E> {
    outcome.unwrap_or_else(|err| Err(err.into()))
}

/// What an annotated function with `on_busy = "skip"` returns when the lock
/// is held elsewhere: `Ok(())` or `Ok(None)`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` needs a function that can say it skipped: `Result<(), E>` or `Result<Option<T>, E>`, not `Result<{Self}, E>`",
    label = "this function cannot return a skipped call"
)]
pub trait Skipped {
    /// The value of a skipped call.
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() -> Self {}
}

impl<T> Skipped for Option<T> {
    fn skipped() -> Self {
        None
    }
}

/// As [`locked`], with one attempt: when the lock is held elsewhere the body
/// does not run and the call returns `Ok(T::skipped())`.
pub async fn locked_or_skipped<F, T, E>(
    client: Option<LockManager>,
    key: String,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    T: Skipped,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(
            manager
                .try_with_lock(&key, options, body)
                .await
                .map(|ran| ran.unwrap_or_else(|| Ok(T::skipped()))),
        ),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// As [`locked`], under the lock on every key of `keys`, taken all or
/// nothing in one canonical order (see `LockManager::with_locks`).
pub async fn locked_all<F, T, E>(
    client: Option<LockManager>,
    keys: Vec<String>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(manager.with_locks(keys, options, body).await),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// As [`locked_all`], with one attempt per key: when a key is held
/// elsewhere the body does not run and the call returns `Ok(T::skipped())`
/// (see `LockManager::try_with_locks`).
pub async fn locked_all_or_skipped<F, T, E>(
    client: Option<LockManager>,
    keys: Vec<String>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    T: Skipped,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(
            manager
                .try_with_locks(keys, options, body)
                .await
                .map(|ran| ran.unwrap_or_else(|| Ok(T::skipped()))),
        ),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// As [`locked`], under one permit of the semaphore of `permits` on `key`
/// (see `Semaphore::with_permit`).
pub async fn permitted<F, T, E>(
    client: Option<LockManager>,
    key: String,
    permits: u32,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(
            manager
                .semaphore(&key, permits)
                .with_permit(options, body)
                .await,
        ),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// As [`locked`], under a read lease of the read/write lock on `key` (see
/// `LockManager::with_read`).
pub async fn read_locked<F, T, E>(
    client: Option<LockManager>,
    key: String,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(manager.with_read(&key, options, body).await),
        None => Err(LockError::NotInstalled.into()),
    }
}

/// As [`locked`], under the write lease of the read/write lock on `key` (see
/// `LockManager::with_write`).
pub async fn write_locked<F, T, E>(
    client: Option<LockManager>,
    key: String,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match client.or_else(installed) {
        Some(manager) => flatten(manager.with_write(&key, options, body).await),
        None => Err(LockError::NotInstalled.into()),
    }
}
