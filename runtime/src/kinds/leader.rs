//! Leader election: instances campaign for one key, and the one holding its
//! lock leads. A term of leadership is a held lock (a [`LockGuard`](crate::LockGuard), renewed
//! by the watchdog like any other) numbered by its fencing token. A
//! [`LeaderWatch`] campaigns term after term in a task and shows the current
//! term in a `tokio::sync::watch`, for code that asks "do we lead?" without
//! owning the term.

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::lease::guard::{derefs_to_held_lease, HeldLease};
use crate::{LockError, LockManager, LockOptions};

/// One instance's candidacy for the leadership of a key; see
/// [`LockManager::leader`]. Each [`next_term`](Self::next_term) campaigns
/// until this instance leads and returns the [`Term`].
///
/// ## Behavior
///
/// - **At most one leader.** A term is a held lock on the key, so two terms
///   of one key never overlap: the next leader is granted the lock only after
///   the current one released it or its lease ran out.
/// - **Term numbers.** A term's [`number`](Term::number) is the lock's
///   fencing token: strictly greater than the number of every earlier term
///   of the key (numbers may skip values when other holders of the key take
///   tokens too). Send it with every write to storage that must reject a
///   deposed leader.
/// - **Renewal.** While a `Term` lives, its lease is renewed every ttl/3.
/// - **Stopped or partitioned leader.** Its lease is no longer renewed and
///   runs out one ttl after the last renewal the server ran, so at most one
///   ttl after the leader stopped; a campaigner is granted the key then.
///   A partitioned leader that is still running sees [`lost`](HeldLease::lost) resolve
///   before that: its view of the lease ends at least a safety margin (6 %
///   of the ttl plus 2 ms) before the server's. A leader whose process is
///   paused (a stopped VM, a long GC) cannot look at its clock in time; the
///   term number is what protects storage from it.
/// - **Resigning.** [`Term::resign`] (or dropping the `Term`) releases the
///   lock at once, and a waiting campaigner leads without waiting for the
///   ttl: on a single Redis server the release hands it the lock, elsewhere
///   the release wakes it.
/// - **Errors.** A connection error during a campaign is returned; the
///   campaign left no lock behind, and calling `next_term` again (it is
///   [retryable](LockError::is_retryable)) campaigns anew.
#[derive(Debug)]
pub struct Leadership {
    manager: LockManager,
    key: String,
    options: LockOptions,
}

impl LockManager {
    /// Campaigns for the leadership of `key`: a [`Leadership`] whose
    /// [`next_term`](Leadership::next_term) waits until this instance leads.
    /// Nothing is sent to the lock server before that call.
    ///
    /// Of `options`, the ttl, renewal (on by default: a term lasts until it
    /// is resigned; with `renew(false)` it ends after one ttl) and
    /// `min_replicas` apply to each term. The others are set for leadership:
    /// no `wait` limit (a campaign waits until it wins; bound it with
    /// `tokio::time::timeout`, which is cancel-safe), not re-entrant (a
    /// campaign inside a lock scope that holds `key` fails with
    /// `AlreadyHeld` rather than lead through the scope's lock), no
    /// `hold_at_least` (resigning hands over at once), and `fenced` (the term
    /// number comes with the lock). Without a
    /// [`label`](LockOptions::label), a term is labelled by `key`, which
    /// operators (`inspect`, `dlock`) and the metrics' `lock` label see.
    ///
    /// ```no_run
    /// # async fn run(locks: leasehold_runtime::LockManager) -> Result<(), leasehold_runtime::LockError> {
    /// use std::time::Duration;
    /// use leasehold_runtime::LockOptions;
    ///
    /// let mut leadership = locks.leader("svc:orders", LockOptions::new().ttl(Duration::from_secs(10)));
    /// loop {
    ///     let term = leadership.next_term().await?;
    ///     println!("leading, term {}", term.number());
    ///     term.lost().await; // lead until the lease is lost (or resign)
    ///     println!("term {} over", term.number());
    /// }
    /// # }
    /// ```
    pub fn leader(&self, key: &str, options: LockOptions) -> Leadership {
        let options = match options.label {
            Some(_) => options,
            None => options.label(key),
        };
        Leadership {
            manager: self.clone(),
            key: key.to_owned(),
            options: options
                .wait(Duration::MAX)
                .reentrant(false)
                .hold_at_least(Duration::ZERO)
                .fenced(true),
        }
    }
}

