//! The one entry point the `#[distributed_lock]` expansion calls. Not a
//! stable API.

use std::fmt::Display;
use std::future::Future;

use crate::acquire;
use crate::kinds::kind::{Kind, Side};
use crate::{installed, LockError, LockManager, LockOptions};

/// A placeholder's value in a lock key: anything with `Display`.
#[diagnostic::on_unimplemented(
    message = "a key placeholder's value must implement `Display`, and `{Self}` does not",
    label = "this placeholder's value has no `Display`",
    note = "implement `Display` for it, or name a field or parameter that has it (a number, a string, an id type with `Display`)"
)]
pub trait KeyPart {
    /// The value, to be formatted into the key.
    fn key_part(&self) -> &dyn Display;
}

impl<T: Display> KeyPart for T {
    fn key_part(&self) -> &dyn Display {
        self
    }
}

/// A placeholder's value (`value`) rendered into the key, or
/// `InvalidOptions` naming the placeholder as written (`written`, `{id}`) when
/// it renders empty: `order:{id}` with `id == ""` would lock `order:` for
/// every call with an empty id, unrelated as they are.
pub fn rendered(written: &str, value: &dyn Display) -> Result<String, LockError> {
    let text = value.to_string();
    if text.is_empty() {
        return Err(LockError::InvalidOptions(format!(
            "the lock key's placeholder `{written}` is empty, so every call with an empty value would share one lock; pass a non-empty value, or check it before the call"
        )));
    }
    Ok(text)
}

/// What an annotated function locks: its rendered key (or keys) and kind.
#[derive(Debug)]
pub enum Target {
    /// The plain lock on one key.
    Lock(String),
    /// The plain locks on several keys, taken all or nothing.
    Locks(Vec<String>),
    /// One permit of the semaphore of this many permits on the key.
    Permit(String, u32),
    /// A read lease of the read/write lock on the key.
    Read(String),
    /// The write lease of the read/write lock on the key.
    Write(String),
    /// The plain lock on the key of the current period of this length
    /// (`period = "1h"`, with `on_busy = "skip"`): see
    /// `LockManager::try_once_per_period`.
    Period(String, std::time::Duration),
}

/// What a call does when its lock is held elsewhere: [`Wait`] up to the
/// options' `wait`, or [`Skip`] at once.
pub trait OnBusy<T> {
    /// Whether the call makes one attempt and skips the body when busy.
    const SKIPS: bool;

    /// The value of a skipped call; `None` for a call that never skips.
    fn skipped() -> Option<T>;
}

/// `on_busy = "wait"` (the default).
#[derive(Debug, Clone, Copy)]
pub struct Wait;

/// `on_busy = "skip"`.
#[derive(Debug, Clone, Copy)]
pub struct Skip;

impl<T> OnBusy<T> for Wait {
    const SKIPS: bool = false;

    fn skipped() -> Option<T> {
        None
    }
}

impl<T: Skipped> OnBusy<T> for Skip {
    const SKIPS: bool = true;

    fn skipped() -> Option<T> {
        Some(T::skipped())
    }
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

/// Runs the annotated body under `target`, taken through `manager` or else
/// the installed default manager, as the `with_*` method of its kind does
/// (the `try_with_*` one when `B` is [`Skip`], whose skipped call returns
/// `Ok(T::skipped())`). Lock failures (busy after `wait`, Redis down, lease
/// lost, nothing installed) come back as `Err(e.into())`, and the body does
/// not run, or is cancelled. The body is boxed at once, so the annotated
/// function's future holds a pointer to it, not a copy of it per layer of
/// the lock's calls.
pub fn locked<B, F, T, E>(
    manager: Option<LockManager>,
    target: Target,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    B: OnBusy<T>,
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let body = Box::pin(body);
    async move {
        let Some(manager) = manager.or_else(installed) else {
            return Err(LockError::NotInstalled.into());
        };
        let ran = if B::SKIPS {
            attempt(&manager, target, options, body).await
        } else {
            wait(&manager, target, options, body).await.map(Some)
        };
        match ran {
            Ok(Some(output)) => output,
            Ok(None) => {
                B::skipped().map_or_else(|| Err(LockError::NotHeld { key: None }.into()), Ok)
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// What a [`Target`] takes: one lease of a kind, the locks of several
/// keys, or the lock of a period.
enum Taken {
    Lease(String, Kind),
    Locks(Vec<String>),
    Period(String, std::time::Duration),
}

impl From<Target> for Taken {
    fn from(target: Target) -> Self {
        match target {
            Target::Lock(key) => Taken::Lease(key, Kind::Lock),
            Target::Permit(key, permits) => Taken::Lease(key, Kind::Semaphore { permits }),
            Target::Read(key) => Taken::Lease(key, Kind::ReadWrite(Side::Read)),
            Target::Write(key) => Taken::Lease(key, Kind::ReadWrite(Side::Write)),
            Target::Locks(keys) => Taken::Locks(keys),
            Target::Period(key, period) => Taken::Period(key, period),
        }
    }
}

/// `body` under `target`, waiting for it up to the options' `wait`.
async fn wait<F: Future>(
    manager: &LockManager,
    target: Target,
    options: LockOptions,
    body: F,
) -> Result<F::Output, LockError> {
    match Taken::from(target) {
        Taken::Lease(key, kind) => acquire::with(manager, &key, kind, options, body).await,
        Taken::Locks(keys) => manager.with_locks(keys, options, body).await,
        Taken::Period(..) => Err(LockError::InvalidOptions(
            "a `period` needs `on_busy = \"skip\"`: a later call of the period skips".into(),
        )),
    }
}

/// `body` under `target` after one attempt; `None` when it was busy.
async fn attempt<F: Future>(
    manager: &LockManager,
    target: Target,
    options: LockOptions,
    body: F,
) -> Result<Option<F::Output>, LockError> {
    match Taken::from(target) {
        Taken::Lease(key, kind) => acquire::try_with(manager, &key, kind, options, body).await,
        Taken::Locks(keys) => manager.try_with_locks(keys, options, body).await,
        Taken::Period(key, period) => {
            manager
                .try_once_per_period(&key, period, options, body)
                .await
        }
    }
}
