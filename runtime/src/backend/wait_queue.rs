//! Per-key queues of local waiters, woken one at a time.
//!
//! A release (seen as a pub/sub message, or directly for the in-memory backend)
//! wakes exactly one waiter of this process, so a hot key does not make every
//! waiter hit the server at once. A woken waiter holds that wake-up until its
//! retry gets an answer; if it leaves before (cancelled, or its retry failed),
//! the wake-up passes to the next waiter, so no waiter sleeps through a release.
//!
//! A waiter queued in Redis (single server) is not woken but *granted*: the
//! release that hands it the lock names its owner token, and
//! [`WaitQueues::grant`] tells that waiter alone. Such waiters keep a place
//! in the key's queue on the server; one keeper per key refreshes all of
//! this process's places at once ([`KeptPlaces`], see `acquire::places`)
//! and tells a waiter what it may have missed ([`WaitQueues::tell`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

type EmptyHook = Box<dyn Fn(&str) + Send + Sync>;

/// All waiter queues of one lock manager, keyed by the full lock key.
pub(crate) struct WaitQueues {
    queues: Mutex<HashMap<String, KeyQueue>>,
    on_empty: Option<EmptyHook>,
}

struct KeyQueue {
    notify: Arc<Notify>,
    waiters: usize,
    /// Waiters expecting a grant (or word from the place keeper), by owner
    /// token.
    grants: HashMap<String, oneshot::Sender<Wake>>,
    /// The places these waiters keep in the key's queue on the server.
    places: Arc<Mutex<KeptPlaces>>,
}

/// How many of a key's last place refreshes are remembered with their send
/// times, for a grant that names one of them.
pub(crate) const REFRESHES_KEPT: usize = 4;

/// The places this process's waiters keep in one key's queue on the server,
/// refreshed for all of them by one keeper, one call at a time.
#[derive(Default)]
pub(crate) struct KeptPlaces {
    /// The lease (ms) each waiter asks for, by its owner token.
    leases: HashMap<String, u64>,
    /// Whether a keeper refreshes them now.
    keeper_running: bool,
    /// The last refreshes' numbers and send times, newest last.
    sent: [Option<(u64, Instant)>; REFRESHES_KEPT],
}

impl KeptPlaces {
    /// When the refresh numbered `seq` was sent, if it is remembered.
    fn sent_at(&self, seq: u64) -> Option<Instant> {
        self.sent
            .iter()
            .flatten()
            .find(|&&(sent_seq, _)| sent_seq == seq)
            .map(|&(_, sent)| sent)
    }
}

/// The keeper's hold on one key's [`KeptPlaces`]: while it exists (and has
/// not said it is done), no other keeper starts for them.
pub(crate) struct Keeping {
    queues: Arc<WaitQueues>,
    key: String,
    places: Arc<Mutex<KeptPlaces>>,
    done: bool,
}

impl Keeping {
    /// The owner tokens and leases of the places to refresh now, with the
    /// refresh numbered `seq` and sent at `sent` (a grant may name it);
    /// `None` when no waiter keeps a place any more: the keeper is done,
    /// and the next waiter to keep one starts another.
    pub(crate) fn due(&mut self, seq: u64, sent: Instant) -> Option<Vec<(String, u64)>> {
        let mut places = locked(&self.places);
        if places.leases.is_empty() {
            places.keeper_running = false;
            self.done = true;
            return None;
        }
        places.sent.rotate_left(1);
        places.sent[REFRESHES_KEPT - 1] = Some((seq, sent));
        Some(
            places
                .leases
                .iter()
                .map(|(token, &lease)| (token.clone(), lease))
                .collect(),
        )
    }

    /// Tells the waiter of `token` (if it is this process's) `wake`.
    pub(crate) fn tell(&self, token: &str, wake: Wake) -> bool {
        self.queues.tell(&self.key, token, wake)
    }
}

