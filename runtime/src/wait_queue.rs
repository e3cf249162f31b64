//! Per-key queues of local waiters, woken one at a time.
//!
//! A release (seen as a pub/sub message, or directly for the in-memory backend)
//! wakes exactly one waiter of this process, so a hot key does not make every
//! waiter hit the server at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::futures::Notified;
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

/// Membership of one waiter in a key's queue; leaves the queue on drop.
pub(crate) struct WaitTicket {
    queues: Arc<WaitQueues>,
    key: String,
    notify: Arc<Notify>,
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
        }
    }

    /// How many waiters of this process wait for `key` now.
    pub(crate) fn waiters(&self, key: &str) -> usize {
        self.lock().get(key).map_or(0, |queue| queue.waiters)
    }

    /// Wakes one waiter of `key`, if there is any.
    pub(crate) fn wake_one(&self, key: &str) {
        if let Some(queue) = self.lock().get(key) {
            queue.notify.notify_one();
        }
    }

    /// Wakes every waiter of every key, e.g. after the notification channel was
    /// interrupted and messages may have been missed.
    pub(crate) fn wake_all(&self) {
        for queue in self.lock().values() {
            queue.notify.notify_waiters();
        }
    }
}

impl WaitTicket {
    /// Resolves when a release of this key wakes this waiter.
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let now_empty = {
            let mut queues = self.queues.lock();
            match queues.get_mut(&self.key) {
                Some(queue) if queue.waiters > 1 => {
                    queue.waiters -= 1;
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
        drop(a);
        assert!(calls.lock().unwrap().is_empty());
        drop(b);
        assert_eq!(*calls.lock().unwrap(), vec!["k".to_owned()]);
        assert_eq!(queues.waiters("k"), 0);
    }
}
