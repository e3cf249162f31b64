//! The one entry point the `#[distributed_lock]` expansion calls. Not a stable API.

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
    let Some(manager) = client.or_else(installed) else {
        return Err(LockError::NotInstalled.into());
    };
    match manager.with_lock(&key, options, body).await {
        Ok(result) => result,
        Err(err) => Err(err.into()),
    }
}
