//! Several keys at once, all or nothing, without deadlock: the keys are
//! taken one by one in one canonical order (sorted, duplicates collapsed),
//! so two callers that want the same keys in different orders queue on the
//! first key they share instead of each holding what the other waits for.
//! A failure on any key gives back the keys taken so far.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::lease::body::{self, Held};
use crate::lease::watchdog::Watchdog;
use crate::lease::Lease;
use crate::{LockError, LockGuard, LockManager, LockOptions};

/// The locks on several keys, held together. Released together by
/// [`release`](Self::release), or when dropped (each key as a dropped
/// [`LockGuard`] is).
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiGuard {
    /// One guard per distinct key, in key order.
    guards: Vec<LockGuard>,
    /// The watchdog renewing the keys' leases together, once all are held.
    renewal: Option<Arc<Watchdog>>,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("guards", &self.guards)
            .finish_non_exhaustive()
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

impl MultiGuard {
    /// The keys held, sorted, each once.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(|guard| guard.key())
    }

    /// The guard of `key`, if it is one of the keys held.
    pub fn guard(&self, key: &str) -> Option<&LockGuard> {
        self.guards.iter().find(|guard| guard.key() == key)
    }

    /// The fencing token of `key` (see [`LockGuard::fencing_token`]);
    /// `Err(LockError::NotHeld)` for a key this guard does not hold.
    pub async fn fencing_token(&self, key: &str) -> Result<u64, LockError> {
        match self.guard(key) {
            Some(guard) => guard.fencing_token().await,
            None => Err(LockError::NotHeld {
                key: Some(key.to_owned()),
            }),
        }
    }

    /// Whether the lease of any of the keys has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(|guard| guard.is_lost())
    }

    /// Resolves as soon as the lease of any of the keys is lost.
    pub async fn lost(&self) {
        body::any_lost(&self.leases()).await;
    }

    /// Releases every key, all at once (one round trip's wait, not one per
    /// key); the first key's error, if any (the other keys are released all
    /// the same). Dropped midway, the keys not yet released are released as
    /// dropped guards are.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.stop_renewal();
        let releases = std::mem::take(&mut self.guards)
            .into_iter()
            .map(LockGuard::release);
        join_all(releases).await.into_iter().collect()
    }

    fn stop_renewal(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.stop();
        }
    }
}

/// How each key of a set is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempts {
    /// Waiting as `acquire` does, all keys within the options' one `wait`.
    UntilWait,
    /// One attempt per key, as `try_acquire`: a busy key ends the try.
    One,
}

impl LockManager {
    /// Locks every key of `keys` with `options`, or none: the keys are
    /// sorted and taken one by one in that order (a key given twice is taken
    /// once), so callers asking for the same keys in any order never
    /// deadlock. `wait` bounds the whole acquisition, not each key. If any
    /// key fails (busy after the wait, or an error), the keys taken so far
    /// are released at once (a `hold_at_least` applies only to a set that
    /// was held: it counts from when the last key was taken) before the
    /// error returns; so are they when a key's lease was lost while a later
    /// key was waited for (`LeaseLost` naming it): a set is returned only
    /// with every lease held. Each key has its own lease;
    /// once all are held, their renewals are sent together, in one cycle
    /// every ttl/3 (in flight at the same time, not one after another); a key
    /// whose renewal fails is lost on its own, which makes the set lost.
    /// Fencing tokens are per key ([`MultiGuard::fencing_token`]).
    /// Cancel-safe as [`acquire`](Self::acquire): dropped at any `.await`,
    /// it leaves no lock behind.
    pub async fn acquire_all(
        &self,
        keys: impl IntoIterator<Item: AsRef<str>>,
        options: LockOptions,
    ) -> Result<MultiGuard, LockError> {
        let taken = self
            .lock_all(key_set(keys)?, options, Attempts::UntilWait)
            .await?;
        Ok(taken.expect("waiting for every key either takes them all or fails"))
    }

    /// As [`acquire_all`](Self::acquire_all), with one attempt per key and
    /// no waiting: `Ok(None)` when a key is held elsewhere (the keys taken
    /// before it are given back at once). Cancel-safe alike.
    pub async fn try_acquire_all(
        &self,
        keys: impl IntoIterator<Item: AsRef<str>>,
        options: LockOptions,
    ) -> Result<Option<MultiGuard>, LockError> {
        self.lock_all(key_set(keys)?, options, Attempts::One).await
    }

