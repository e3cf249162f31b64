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
//! [`WaitQueues::grant`] tells that waiter alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Waiters expecting a grant, by owner token.
    grants: HashMap<String, oneshot::Sender<Grant>>,
}

/// Membership of one waiter in a key's queue; leaves the queue on drop, and
/// passes on a wake-up it received but did not use.
pub(crate) struct WaitTicket {
    queues: Arc<WaitQueues>,
    key: String,
    notify: Arc<Notify>,
    holds_wake: bool,
    /// The owner token this waiter expects a grant for, and where it arrives.
    grant: Option<(String, oneshot::Receiver<Grant>)>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyQueue>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the queue of `key`.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> WaitTicket {
        let mut queues = self.lock();
        let queue = queues.entry(key.to_owned()).or_insert_with(|| KeyQueue {
            notify: Arc::new(Notify::new()),
            waiters: 0,
            grants: HashMap::new(),
        });
        queue.waiters += 1;
        WaitTicket {
            queues: Arc::clone(self),
            key: key.to_owned(),
            notify: Arc::clone(&queue.notify),
            holds_wake: false,
            grant: None,
        }
    }

    /// Hands the lock on `key`, granted to the waiter with owner `token` by a
    /// release, to that waiter. Returns whether a waiter of this process
    /// expected it (otherwise it is another process's).
    pub(crate) fn grant(&self, key: &str, token: &str, grant: Grant) -> bool {
        let sender = self
            .lock()
            .get_mut(key)
            .and_then(|queue| queue.grants.remove(token));
        sender.is_some_and(|sender| sender.send(grant).is_ok())
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
    /// [`next`](Self::next)); replaces an earlier expectation.
    pub(crate) fn expect_grant(&mut self, token: &str) {
        let (sender, receiver) = oneshot::channel();
        if let Some(queue) = self.queues.lock().get_mut(&self.key) {
            queue.grants.insert(token.to_owned(), sender);
        }
        self.grant = Some((token.to_owned(), receiver));
    }

    /// The next of: a release granted the lock to the token this ticket
    /// expects (see [`expect_grant`](Self::expect_grant)), or a release woke
    /// this waiter. From a wake-up on, the ticket holds it until
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
        tokio::select! {
            biased;
            grant = wait_for_grant(grant) => Wake::Granted(grant),
            () = notify.notified() => {
                *holds_wake = true;
                Wake::Woken
            }
        }
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
}

/// What ended a waiter's sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release handed the lock to this waiter.
    Granted(Grant),
    /// A release (or a lost notification channel) asks it to try again.
    Woken,
}

/// Waits for the grant `grant` expects, forgetting the expectation once it
/// arrived; pending forever without one.
async fn wait_for_grant(grant: &mut Option<(String, oneshot::Receiver<Grant>)>) -> Grant {
    let Some((_, receiver)) = grant else {
        return std::future::pending().await;
    };
    match receiver.await {
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
        if now_empty {
            if let Some(hook) = &self.queues.on_empty {
                hook(&self.key);
            }
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
        first.expect_grant("a");
        second.expect_grant("b");
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