impl Leadership {
    /// The key campaigned for, without namespace.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Campaigns until this instance leads, and returns its term.
    ///
    /// Waits for the current leader's lock like any waiter of
    /// [`LockManager::acquire`]: woken by its release or when its lease runs
    /// out, and on a single Redis server handed the lock in arrival order.
    /// A lock won but lost before its term number was issued is not a term:
    /// the campaign goes on. Call it once the previous term of this
    /// instance has ended (resigned, dropped, or lost): a campaign while this
    /// instance still holds a term waits for that term to end.
    ///
    /// Cancel-safe: dropping the future at any `.await` leaves no lock
    /// behind. Errors: `Connection` (and the other errors of `acquire`, such
    /// as `InvalidOptions` for a zero ttl); nothing is held then.
    pub async fn next_term(&mut self) -> Result<Term, LockError> {
        loop {
            let guard = self
                .manager
                .acquire(&self.key, self.options.clone())
                .await?;
            match guard.fencing_token().await {
                Ok(number) => {
                    tracing::info!(key = self.key, term = number, "became leader");
                    return Ok(Term {
                        held: guard.into_held(),
                        number,
                    });
                }
                Err(LockError::LeaseLost { .. }) => {
                    tracing::warn!(
                        key = self.key,
                        "lease lost before the term began; campaigning again"
                    );
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// How long a [`LeaderWatch`] waits before campaigning again after a
/// campaign failed (the lock server unreachable for longer than a waiter
/// rides out): the error is logged, and retried at this pace.
const CAMPAIGN_RETRY: Duration = Duration::from_secs(1);

impl Leadership {
    /// Campaigns from now on in a task of its own (on the current Tokio
    /// runtime), term after term, and shows the current term's number in a
    /// `watch`: `Some(number)` while this instance leads, `None` otherwise.
    ///
    /// A term is shown as lost (`None`) when the campaign task sees its
    /// [`lost`](HeldLease::lost) resolve, which happens a safety margin
    /// before the lease's certain validity ends; the watch lags by however
    /// long that task waits to run. Code that must not act after the lease
    /// ended holds the [`Term`] instead, or fences its writes with the term
    /// number.
    /// A campaign that fails (the lock server unreachable) is logged and
    /// retried every second. Dropping the [`LeaderWatch`] ends the campaign
    /// and resigns a term it holds.
    pub fn watch(self) -> LeaderWatch {
        let (shown, current) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(campaign(self, shown, stopped));
        LeaderWatch {
            current,
            _stop: stop,
        }
    }
}

/// The campaign of a [`LeaderWatch`]: leads term after term, showing each in
/// `shown` while it lasts, until `stopped` (the watch dropped); then shows
/// `None` and resigns the term it holds, by dropping it.
async fn campaign(
    mut leadership: Leadership,
    shown: watch::Sender<Option<u64>>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let term = tokio::select! {
            term = leadership.next_term() => term,
            _ = &mut stopped => return,
        };
        match term {
            Ok(term) => {
                shown.send_replace(Some(term.number()));
                let stop = tokio::select! {
                    () = term.lost() => false,
                    _ = &mut stopped => true,
                };
                shown.send_replace(None);
                if stop {
                    return;
                }
                tracing::warn!(
                    key = leadership.key,
                    term = term.number(),
                    "leadership lost"
                );
            }
            Err(err) => {
                tracing::warn!(key = leadership.key, error = %err, "campaign failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(CAMPAIGN_RETRY) => {}
                    _ = &mut stopped => return,
                }
            }
        }
    }
}

/// Leadership of a key as a `tokio::sync::watch` of the current term
/// number, `None` while this instance does not lead; see
/// [`Leadership::watch`]. Dropping it ends the campaign and resigns.
#[derive(Debug)]
#[must_use = "the campaign ends, and a term is resigned, as soon as the watch is dropped"]
pub struct LeaderWatch {
    current: watch::Receiver<Option<u64>>,
    /// Dropped with the watch, which ends the campaign.
    _stop: oneshot::Sender<()>,
}

impl LeaderWatch {
    /// A receiver of the current term number: `borrow()` answers "do we
    /// lead?", `changed()` waits for a term to begin or end. It shows
    /// `None` once the campaign has ended (the watch was dropped) and
    /// `changed()` then fails.
    pub fn receiver(&self) -> watch::Receiver<Option<u64>> {
        self.current.clone()
    }

    /// The current term's number, `None` while this instance does not lead.
    pub fn current(&self) -> Option<u64> {
        *self.current.borrow()
    }
}

/// One term of leadership: this instance leads until the term is lost,
/// resigned or dropped. Holds the key's lock, renewed while the term lives;
/// what it shows of its lease (key, [`is_lost`](HeldLease::is_lost), a
/// [`lost`](HeldLease::lost) that resolves before any other instance can be
/// granted the key) is [`HeldLease`]'s, to which it dereferences. Act as
/// leader only while it is not lost.
///
/// Dropping a `Term` resigns as a dropped [`LockGuard`](crate::LockGuard) releases: at once,
/// from a task on the current Tokio runtime.
#[must_use = "leadership ends as soon as the term is dropped"]
#[derive(Debug)]
pub struct Term {
    held: HeldLease,
    number: u64,
}

impl Term {
    /// The term number: the lock's fencing token, strictly greater than
    /// every earlier term's number on this key. Pass it to storage that
    /// must reject writes from a deposed leader.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Ends the term now: releases the lock, so a waiting campaigner is
    /// granted it at once. `Err(LeaseLost)` when leadership had been lost
    /// already (the lock is someone else's and was left alone); a connection
    /// error means the release did not arrive and the lock expires after its
    /// ttl. Cancel-safe as [`LockGuard::release`](crate::LockGuard::release).
    pub async fn resign(self) -> Result<(), LockError> {
        tracing::info!(key = self.key(), term = self.number, "resigning");
        self.held.release().await
    }
}

derefs_to_held_lease!(Term);
