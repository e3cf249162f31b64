//! Read/write locks: many readers or one writer on one key, each holder with
//! its own lease, renewed by the watchdog like a lock's.
//!
//! A read or write lease is a [`Lease`](crate::lease::Lease) on a key of kind
//! `Read` or `Write` (see `keys`), so the guard's release, the watchdog's
//! renewal and the undoing of a cancelled attempt run the read/write lock's
//! scripts (`backend/rwlock`) through the same backend steps as a lock's.
//! The guards are in `rw_guard`.

use std::future::Future;

use crate::acquire;
use crate::kinds::kind::{Kind, Side};

/// A read lease's kind.
const READ: Kind = Kind::ReadWrite(Side::Read);
/// The write lease's kind.
const WRITE: Kind = Kind::ReadWrite(Side::Write);
use crate::kinds::rw_guard::{ReadGuard, WriteGuard};
use crate::{LockError, LockManager, LockOptions};

/// The read/write lock on one key: many readers or one writer. Made by
/// [`LockManager::rwlock`]; nothing is sent to the lock server before an
/// acquisition. Take a lease with [`acquire_read`](Self::acquire_read) and
/// [`acquire_write`](Self::acquire_write), or run a body under one with
/// [`with_read`](Self::with_read) and [`with_write`](Self::with_write) (or
/// `#[distributed_lock(mode = "read")]` / `mode = "write"`); each has a
/// `try_` form that makes one attempt.
///
/// ## Behavior
///
/// - **Many readers or one writer.** A read lease is granted only while no
///   writer holds the lock and none waits for it; the write lease only while
///   no writer and no reader holds it. Each step is one script on the server,
///   so a writer never overlaps a reader or another writer.
/// - **Leases.** Every reader has its own lease (`LockOptions::ttl`), as the
///   writer has, renewed by the watchdog every ttl/3 while its guard lives
///   and reported lost ([`HeldLease::lost`](crate::HeldLease::lost)) when a
///   renewal is refused or not granted before its certain validity ends.
///   Readers are a set of owner token → lease end, not a counter: a reader
///   that crashed blocks writers at most until its own lease ends.
/// - **Writers are not starved.** A writer that has to wait leaves an
///   intent on the server, refreshed at least every second while it waits
///   and dropped 3 s after its last refresh; while any intent is live, new
///   readers wait too, so the readers inside drain and the writer gets in.
///   Among waiting writers there is no arrival order.
/// - **Readers are not starved either.** A reader that has to wait marks
///   it; a writer that releases while one is marked gives the readers a
///   turn of 1 s, in which readers get in past the intents and no writer
///   does. A waiting reader waits for at most the writer holding the lock
///   and the next one.
/// - **Waiting.** Woken by releases (Redis pub/sub, sharded on a Cluster):
///   a writer's release wakes every waiting reader and one writer of each
///   process, a reader's release one writer. A waiter also tries again when
///   the blocking lease would end; it does not poll.
/// - **Re-entrancy.** The owner is the lock scope, as for locks: inside
///   [`with_write`](Self::with_write), a read or write of the same key
///   re-enters the write lease (a downgrade costs no round trip and takes no
///   lease of its own: the body reads under the write lease, released with
///   it); inside [`with_read`](Self::with_read), a read re-enters and a write
///   fails at once with [`LockError::UpgradeRefused`] instead of waiting
///   for its own reader. `LockOptions::reentrant(false)` makes every nested
///   acquisition of the key fail with `AlreadyHeld`.
/// - **Fencing.** Each writer's [`WriteGuard::fencing_token`] (and
///   [`fencing_token`](crate::fencing_token) inside `with_write`) is above
///   every earlier writer's of the key, issued as a lock's (`fence.lua`).
///   Readers carry none (they change nothing a token would protect):
///   `LockOptions::fenced(true)` on a read is refused with `InvalidOptions`,
///   and [`fencing_token`](crate::fencing_token) in a read scope fails the
///   same way.
/// - **Independent of the lock and semaphore of the same key.** `min_replicas`
///   and `hold_at_least` are refused with `InvalidOptions`.
/// - **Backends.** A single Redis server, the primary named by Sentinel, a
///   Redis Cluster (all of a read/write lock's keys in one slot) and memory.
///   Redlock refuses with `InvalidOptions`.
/// - **Cancellation.** Dropping an acquisition at any `.await` leaves
///   nothing behind: neither a lease nor a writer's intent; dropping a guard
///   releases its lease from a task.
#[derive(Debug, Clone)]
pub struct RwLock {
    manager: LockManager,
    key: String,
}