impl Drop for Keeping {
    /// A keeper that ends before it is done (its runtime shut down) lets
    /// the next waiter that looks start another.
    fn drop(&mut self) {
        if !self.done {
            locked(&self.places).keeper_running = false;
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Membership of one waiter in a key's queue; leaves the queue on drop, and
/// passes on a wake-up it received but did not use.
pub(crate) struct WaitTicket {
    queues: Arc<WaitQueues>,
    key: String,
    notify: Arc<Notify>,
    holds_wake: bool,
    /// The owner token this waiter expects a grant for, and where it arrives.
    grant: Option<(String, oneshot::Receiver<Wake>)>,
    /// The places of the key's waiters in this process, and the owner token
    /// whose place this waiter keeps among them.
    places: Arc<Mutex<KeptPlaces>>,
    kept: Option<String>,
}

impl WaitQueues {
    /// Queues with no hook: nothing to do when a key's last waiter leaves.
    pub(crate) fn new() -> Self {
        WaitQueues {
            queues: Mutex::new(HashMap::new()),
            on_empty: None,
        }
    }

    /// Queues that call `on_empty(key)` when the last waiter of `key` leaves.
    pub(crate) fn with_empty_hook(on_empty: impl Fn(&str) + Send + Sync + 'static) -> Self {
        WaitQueues {
            queues: Mutex::new(HashMap::new()),
            on_empty: Some(Box::new(on_empty)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, KeyQueue>> {
        locked(&self.queues)
    }

    /// Joins the queue of `key`.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> WaitTicket {
        let mut queues = self.lock();
        let queue = queues.entry(key.to_owned()).or_insert_with(|| KeyQueue {
            notify: Arc::new(Notify::new()),
            waiters: 0,
            grants: HashMap::new(),
            places: Arc::default(),
        });
        queue.waiters += 1;
        WaitTicket {
            queues: Arc::clone(self),
            key: key.to_owned(),
            notify: Arc::clone(&queue.notify),
            holds_wake: false,
            grant: None,
            places: Arc::clone(&queue.places),
            kept: None,
        }
    }

    /// Hands the lock on `key`, granted to the waiter with owner `token` by a
    /// release, to that waiter. Returns whether a waiter of this process
    /// expected it (otherwise it is another process's).
    pub(crate) fn grant(&self, key: &str, token: &str, grant: Grant) -> bool {
        self.tell(key, token, Wake::Granted(grant))
    }

    /// Tells the waiter of `key` that expects a grant to `token` `wake`
    /// alone: a grant, or to try again. Returns whether a waiter of this
    /// process expected it.
    pub(crate) fn tell(&self, key: &str, token: &str, wake: Wake) -> bool {
        let sender = self
            .lock()
            .get_mut(key)
            .and_then(|queue| queue.grants.remove(token));
        sender.is_some_and(|sender| sender.send(wake).is_ok())
    }

    /// How many waiters of this process wait for `key` now.
    pub(crate) fn waiters(&self, key: &str) -> usize {
        self.lock().get(key).map_or(0, |queue| queue.waiters)
    }

    /// The keys that have waiters now.
    pub(crate) fn waited_keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Wakes one waiter of `key`, if there is any.
    pub(crate) fn wake_one(&self, key: &str) {
        if let Some(queue) = self.lock().get(key) {
            queue.notify.notify_one();
        }
    }

    /// Wakes every waiter of `key` that is asleep now, and the next one to
    /// sleep if none is: a release that may let all of them in at once (a
    /// read/write lock's writer leaving). The extra wake-up covers a waiter
    /// whose attempt crossed the release on its way.
    pub(crate) fn wake_every(&self, key: &str) {
        if let Some(queue) = self.lock().get(key) {
            queue.notify.notify_waiters();
            queue.notify.notify_one();
        }
    }

    /// Wakes every waiter of `key` that is asleep now, e.g. once its release
    /// channel is subscribed again after messages may have been missed.
    pub(crate) fn wake_all(&self, key: &str) {
        if let Some(queue) = self.lock().get(key) {
            queue.notify.notify_waiters();
        }
    }
}

impl WaitTicket {
    /// From now on a grant of the lock to `token` reaches this ticket (see
    /// [`next`](Self::next)), and the place `token` keeps in the key's
    /// queue on the server (asking for a lease of `lease_ms`) is refreshed
    /// by the key's keeper; replaces an earlier expectation and its place.
    pub(crate) fn expect_grant(&mut self, token: &str, lease_ms: u64) {
        self.listen_for(token);
        let mut places = locked(&self.places);
        if let Some(old) = self.kept.replace(token.to_owned()) {
            places.leases.remove(&old);
        }
        places.leases.insert(token.to_owned(), lease_ms);
    }

    /// Opens the channel on which word for `token` reaches this ticket
    /// (closing the one of the token it expected before).
    fn listen_for(&mut self, token: &str) {
        let (sender, receiver) = oneshot::channel();
        let previous = self.grant.replace((token.to_owned(), receiver));
        if let Some(queue) = self.queues.lock().get_mut(&self.key) {
            if let Some((old, _)) = previous {
                queue.grants.remove(&old);
            }
            queue.grants.insert(token.to_owned(), sender);
        }
    }

    /// The hold on this key's places for a keeper to start, when none
    /// refreshes them now and this ticket's waiter keeps one.
    pub(crate) fn keeper_to_start(&self) -> Option<Keeping> {
        let mut places = locked(&self.places);
        if places.keeper_running || places.leases.is_empty() {
            return None;
        }
        places.keeper_running = true;
        Some(Keeping {
            queues: Arc::clone(&self.queues),
            key: self.key.clone(),
            places: Arc::clone(&self.places),
            done: false,
        })
    }

    /// When the key's keeper sent the place refresh numbered `seq`, if that
    /// is remembered.
    pub(crate) fn refresh_sent(&self, seq: u64) -> Option<Instant> {
        locked(&self.places).sent_at(seq)
    }

    /// The next of: a release granted the lock to the token this ticket
    /// expects (see [`expect_grant`](Self::expect_grant)), the key's place
    /// keeper asks that token to try again, or a release woke this waiter.
    /// From a release's wake-up on, the ticket holds it until
    /// [`wake_used`](Self::wake_used); dropped before that, it wakes the next
    /// waiter instead. Cancel-safe: a grant or wake-up that arrives as this
    /// future is dropped is kept, or goes to another waiter.
    pub(crate) async fn next(&mut self) -> Wake {
        let WaitTicket {
            notify,
            holds_wake,
            grant,
            ..
        } = self;
        let told = tokio::select! {
            biased;
            told = told(grant) => told,
            () = notify.notified() => {
                *holds_wake = true;
                return Wake::Woken;
            }
        };
        if let (Wake::Woken, Some((token, _))) = (told, &self.grant) {
            // Asked to try again, the token still expects its grant.
            let token = token.clone();
            self.listen_for(&token);
        }
        told
    }

    /// The retry after a wake-up got its answer (the lock, or busy again under
    /// a holder whose release wakes anew): the wake-up is used, not passed on.
    pub(crate) fn wake_used(&mut self) {
        self.holds_wake = false;
    }
}

/// How a release handed a lock over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// For a short grant window: the waiter confirms it with one renewal.
    ToConfirm,
    /// With the waiter's own lease, counted on the server from when it
    /// received the waiter's place refresh number `seq`: the waiter's lease
    /// counts from when it sent that refresh, and holds at once.
    FromRefresh { seq: u64 },
    /// Seen by the key's keeper: its place refresh number `seq` found the
    /// lock held by the waiter's token with `left` to run on the server, so
    /// counted from when that refresh was sent the lease ends first. It
    /// arrives when the refresh ran just after the release, whose own
    /// message may come later (or not at all).
    HeldAtRefresh { seq: u64, left: Duration },
}

/// What ended a waiter's sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release handed the lock to this waiter.
    Granted(Grant),
    /// A release (or a lost notification channel, or the key's place
    /// keeper) asks it to try again.
    Woken,
}

/// Waits for word to the token `grant` expects; a grant ends the
/// expectation. Pending forever without one.
async fn told(grant: &mut Option<(String, oneshot::Receiver<Wake>)>) -> Wake {
    let Some((_, receiver)) = grant else {
        return std::future::pending().await;
    };
    match receiver.await {
        Ok(Wake::Woken) => Wake::Woken,
        Ok(granted) => {
            *grant = None;
            granted
        }
        Err(_) => std::future::pending().await,
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let now_empty = {
            if let Some(token) = &self.kept {
                locked(&self.places).leases.remove(token);
            }
            let mut queues = self.queues.lock();
            if let (Some(queue), Some((token, _))) = (queues.get_mut(&self.key), &self.grant) {
                queue.grants.remove(token);
            }
            match queues.get_mut(&self.key) {
                Some(queue) if queue.waiters > 1 => {
                    queue.waiters -= 1;
                    if self.holds_wake {
                        queue.notify.notify_one();
                    }
                    false
                }
                Some(_) => {
                    queues.remove(&self.key);
                    true
                }
                None => false,
            }
        };
        if now_empty && let Some(hook) = &self.queues.on_empty {
            hook(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[test]
    fn last_waiter_leaving_calls_the_hook_once() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let queues = Arc::new(WaitQueues::with_empty_hook(move |key| {
            seen.lock().unwrap().push(key.to_owned())
        }));
        let a = queues.join("k");
        let b = queues.join("k");
        assert_eq!(queues.waiters("k"), 2);
        assert_eq!(queues.waited_keys(), vec!["k".to_owned()]);
        drop(a);
        assert!(calls.lock().unwrap().is_empty());
        drop(b);
        assert_eq!(*calls.lock().unwrap(), vec!["k".to_owned()]);
        assert_eq!(queues.waiters("k"), 0);
        assert!(queues.waited_keys().is_empty());
    }

    /// Two waiters of key `k`, in arrival order.
    fn two_waiters() -> (Arc<WaitQueues>, WaitTicket, WaitTicket) {
        let queues = Arc::new(WaitQueues::new());
        let (first, second) = (queues.join("k"), queues.join("k"));
        (queues, first, second)
    }

    /// [`two_waiters`] after one release woke the first, which saw it.
    fn two_waiters_one_woken() -> (Arc<WaitQueues>, WaitTicket, WaitTicket) {
        let (queues, mut first, second) = two_waiters();
        queues.wake_one("k");
        assert!(first.next().now_or_never() == Some(Wake::Woken));
        (queues, first, second)
    }

    #[test]
    fn woken_waiter_that_leaves_before_using_the_wake_passes_it_to_the_next() {
        let (_queues, first, mut second) = two_waiters_one_woken();
        assert!(
            second.next().now_or_never().is_none(),
            "one release wakes one waiter"
        );
        drop(first);
        assert!(
            second.next().now_or_never() == Some(Wake::Woken),
            "the wake-up of a waiter that left unused went nowhere"
        );
    }

    #[test]
    fn a_grant_reaches_only_the_waiter_it_names() {
        let (queues, mut first, mut second) = two_waiters();
        first.expect_grant("a", 1_000);
        second.expect_grant("b", 1_000);
        assert!(queues.grant("k", "b", Grant::ToConfirm), "b waits here");
        assert!(
            !queues.grant("k", "c", Grant::ToConfirm),
            "nobody here expects c"
        );
        assert_eq!(
            second.next().now_or_never(),
            Some(Wake::Granted(Grant::ToConfirm))
        );
        assert_eq!(
            first.next().now_or_never(),
            None,
            "a grant wakes nobody else"
        );
        drop(first);
        assert!(
            !queues.grant("k", "a", Grant::ToConfirm),
            "a left with its ticket"
        );
    }

    #[test]
    fn waiter_that_used_its_wake_does_not_pass_it_on() {
        let (_queues, mut first, mut second) = two_waiters_one_woken();
        first.wake_used();
        drop(first);
        assert!(
            second.next().now_or_never().is_none(),
            "a used wake-up was passed on: a wasted round trip"
        );
    }

    #[test]
    fn waiter_that_leaves_without_a_wake_wakes_nobody() {
        let queues = Arc::new(WaitQueues::new());
        let first = queues.join("k");
        let mut second = queues.join("k");
        drop(first);
        assert!(second.next().now_or_never().is_none());
    }

    #[test]
    fn wake_all_reaches_every_sleeping_waiter_of_the_key_only() {
        let queues = Arc::new(WaitQueues::new());
        let mut first = queues.join("k");
        let mut second = queues.join("k");
        let mut other = queues.join("other");
        let mut sleeping = [first.next().boxed(), second.next().boxed()];
        let mut other_sleeping = other.next().boxed();
        for waiter in &mut sleeping {
            assert!(waiter.as_mut().now_or_never().is_none());
        }
        assert!(other_sleeping.as_mut().now_or_never().is_none());
        queues.wake_all("k");
        for waiter in &mut sleeping {
            assert!(waiter.as_mut().now_or_never().is_some());
        }
        assert!(other_sleeping.as_mut().now_or_never().is_none());
    }
}
