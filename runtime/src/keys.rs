//! The names one lock uses in Redis, and why no user key can collide with an
//! internal one.
//!
//! For a namespace `base:` (a `:` is added when missing), the lock on user key
//! `k` is `base:k`, and its internal keys are `base-fence:k` (fencing counter),
//! `base-queue:k` (waiters in arrival order) and `base-wait:k` (when each
//! waiter's place expires). Every lock key has `:` right after `base`, every
//! internal key `-`: no user key, whatever characters it holds, can name an
//! internal key of any lock of the same namespace. The internal prefixes differ
//! from each other in their first letter after the `-`, so they cannot
//! collide among themselves either.

/// The names one lock uses in its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKey {
    /// The key as the user wrote it, without namespace.
    pub(crate) user: String,
    /// The key the lock is stored under; also its release channel.
    pub(crate) lock: String,
    /// The fencing counter, which expires when the key is idle.
    pub(crate) fence: String,
    /// Sorted set of queued waiters' owner tokens, by arrival.
    pub(crate) queue: String,
    /// Hash of queued waiters' owner tokens to when their place expires.
    pub(crate) waiters: String,
}

/// The prefixes of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    /// `base:`, the namespace as given with a `:` added when missing.
    namespace: String,
    /// `base`, the namespace without its final `:`.
    base: String,
}

impl KeySpace {
    /// The key space of `namespace`; a `:` is added when it does not end with one.
    pub(crate) fn new(mut namespace: String) -> Self {
        if !namespace.ends_with(':') {
            namespace.push(':');
        }
        let base = namespace[..namespace.len() - 1].to_owned();
        KeySpace { namespace, base }
    }

    /// The prefix of every lock key: `base:`.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Every name the lock on `user` uses.
    pub(crate) fn key(&self, user: &str) -> LockKey {
        let base = &self.base;
        LockKey {
            user: user.to_owned(),
            lock: format!("{base}:{user}"),
            fence: format!("{base}-fence:{user}"),
            queue: format!("{base}-queue:{user}"),
            waiters: format!("{base}-wait:{user}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_a_trailing_separator() {
        assert_eq!(KeySpace::new("app".into()).namespace(), "app:");
        assert_eq!(KeySpace::new("lock:".into()).namespace(), "lock:");
        assert_eq!(KeySpace::new(String::new()).namespace(), ":");
        let key = KeySpace::new("app".into()).key("k");
        assert_eq!(
            (
                key.lock.as_str(),
                key.fence.as_str(),
                key.queue.as_str(),
                key.waiters.as_str()
            ),
            ("app:k", "app-fence:k", "app-queue:k", "app-wait:k")
        );
    }

    #[test]
    fn no_user_key_can_name_an_internal_key() {
        let namespaces = ["lock", "lock:", "", ":", "lock-fence", "a:b", "x-fence:"];
        let users = [
            "",
            "x",
            "-fence:x",
            ":x",
            "fence:x",
            "lock-fence:x",
            "-fence:",
            "-queue:x",
            "-wait:x",
            "{x}",
            "\u{0}",
        ];
        for namespace in namespaces {
            let space = KeySpace::new(namespace.into());
            let keys: Vec<LockKey> = users.iter().map(|user| space.key(user)).collect();
            let internal: Vec<(&str, &str)> = keys
                .iter()
                .flat_map(|key| {
                    [&key.fence, &key.queue, &key.waiters]
                        .map(|name| (name.as_str(), key.user.as_str()))
                })
                .collect();
            for key in &keys {
                for (name, owner) in &internal {
                    assert_ne!(
                        key.lock, *name,
                        "namespace {namespace:?}: user key {:?} names an internal key of {owner:?}",
                        key.user
                    );
                }
            }
            let mut distinct: Vec<&str> = internal.iter().map(|(name, _)| *name).collect();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), internal.len(), "two internal keys collide");
        }
    }
}
