//! Per-key queues of local waiters, woken one at a time.
//!
//! A release (seen as a pub/sub message, or directly for the in-memory backend)
//! wakes exactly one waiter of this process, so a hot key does not make every
//! waiter hit the server at once. A woken waiter holds that wake-up until its
//! retry gets an answer; if it leaves before (cancelled, or its retry failed),
//! the wake-up passes to the next waiter, so no waiter sleeps through a release.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

type EmptyHook = Box<dyn Fn(&str) + Send + Sync>;

/// All waiter queues of one lock manager, keyed by the full lock key.
pub(crate) struct WaitQueues {
    queues: Mutex<HashMap<String, KeyQueue>>,
    on_empty: Option<EmptyHook>,
}

struct KeyQueue {
    notify: Arc<Notify>,
    waiters: usize,
}

/// Membership of one waiter in a key's queue; leaves the queue on drop, and
/// passes on a wake-up it received but did not use.
pub(crate) struct WaitTicket {
    queues: Arc<WaitQueues>,
    key: String,
    notify: Arc<Notify>,
    holds_wake: bool,
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
        });
        queue.waiters += 1;
        WaitTicket {
            queues: Arc::clone(self),
            key: key.to_owned(),
            notify: Arc::clone(&queue.notify),
            holds_wake: false,
        }
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

    /// Wakes every waiter of `key` that is asleep now, e.g. once its release
    /// channel is subscribed again after messages may have been missed.
    pub(crate) fn wake_all(&self, key: &str) {
        if let Some(queue) = self.lock().get(key) {
            queue.notify.notify_waiters();
        }
    }
}

impl WaitTicket {
    /// Resolves when a release of this key wakes this waiter. From then on
    /// the ticket holds the wake-up until [`wake_used`](Self::wake_used);
    /// dropped before that, it wakes the next waiter instead. Cancel-safe: a
    /// wake-up that arrives as this future is dropped goes to another waiter.
    pub(crate) async fn woken(&mut self) {
        self.notify.notified().await;
        self.holds_wake = true;
    }

    /// The retry after a wake-up got its answer (the lock, or busy again under
    /// a holder whose release wakes anew): the wake-up is used, not passed on.
    pub(crate) fn wake_used(&mut self) {
        self.holds_wake = false;
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let now_empty = {
            let mut queues = self.queues.lock();
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

    #[test]
    fn woken_waiter_that_leaves_before_using_the_wake_passes_it_to_the_next() {
        let queues = Arc::new(WaitQueues::new());
        let mut first = queues.join("k");
        let mut second = queues.join("k");
        queues.wake_one("k");
        assert!(first.woken().now_or_never().is_some());
        assert!(
            second.woken().now_or_never().is_none(),
            "one release wakes one waiter"
        );
        drop(first);
        assert!(
            second.woken().now_or_never().is_some(),
            "the wake-up of a waiter that left unused went nowhere"
        );
    }

    #[test]
    fn waiter_that_used_its_wake_does_not_pass_it_on() {
        let queues = Arc::new(WaitQueues::new());
        let mut first = queues.join("k");
        let mut second = queues.join("k");
        queues.wake_one("k");
        assert!(first.woken().now_or_never().is_some());
        first.wake_used();
        drop(first);
        assert!(
            second.woken().now_or_never().is_none(),
            "a used wake-up was passed on: a wasted round trip"
        );
    }

    #[test]
    fn waiter_that_leaves_without_a_wake_wakes_nobody() {
        let queues = Arc::new(WaitQueues::new());
        let first = queues.join("k");
        let mut second = queues.join("k");
        drop(first);
        assert!(second.woken().now_or_never().is_none());
    }

    #[test]
    fn wake_all_reaches_every_sleeping_waiter_of_the_key_only() {
        let queues = Arc::new(WaitQueues::new());
        let mut first = queues.join("k");
        let mut second = queues.join("k");
        let mut other = queues.join("other");
        let mut sleeping = [first.woken().boxed(), second.woken().boxed()];
        let mut other_sleeping = other.woken().boxed();
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