impl LockManager {
    /// The read/write lock on `key`; see [`RwLock`] for what it guarantees.
    /// A read/write lock, a lock and a semaphore on the same key are
    /// independent.
    ///
    /// ```no_run
    /// # async fn run(locks: leasehold_runtime::LockManager) -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockOptions;
    ///
    /// let catalog = locks.rwlock("catalog:42");
    /// let entry = catalog
    ///     .with_read(LockOptions::new(), async { "read under a read lease" })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rwlock(&self, key: &str) -> RwLock {
        RwLock {
            manager: self.clone(),
            key: key.to_owned(),
        }
    }
}

impl RwLock {
    /// The manager this lock's leases are taken through.
    pub(crate) fn manager(&self) -> &LockManager {
        &self.manager
    }

    /// The key, without namespace.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Takes a read lease, waiting up to `options.wait` while a writer holds
    /// the lock or waits for it.
    ///
    /// Inside a scope holding the key for reading or writing this re-enters
    /// (see above). Fails with `Busy` when a zero `wait` found a writer,
    /// `Timeout` when no read lease came within a non-zero `wait`,
    /// `InvalidOptions` for `fenced`, `min_replicas`, `hold_at_least`, a
    /// zero ttl or a Redlock manager, and `Connection` when Redis is
    /// unreachable. Cancel-safe.
    pub async fn acquire_read(&self, options: LockOptions) -> Result<ReadGuard, LockError> {
        let guard = acquire::acquire(&self.manager, &self.key, READ, &options).await?;
        Ok(ReadGuard::new(guard.into_held()))
    }

    /// One attempt at a read lease, no waiting: `Ok(None)` when a writer
    /// holds the lock or waits for it. Errors as
    /// [`acquire_read`](Self::acquire_read).
    pub async fn try_acquire_read(
        &self,
        options: LockOptions,
    ) -> Result<Option<ReadGuard>, LockError> {
        let guard = acquire::try_acquire(&self.manager, &self.key, READ, &options).await?;
        Ok(guard.map(|guard| ReadGuard::new(guard.into_held())))
    }

    /// Takes the write lease, waiting up to `options.wait` while readers or
    /// another writer hold it; while it waits, new readers wait behind it.
    ///
    /// Inside a scope holding the key for writing this re-enters; inside one
    /// holding it for reading it fails at once with `UpgradeRefused`. With
    /// `fenced(true)` the fencing token is issued before this returns.
    /// Fails otherwise as [`acquire_read`](Self::acquire_read) (`fenced`
    /// aside). Cancel-safe: dropped at any `.await`, it leaves neither the
    /// lock nor its intent behind.
    pub async fn acquire_write(&self, options: LockOptions) -> Result<WriteGuard, LockError> {
        let guard = acquire::acquire(&self.manager, &self.key, WRITE, &options).await?;
        Ok(WriteGuard::new(guard.into_held()))
    }

    /// One attempt at the write lease, no waiting and no intent left behind:
    /// `Ok(None)` when readers or a writer hold it. Errors as
    /// [`acquire_write`](Self::acquire_write).
    pub async fn try_acquire_write(
        &self,
        options: LockOptions,
    ) -> Result<Option<WriteGuard>, LockError> {
        let guard = acquire::try_acquire(&self.manager, &self.key, WRITE, &options).await?;
        Ok(guard.map(|guard| WriteGuard::new(guard.into_held())))
    }

    /// Runs `body` holding a read lease: acquires first (as
    /// [`acquire_read`](Self::acquire_read)), releases after the body's
    /// future completes, and also when it panics or is dropped.
    ///
    /// `body` runs in a lock scope: a nested read of the key re-enters, a
    /// nested write fails with `UpgradeRefused`. With `OnLost::Cancel` (the
    /// default) the body is dropped at its next `.await` once the lease is
    /// lost and this returns `LockError::LeaseLost`. Cancel-safe.
    pub async fn with_read<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        acquire::with(&self.manager, &self.key, READ, options, body).await
    }

    /// Runs `body` holding the write lease, as [`with_read`](Self::with_read)
    /// does with a read lease. Nested reads and writes of the key re-enter,
    /// and [`fencing_token`](crate::fencing_token) returns this writer's
    /// token.
    pub async fn with_write<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        acquire::with(&self.manager, &self.key, WRITE, options, body).await
    }

    /// As [`with_read`](Self::with_read), with one attempt: when a writer
    /// holds the lock or waits for it, returns `Ok(None)` at once without
    /// running `body` (logged at info), whatever `wait` says.
    pub async fn try_with_read<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError> {
        acquire::try_with(&self.manager, &self.key, READ, options, body).await
    }

    /// As [`with_write`](Self::with_write), with one attempt: when readers
    /// or a writer hold the lock, returns `Ok(None)` at once without running
    /// `body` (logged at info), whatever `wait` says.
    pub async fn try_with_write<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError> {
        acquire::try_with(&self.manager, &self.key, WRITE, options, body).await
    }
}