    /// The `keys` (see [`key_set`]), in order, taken by `attempts`; the
    /// keys taken are given back when one fails or is busy.
    async fn lock_all(
        &self,
        keys: Vec<String>,
        options: LockOptions,
        attempts: Attempts,
    ) -> Result<Option<MultiGuard>, LockError> {
        let hold = options.hold()?;
        let each = options.clone().hold_at_least(Duration::ZERO);
        let deadline = Instant::now().checked_add(options.wait);
        let mut guards = Vec::with_capacity(keys.len());
        for key in &keys {
            let taken = match attempts {
                Attempts::UntilWait => {
                    let left = deadline.map_or(options.wait, |deadline| {
                        deadline.saturating_duration_since(Instant::now())
                    });
                    self.acquire(key, each.clone().wait(left)).await.map(Some)
                }
                Attempts::One => self.try_acquire(key, each.clone()).await,
            };
            // A key reached when the set's wait had run out was given one
            // attempt: still the set's wait that ran out.
            let taken = match taken {
                Err(LockError::Busy {
                    key, lock_delay, ..
                }) if !options.wait.is_zero() => Err(LockError::Timeout {
                    key,
                    waited: options.wait,
                    lock_delay,
                }),
                taken => taken,
            };
            match taken {
                Ok(Some(guard)) => guards.push(guard),
                outcome => {
                    give_back(guards, key).await;
                    return outcome.map(|_| None);
                }
            }
        }
        // A key taken early may have lost its lease while a later one was
        // waited for (taken over, or not renewed in time): the set was
        // never held whole, so none of it is handed out.
        if let Some(lost) = guards.iter().find(|guard| guard.is_lost()) {
            let key = lost.key().to_owned();
            tracing::warn!(key, "a key's lease was lost while later keys of the set were taken; giving the set back");
            give_back(guards, &key).await;
            return Err(LockError::LeaseLost { key });
        }
        if let Some(hold) = hold {
            let until = Instant::now() + hold;
            for guard in guards.iter().filter(|guard| !guard.is_reentered()) {
                guard.lease().hold_until(until);
            }
        }
        let renewal = self.renew_together(&guards);
        Ok(Some(MultiGuard { guards, renewal }))
    }

    /// Runs `body` while holding every key of `keys` (see
    /// [`acquire_all`](Self::acquire_all)); as [`with_lock`](Self::with_lock)
    /// otherwise: the body runs in a lock scope of all the keys (nested
    /// acquisitions of any of them re-enter), and with `OnLost::Cancel` it is
    /// dropped as soon as the lease of any key is lost.
    pub async fn with_locks<F>(
        &self,
        keys: impl IntoIterator<Item: AsRef<str>>,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError>
    where
        F: Future,
    {
        // Boxed before the first `.await` (see `lease::body::run`).
        let body = Box::pin(body);
        let on_lost = options.on_lost;
        let guard = self.acquire_all(keys, options).await?;
        body::run(guard, on_lost, body).await
    }

    /// As [`with_locks`](Self::with_locks), with one attempt per key (see
    /// [`try_acquire_all`](Self::try_acquire_all)): when a key is held
    /// elsewhere the body does not run and the call returns `Ok(None)`,
    /// logged at info. For jobs that every instance of a fleet fires but one
    /// must run.
    pub async fn try_with_locks<F>(
        &self,
        keys: impl IntoIterator<Item: AsRef<str>>,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError>
    where
        F: Future,
    {
        // Boxed before the first `.await` (see `lease::body::run`).
        let body = Box::pin(body);
        let on_lost = options.on_lost;
        let Some(guard) = self.try_acquire_all(keys, options).await? else {
            tracing::debug!("a lock of the set is held elsewhere: skipped");
            return Ok(None);
        };
        body::run(guard, on_lost, body).await.map(Some)
    }
}

/// Releases the keys a failed or busy set acquisition took, at once.
async fn give_back(guards: Vec<LockGuard>, failed_key: &str) {
    let taken = MultiGuard {
        guards,
        renewal: None,
    };
    if let Err(release) = taken.release().await {
        tracing::warn!(key = failed_key, error = %release, "giving back the keys taken before a failed acquire_all failed; they expire after their TTL");
    }
}

impl Held for MultiGuard {
    fn leases(&self) -> Vec<Arc<Lease>> {
        self.guards
            .iter()
            .map(|guard| Arc::clone(guard.lease()))
            .collect()
    }

    async fn release(self) -> Result<(), LockError> {
        MultiGuard::release(self).await
    }
}

/// The keys of `keys`, sorted and each once: the order every caller takes
/// them in, so that two callers never wait on each other. Empty: refused.
fn key_set(keys: impl IntoIterator<Item: AsRef<str>>) -> Result<Vec<String>, LockError> {
    let mut keys: Vec<String> = keys
        .into_iter()
        .map(|key| key.as_ref().to_owned())
        .collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Err(LockError::InvalidOptions(
            "acquire_all needs at least one key".into(),
        ));
    }
    Ok(keys)
}
