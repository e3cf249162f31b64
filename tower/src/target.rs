//! What one request locks, taken from the request: one key, several keys
//! (all or nothing), or a permit of a per-key semaphore; and running the
//! handler under it through the runtime's `with_*` calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use leasehold_runtime::{LockError, LockManager, LockOptions};

use crate::error::KeyError;
use crate::template::KeyTemplate;

/// A key function: the lock key of a request.
pub(crate) type KeyFn<B> = Arc<dyn Fn(&Request<B>) -> Result<String, KeyError> + Send + Sync>;

/// Where a layer takes its keys from, and what kind of lock it takes.
pub(crate) enum Keys<B> {
    /// One key, locked, or one permit of the semaphore of `permits` on it.
    One {
        source: OneKey<B>,
        permits: Option<u32>,
    },
    /// Several keys, every one locked, all or nothing.
    Several(Vec<KeyTemplate>),
}

/// Where a single key comes from.
pub(crate) enum OneKey<B> {
    Template(KeyTemplate),
    Function(KeyFn<B>),
}

/// What one request locks.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Lock(String),
    Locks(Vec<String>),
    Permit(String, u32),
}

impl<B> Keys<B> {
    /// What `request` locks; a key is never empty or partial.
    pub(crate) fn target(&self, request: &Request<B>) -> Result<Target, KeyError> {
        let render =
            |template: &KeyTemplate| template.render(request.headers(), request.uri().path());
        let target = match self {
            Keys::One { source, permits } => {
                let key = match source {
                    OneKey::Template(template) => render(template)?,
                    OneKey::Function(key_fn) => key_fn(request)?,
                };
                if key.is_empty() {
                    return Err(KeyError::EmptyKey);
                }
                match permits {
                    Some(permits) => Target::Permit(key, *permits),
                    None => Target::Lock(key),
                }
            }
            Keys::Several(templates) => {
                Target::Locks(templates.iter().map(render).collect::<Result<_, _>>()?)
            }
        };
        Ok(target)
    }
}

impl Target {
    /// Runs `body` under the lock (as `with_lock`, `with_locks` or
    /// `with_permit`): dropped as soon as the lease is lost, which then
    /// answers `LeaseLost`; released when it completes or is dropped.
    pub(crate) async fn run<F: Future>(
        &self,
        manager: &LockManager,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        match self {
            Target::Lock(key) => manager.with_lock(key, options, body).await,
            Target::Locks(keys) => manager.with_locks(keys, options, body).await,
            Target::Permit(key, permits) => {
                manager
                    .semaphore(key, *permits)
                    .with_permit(options, body)
                    .await
            }
        }
    }

    /// How long the lease blocking `busy_key` has left (for a semaphore:
    /// the earliest of its permits'); `None` when nobody holds it now or the
    /// backend could not say.
    pub(crate) async fn remaining(
        &self,
        manager: &LockManager,
        busy_key: &str,
    ) -> Option<Duration> {
        match self {
            Target::Permit(key, permits) => {
                let semaphore = manager.semaphore(key, *permits);
                let info = semaphore.inspect().await.ok()?;
                info.holders.first().map(|holder| holder.remaining)
            }
            Target::Lock(_) | Target::Locks(_) => manager.inspect(busy_key).await.ok()?.remaining,
        }
    }
}

/// What a log line names: the kind of lock and its keys, as the user wrote
/// them (`lock order:42`, `locks a, b`, `permit of jobs (3 permits)`).
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Lock(key) => write!(f, "lock {key}"),
            Target::Locks(keys) => write!(f, "locks {}", keys.join(", ")),
            Target::Permit(key, permits) => write!(f, "permit of {key} ({permits} permits)"),
        }
    }
}

impl<B> std::fmt::Debug for Keys<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keys::One {
                source: OneKey::Template(template),
                permits,
            } => f
                .debug_struct("One")
                .field("template", &template.text())
                .field("permits", permits)
                .finish(),
            Keys::One {
                source: OneKey::Function(_),
                permits,
            } => f
                .debug_struct("One")
                .field("function", &"Fn(&Request) -> Result<String, KeyError>")
                .field("permits", permits)
                .finish(),
            Keys::Several(templates) => f
                .debug_list()
                .entries(templates.iter().map(KeyTemplate::text))
                .finish(),
        }
    }
}
