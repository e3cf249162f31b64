//! The names one lock uses in Redis, and why no user key can collide with an
//! internal one.
//!
//! For a namespace `base:` (a `:` is added when missing), the lock on user key
//! `k` is `base:k`, and its internal keys are `base-fence:k` (fencing counter),
//! `base-queue:k` (waiters in arrival order) and `base-wait:k` (when each
//! waiter's place expires) and `base-record:k` (the last grant after a wait
//! and whether the holder released it within its `hold_at_least`). The semaphore on user key `k` keeps its holders
//! in `base-sem:k`, an internal key too, so a lock and a semaphore of the
//! same user key never share a name. The read/write lock on `k` keeps its
//! writer in `base-rw:k`, its readers in `base-read:k`, its waiting writers'
//! intents in `base-intent:k`, whether readers wait or have their turn in
//! `base-rwturn:k`, and its writers' fencing counter in
//! `base-rwfence:k`. The namespace's node marker (the identity its server
//! last granted under, for the lock-delay) is `base-node:`, with no user key
//! after it (on a cluster one per slot, see below); a server process's note
//! for a session of the lock-delay's check (see `backend/redis/session.rs`) is the
//! marker's name followed by the session's 32 hex digits, which no other
//! role's name is. Every lock key has `:` right after `base`, every
//! internal key `-`: no user key, whatever characters it holds, can name an
//! internal key of any lock of the same namespace. No internal prefix
//! (`fence:`, `queue:`, `wait:`, `sem:`, `rw:`, `read:`, `intent:`,
//! `rwfence:`, `rwturn:`, `record:`, `node:`) is a prefix of another, so they cannot collide among
//! themselves either.
//!
//! On Redis Cluster every name of one lock must live in one hash slot, so a
//! hash-tagged key space puts `{tag}` in front of each of them: `{tag}base:k`,
//! `{tag}base-fence:k`, ... Redis hashes only what lies between the first `{`
//! and the next `}`, which the tag fills: whatever the namespace or the user
//! key hold afterwards (braces included) cannot change the slot. The tag is
//! the user key's own hash tag when it has one (so `order:{42}:a` and
//! `order:{42}:b` share a slot, as they would as plain Redis keys), else a
//! 64-bit FNV-1a hash of the user key in hex: never empty, never a `}`.
//! A tag holds no `}`, so it ends at the first one: the names stay distinct.
//! The node marker is per slot, not per tag: `{n}base-node:`, where `n` is
//! the smallest number (in decimal) of the lock's slot (see `slots`), so
//! a cluster keeps at most one per slot and namespace, however many keys
//! are locked.
//!
//! Namespaces stay apart too, because [`check_namespace`] refuses the two
//! that would not: a `:` inside the namespace (`app:x`'s lock on `k` would be
//! `app`'s lock on `x:k`), and a namespace ending in `-` and an internal role
//! (`app-fence`'s lock on `k` would be `app`'s fencing counter of `k`). With
//! neither, a name reads back one way only: the namespace runs to the first
//! `:` or `-`-and-role before the first `:`, and roles hold no `-`.

use crate::kinds::kind::{Holding, Kind, LockKind, EVERY};
use crate::slots;
use crate::LockError;

/// What follows `base-` in an internal key's name, one per role: every
/// kind's roles but a lock's own name (`:`), without their `-` and `:`.
fn internal_roles() -> Vec<&'static str> {
    let mut roles: Vec<&str> = EVERY
        .iter()
        .flat_map(|kind| kind.roles())
        .filter_map(|role| role.strip_prefix('-')?.strip_suffix(':'))
        .collect();
    roles.sort_unstable();
    roles.dedup();
    roles
}

/// Refuses a namespace whose names could be another namespace's (see the
/// module's documentation) with `InvalidOptions` naming the fix. A final
/// `:` is allowed, as it is added anyway.
pub(crate) fn check_namespace(namespace: &str) -> Result<(), LockError> {
    let base = namespace.strip_suffix(':').unwrap_or(namespace);
    if base.contains(':') {
        return Err(LockError::InvalidOptions(format!(
            "namespace `{namespace}` holds a `:` before its end, so its keys could be another namespace's (`a:b`'s key `k` is `a`'s key `b:k`); use another separator, e.g. `{}`",
            base.replace(':', "_")
        )));
    }
    let roles = internal_roles();
    if let Some(role) = roles.iter().find(|role| {
        base.strip_suffix(*role)
            .is_some_and(|rest| rest.ends_with('-'))
    }) {
        return Err(LockError::InvalidOptions(format!(
            "namespace `{namespace}` ends in `-{role}`, the name of an internal key of another namespace's locks; choose a name that does not end in `-` and one of: {}",
            roles.join(", ")
        )));
    }
    Ok(())
}

/// The names one lock (or semaphore) uses in its backend, written back to
/// back into one string: every acquisition builds a key, so it costs one
/// allocation rather than one per name.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockKey {
    /// The kind of lease it names; the backends run that kind's steps for
    /// it (release and renewal included).
    pub(crate) kind: Kind,
    /// The user key, then the names of the kind's six roles (see
    /// [`Kind::roles`]: [`lock`](Self::lock), [`fence`](Self::fence), the
    /// queue, the places, [`members`](Self::members), the record), then
    /// [`node`](Self::node).
    names: Box<str>,
    /// Where each of those eight parts of `names` ends.
    ends: [usize; 8],
}

impl LockKey {
    /// The part `index` of `names`.
    fn part(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.names[start..self.ends[index]]
    }

    /// The key as the user wrote it, without namespace.
    pub(crate) fn user(&self) -> &str {
        self.part(0)
    }

    /// The name that stands for the whole key in this process (its lock
    /// scope, its seats) and on its release channel: the lock, a read/write
    /// lock's writer, a semaphore's holder set.
    pub(crate) fn lock(&self) -> &str {
        self.part(1)
    }

    /// The fencing counter (a read/write lock's: its writers'), which
    /// expires when the key is idle.
    pub(crate) fn fence(&self) -> &str {
        self.part(2)
    }

    /// The names of a lock, by role: what a lock's steps touch.
    pub(crate) fn as_lock(&self) -> LockNames<'_> {
        LockNames {
            lock: self.part(1),
            fence: self.part(2),
            queue: self.part(3),
            places: self.part(4),
            record: self.part(6),
        }
    }

    /// The names of a read/write lock, by role: what its steps touch.
    pub(crate) fn as_rw(&self) -> RwNames<'_> {
        RwNames {
            writer: self.part(1),
            fence: self.part(2),
            intents: self.part(3),
            turn: self.part(4),
            readers: self.part(5),
        }
    }

    /// The member leases (see [`Holding::Member`]):
    /// a read/write lock's readers, a semaphore's holders (its name again);
    /// for a lock the readers of the read/write lock of the same user key,
    /// which no lock step touches. A sorted set of owner token -> lease end
    /// (server ms).
    pub(crate) fn members(&self) -> &str {
        self.part(5)
    }

    /// The namespace's node marker, `base-node:` (`{n}base-node:` when
    /// hash-tagged: one per slot, in the lock's): the identity its node last granted under and the end
    /// of its lock-delay (see `node_delay` in `backend/redis/scripts/prelude.lua`).
    pub(crate) fn node(&self) -> &str {
        self.part(7)
    }

    /// The node marker of `slot` in this key's namespace, as
    /// [`node`](Self::node) names it for a lock of that slot (hash-tagged
    /// key spaces; `check` reads every slot's a cluster primary serves).
    pub(crate) fn node_of_slot(&self, slot: usize) -> String {
        let untagged = self
            .node()
            .split_once('}')
            .map_or(self.node(), |(_, rest)| rest);
        format!("{{{}}}{untagged}", slots::marker_tag(slot))
    }

    /// The name its lease is held under (see [`Holding`]): the key whose
    /// value it is, or the set it is a member of.
    pub(crate) fn lease_name(&self) -> &str {
        match self.kind.holding() {
            Holding::Key => self.lock(),
            Holding::Member => self.members(),
        }
    }

    /// The channel whose release messages wake this key's waiters: the lock
    /// key (for a semaphore its holder set, for a reader of a read/write
    /// lock its writer key), except for a writer of a read/write lock, which
    /// waits for readers to leave and so listens on the readers' name.
    pub(crate) fn channel(&self) -> &str {
        if self.kind.woken_by_members() {
            self.members()
        } else {
            self.lock()
        }
    }
}

impl std::fmt::Debug for LockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKey")
            .field("kind", &self.kind)
            .field("user", &self.user())
            .field("lock", &self.lock())
            .field("fence", &self.fence())
            .field("queue", &self.part(3))
            .field("places", &self.part(4))
            .field("members", &self.members())
            .field("record", &self.part(6))
            .field("node", &self.node())
            .finish()
    }
}

/// The names of a lock (see [`LockKey::as_lock`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockNames<'a> {
    /// The lock: its holder's owner token, with the lease as TTL.
    pub(crate) lock: &'a str,
    /// The fencing counter.
    pub(crate) fence: &'a str,
    /// Sorted set of queued waiters' owner tokens, by arrival.
    pub(crate) queue: &'a str,
    /// Hash of queued waiters' owner tokens to their places (when each
    /// ends, see `place_of` in `prelude.lua`).
    pub(crate) places: &'a str,
    /// Hash of what operators are shown about the lock's current lease
    /// beyond its token: `granted` (`token granted_ms queued_ms`, server
    /// ms, written when a waiter is granted the lock) and `released` (the
    /// token of a holder that released within its `hold_at_least`).
    pub(crate) record: &'a str,
}

/// The names of a read/write lock (see [`LockKey::as_rw`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwNames<'a> {
    /// The writer: its owner token, with the lease as TTL.
    pub(crate) writer: &'a str,
    /// The writers' fencing counter.
    pub(crate) fence: &'a str,
    /// Sorted set of waiting writers' intents -> when each ends.
    pub(crate) intents: &'a str,
    /// Whether readers wait, or have their turn (see `rw_read_acquire.lua`).
    pub(crate) turn: &'a str,
    /// Sorted set of readers' owner tokens -> lease end.
    pub(crate) readers: &'a str,
}

/// What follows `base` in the name of the namespace's node marker: no
/// user key follows it, and no lock key, whose user key is never empty, is
/// named so.
const NODE_ROLE: &str = "-node:";

/// The prefixes of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    /// `base:`, the namespace as given with a `:` added when missing.
    namespace: String,
    /// `base`, the namespace without its final `:`.
    base: String,
    /// Whether every name of a lock starts with its slot's hash tag (Redis Cluster).
    hash_tagged: bool,
}

impl KeySpace {
    /// The key space of `namespace`; a `:` is added when it does not end with one.
    pub(crate) fn new(mut namespace: String) -> Self {
        if !namespace.ends_with(':') {
            namespace.push(':');
        }
        let base = namespace[..namespace.len() - 1].to_owned();
        KeySpace {
            namespace,
            base,
            hash_tagged: false,
        }
    }

    /// As [`new`](Self::new), with every name of a lock in one Redis Cluster
    /// hash slot (see the module's documentation).
    pub(crate) fn hash_tagged(namespace: String) -> Self {
        KeySpace {
            hash_tagged: true,
            ..KeySpace::new(namespace)
        }
    }

    /// The prefix of every lock key: `base:`.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The namespace's node marker on one server, `base-node:` (what
    /// [`LockKey::node`] names without a hash tag): where a replaced
    /// Sentinel primary is deposed.
    pub(crate) fn node_marker(&self) -> String {
        [self.base.as_str(), NODE_ROLE].concat()
    }

    /// Every name the lease of `kind` on `user` uses (the roles the kind
    /// names, see [`Kind::roles`]).
    pub(crate) fn key(&self, kind: Kind, user: &str) -> LockKey {
        self.names(kind, user, kind.roles())
    }

    /// The [`LockKey`] of `kind` on `user` whose names (`{tag}base{role}user`)
    /// have these `roles`: lock, fence, queue, waiters, readers and record;
    /// then the namespace's node marker.
    fn names(&self, kind: Kind, user: &str, roles: [&str; 6]) -> LockKey {
        let (tag, marker_tag) = self.tags(user);
        let name_len = tag.len() + self.base.len() + user.len();
        let size = user.len()
            + roles
                .iter()
                .map(|role| name_len + role.len())
                .sum::<usize>()
            + marker_tag.len()
            + self.base.len()
            + NODE_ROLE.len();
        let mut names = String::with_capacity(size);
        let mut ends = [0; 8];
        names.push_str(user);
        ends[0] = names.len();
        for (end, role) in ends[1..7].iter_mut().zip(roles) {
            for part in [tag.as_str(), self.base.as_str(), role, user] {
                names.push_str(part);
            }
            *end = names.len();
        }
        for part in [marker_tag.as_str(), self.base.as_str(), NODE_ROLE] {
            names.push_str(part);
        }
        ends[7] = names.len();
        LockKey {
            kind,
            names: names.into_boxed_str(),
            ends,
        }
    }

    /// When hash-tagged, `{tag}` of `user`'s slot and `{n}`, the tag of the
    /// node marker of that slot (shared by every lock of the slot, see
    /// `slots`); else nothing.
    fn tags(&self, user: &str) -> (String, String) {
        if !self.hash_tagged {
            return (String::new(), String::new());
        }
        let tag = slot_tag(user);
        let marker = slots::marker_tag(slots::slot(&tag));
        (format!("{{{tag}}}"), format!("{{{marker}}}"))
    }
}

impl KeySpace {
    /// A Redis glob matching the lock keys whose user keys match the glob
    /// `user_pattern` (the namespace's own glob characters escaped).
    pub(crate) fn scan_pattern(&self, user_pattern: &str) -> String {
        let mut pattern = String::new();
        if self.hash_tagged {
            pattern.push_str("{*}");
        }
        push_escaped(&mut pattern, &self.namespace);
        pattern.push_str(user_pattern);
        pattern
    }

    /// The user key of the lock key `name`, if `name` is one of this key
    /// space's lock keys (not an internal key, not another namespace's).
    pub(crate) fn user_key_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        self.untagged(name)?.strip_prefix(self.namespace.as_str())
    }

    /// A Redis glob matching, for every user key matching the glob
    /// `user_pattern`, the names that say a lock of some kind is held: the
    /// lock key `base:k`, a read/write lock's writer `base-rw:k` and readers
    /// `base-read:k`, a semaphore's holders `base-sem:k` (`base*:` then the
    /// user glob). It matches other names too, which
    /// [`held_of`](Self::held_of) leaves out.
    pub(crate) fn scan_pattern_every_kind(&self, user_pattern: &str) -> String {
        let mut pattern = String::new();
        if self.hash_tagged {
            pattern.push_str("{*}");
        }
        push_escaped(&mut pattern, &self.base);
        pattern.push_str("*:");
        pattern.push_str(user_pattern);
        pattern
    }

    /// The kind and user key of the lock that the name `name` says is held,
    /// if `name` is this key space's lock key, read/write lock writer or
    /// readers, or semaphore holder set (not a fencing counter, queue or
    /// writers' intents, not another namespace's name).
    pub(crate) fn held_of<'a>(&self, name: &'a str) -> Option<(LockKind, &'a str)> {
        let rest = self.untagged(name)?.strip_prefix(self.base.as_str())?;
        EVERY.iter().find_map(|kind| {
            let user = kind.held_roles().find_map(|role| rest.strip_prefix(role))?;
            Some((kind.public(), user))
        })
    }

    /// `name` without its hash tag when hash-tagged; `None` if it has none.
    fn untagged<'a>(&self, name: &'a str) -> Option<&'a str> {
        if self.hash_tagged {
            let (_, rest) = name.strip_prefix('{')?.split_once('}')?;
            Some(rest)
        } else {
            Some(name)
        }
    }
}

/// Appends `text` to `pattern` with Redis's glob characters escaped.
fn push_escaped(pattern: &mut String, text: &str) {
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
}

/// What decides the hash slot of `user`'s lock: the key's own hash tag, by
/// Redis's rule (between the first `{` and the next `}`, if not empty), or
/// else the FNV-1a hash of the whole key in 16 hex digits.
fn slot_tag(user: &str) -> String {
    let own_tag = user.split_once('{').and_then(|(_, rest)| {
        let (tag, _) = rest.split_once('}')?;
        (!tag.is_empty()).then_some(tag)
    });
    match own_tag {
        Some(tag) => tag.to_owned(),
        None => format!("{:016x}", fnv1a(user.as_bytes())),
    }
}

/// The 64-bit FNV-1a hash: stable across processes, versions and languages.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::kind::Side;

    #[test]
    fn every_lock_of_a_namespace_shares_its_node_marker_which_on_a_cluster_is_in_the_locks_slot() {
        let keys = KeySpace::new("app".into());
        assert_eq!(keys.key(Kind::Lock, "k").node(), "app-node:");
        assert_eq!(
            keys.key(Kind::Semaphore { permits: 1 }, "other").node(),
            "app-node:"
        );
        let cluster = KeySpace::hash_tagged("app".into());
        let tagged = cluster.key(Kind::Lock, "order:{42}");
        let marker_tag = slots::marker_tag(slots::slot("42"));
        assert_eq!(slots::slot(&marker_tag.to_string()), slots::slot("42"));
        assert_eq!(tagged.node(), format!("{{{marker_tag}}}app-node:"));
        assert_eq!(tagged.lock(), "{42}app:order:{42}");
        assert_eq!(tagged.user(), "order:{42}", "the parts before stay whole");
        let same_slot = (0..100_000)
            .map(|i| format!("t{i}"))
            .find(|tag| tag != "42" && slots::slot(tag) == slots::slot("42"))
            .expect("another tag of the slot");
        let neighbour = cluster.key(
            Kind::Semaphore { permits: 1 },
            &format!("stock:{{{same_slot}}}"),
        );
        assert_eq!(neighbour.node(), tagged.node(), "one marker per slot");
        let odd = KeySpace::hash_tagged("}x{".into()).key(Kind::Lock, "k");
        assert_eq!(
            odd.node_of_slot(slots::slot("42")),
            format!("{{{marker_tag}}}}}x{{-node:")
        );
        assert_eq!(tagged.node_of_slot(slots::slot("42")), tagged.node());
    }

    #[test]
    fn a_namespace_gets_a_trailing_separator() {
        assert_eq!(KeySpace::new("app".into()).namespace(), "app:");
        assert_eq!(KeySpace::new("lock:".into()).namespace(), "lock:");
        assert_eq!(KeySpace::new(String::new()).namespace(), ":");
        let key = KeySpace::new("app".into()).key(Kind::Lock, "k");
        assert_eq!(
            (
                key.lock(),
                key.fence(),
                key.as_lock().queue,
                key.as_lock().places
            ),
            ("app:k", "app-fence:k", "app-queue:k", "app-wait:k")
        );
        let semaphore = KeySpace::new("app".into()).key(Kind::Semaphore { permits: 1 }, "k");
        assert_eq!(
            (semaphore.kind, semaphore.lock()),
            (Kind::Semaphore { permits: 1 }, "app-sem:k")
        );
        let rw = KeySpace::new("app".into()).key(Kind::ReadWrite(Side::Read), "k");
        assert_eq!(
            (
                rw.kind,
                rw.lock(),
                rw.members(),
                rw.as_rw().intents,
                rw.fence()
            ),
            (
                Kind::ReadWrite(Side::Read),
                "app-rw:k",
                "app-read:k",
                "app-intent:k",
                "app-rwfence:k"
            )
        );
    }

    /// User keys whose braces could move a name to another slot if the tag
    /// were built naively.
    const BRACED: [&str; 12] = [
        "", "x", "{", "}", "{}", "}{", "{{}}", "a{b}c", "a{}b{c}", "{x}", "x{", "{}x{y}",
    ];

    /// The slot Redis Cluster gives `name`: CRC16-XMODEM of its hash tag or of
    /// all of it, modulo 16384 (Redis's own rule, written out for the test).
    fn slot(name: &str) -> u16 {
        let bytes = name.as_bytes();
        let hashed = match bytes.iter().position(|&b| b == b'{') {
            Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
                _ => bytes,
            },
            None => bytes,
        };
        let crc = hashed.iter().fold(0u16, |crc, &byte| {
            (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
                if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                }
            })
        });
        crc % 16384
    }

    /// Namespace `app`, without and with hash tags.
    fn both_spaces() -> [KeySpace; 2] {
        [
            KeySpace::new("app".into()),
            KeySpace::hash_tagged("app".into()),
        ]
    }

    #[test]
    fn lock_keys_give_back_their_user_keys_and_internal_keys_none() {
        for space in both_spaces() {
            for user in BRACED {
                let key = space.key(Kind::Lock, user);
                assert_eq!(space.user_key_of(key.lock()), Some(user));
                for internal in [
                    key.fence(),
                    key.as_lock().queue,
                    key.as_lock().places,
                    key.as_lock().record,
                ] {
                    assert_eq!(space.user_key_of(internal), None, "{internal}");
                }
            }
            assert_eq!(space.user_key_of("other:x"), None);
        }
        assert_eq!(KeySpace::new("a*b".into()).scan_pattern("k*"), "a\\*b:k*");
        assert_eq!(
            KeySpace::hash_tagged("lock".into()).scan_pattern("*"),
            "{*}lock:*"
        );
    }

    #[test]
    fn held_names_of_every_kind_give_back_kind_and_user_key_and_internal_names_none() {
        for space in both_spaces() {
            for user in BRACED {
                let (key, rw) = (
                    space.key(Kind::Lock, user),
                    space.key(Kind::ReadWrite(Side::Write), user),
                );
                let semaphore = space.key(Kind::Semaphore { permits: 1 }, user);
                assert_eq!(space.held_of(key.lock()), Some((LockKind::Lock, user)));
                for name in [rw.lock(), rw.members()] {
                    assert_eq!(space.held_of(name), Some((LockKind::ReadWrite, user)));
                }
                assert_eq!(
                    space.held_of(semaphore.lock()),
                    Some((LockKind::Semaphore, user))
                );
                for internal in [
                    key.fence(),
                    key.as_lock().queue,
                    key.as_lock().places,
                    key.as_lock().record,
                    rw.fence(),
                    rw.as_rw().intents,
                ] {
                    assert_eq!(space.held_of(internal), None, "{internal}");
                }
            }
            assert_eq!(space.held_of("other:x"), None);
        }
        assert_eq!(
            KeySpace::new("a*b".into()).scan_pattern_every_kind("k*"),
            "a\\*b*:k*"
        );
        assert_eq!(
            KeySpace::hash_tagged("lock".into()).scan_pattern_every_kind("*"),
            "{*}lock*:*"
        );
    }

    #[test]
    fn the_slot_function_agrees_with_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(slot("{a}k"), 15495);
        assert_eq!(slot("123456789"), 12739);
    }

    /// Every name on one user key but its plain lock's own: the lock's
    /// internal names, its semaphore's and its read/write lock's (`rw`).
    fn names_besides_the_lock<'a>(
        key: &'a LockKey,
        semaphore: &'a LockKey,
        rw: &'a LockKey,
    ) -> [&'a str; 9] {
        [
            key.fence(),
            key.as_lock().queue,
            key.as_lock().places,
            key.as_lock().record,
            semaphore.lock(),
            rw.lock(),
            rw.fence(),
            rw.as_rw().intents,
            rw.members(),
        ]
    }

    #[test]
    fn every_name_of_a_hash_tagged_lock_shares_one_slot() {
        for namespace in ["lock", "a{b}", "{", "}x{"] {
            let space = KeySpace::hash_tagged(namespace.into());
            for user in BRACED {
                let key = space.key(Kind::Lock, user);
                let semaphore = space.key(Kind::Semaphore { permits: 1 }, user);
                let rw = space.key(Kind::ReadWrite(Side::Write), user);
                let markers = [key.node(), semaphore.node(), rw.node()];
                let slots: Vec<u16> = std::iter::once(key.lock())
                    .chain(names_besides_the_lock(&key, &semaphore, &rw))
                    .chain(markers)
                    .map(slot)
                    .collect();
                assert!(
                    slots.iter().all(|&s| s == slots[0]),
                    "namespace {namespace:?}, user key {user:?}: names in slots {slots:?}"
                );
            }
        }
    }

    #[test]
    fn a_user_hash_tag_decides_the_slot_as_it_would_in_plain_redis() {
        let space = KeySpace::hash_tagged("lock".into());
        assert_eq!(
            slot(space.key(Kind::Lock, "order:{42}:a").lock()),
            slot("order:{42}:a")
        );
        assert_eq!(
            slot(space.key(Kind::Lock, "order:{42}:a").lock()),
            slot(space.key(Kind::Lock, "order:{42}:b").lock())
        );
        assert_eq!(
            space.key(Kind::Lock, "stock:1").lock(),
            "{0bfba0e5423746e4}lock:stock:1"
        );
    }

    #[test]
    fn no_user_key_can_name_an_internal_key() {
        for space in [KeySpace::new, KeySpace::hash_tagged] {
            no_user_key_names_an_internal_key_of(space);
        }
    }

    fn no_user_key_names_an_internal_key_of(new: fn(String) -> KeySpace) {
        let namespaces = [
            "lock",
            "lock:",
            "",
            ":",
            "lock-fence",
            "a:b",
            "x-fence:",
            "lock-sem",
            "x-sem:",
            "lock-rw",
            "x-rwfence:",
        ];
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
            "-sem:x",
            "sem:x",
            "-rw:x",
            "-rwfence:x",
            "-read:x",
            "-intent:x",
            "rw:x",
            "{x}",
            "\u{0}",
            "}lock:x",
            "{}",
            "a{b}c",
        ];
        for namespace in namespaces {
            let space = new(namespace.into());
            let keys: Vec<LockKey> = users
                .iter()
                .map(|user| space.key(Kind::Lock, user))
                .collect();
            let semaphores: Vec<LockKey> = users
                .iter()
                .map(|user| space.key(Kind::Semaphore { permits: 1 }, user))
                .collect();
            let rwlocks: Vec<LockKey> = users
                .iter()
                .map(|user| space.key(Kind::ReadWrite(Side::Read), user))
                .collect();
            let internal: Vec<(&str, &str)> = keys
                .iter()
                .zip(&semaphores)
                .zip(&rwlocks)
                .flat_map(|((key, semaphore), rw)| {
                    names_besides_the_lock(key, semaphore, rw).map(|name| (name, key.user()))
                })
                .collect();
            for key in &keys {
                for (name, owner) in &internal {
                    assert_ne!(
                        key.lock(),
                        *name,
                        "namespace {namespace:?}: user key {:?} names an internal key of {owner:?}",
                        key.user()
                    );
                }
            }
            let mut distinct: Vec<&str> = internal.iter().map(|(name, _)| *name).collect();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), internal.len(), "two internal keys collide");
        }
    }

    /// Every name of the locks, semaphores and read/write locks on `user` in
    /// `keys`, each with the role it plays: no two (namespace, key, role)
    /// may share a name.
    fn names(keys: &KeySpace, user: &str) -> Vec<(String, &'static str)> {
        let lock = keys.key(Kind::Lock, user);
        let rw = keys.key(Kind::ReadWrite(Side::Write), user);
        vec![
            (lock.lock().to_owned(), "lock"),
            (lock.fence().to_owned(), "fence"),
            (lock.as_lock().queue.to_owned(), "queue"),
            (lock.as_lock().places.to_owned(), "wait"),
            (lock.members().to_owned(), "readers"),
            (lock.as_lock().record.to_owned(), "record"),
            (
                keys.key(Kind::Semaphore { permits: 1 }, user)
                    .lock()
                    .to_owned(),
                "semaphore",
            ),
            (rw.lock().to_owned(), "writer"),
            (rw.fence().to_owned(), "writers' fence"),
            (rw.as_rw().intents.to_owned(), "intents"),
        ]
    }

    /// Issue 25: namespace `app` kept its fencing counter at `app-fence:k`,
    /// which was namespace `app-fence`'s lock on `k`. Over every namespace
    /// built from the pieces below (each internal suffix, `:`, `-`, nested
    /// namespaces) and keys that look like names, the accepted namespaces'
    /// names are all distinct, plainly and hash-tagged; the refused ones are
    /// exactly those that would collide.
    #[test]
    fn no_two_namespaces_keys_or_roles_share_a_name() {
        let mut pieces = vec!["", "a", "app", "lock", "-", ":", "-x", ":x", "x-", "{t}"];
        let suffixes: Vec<String> = internal_roles()
            .iter()
            .map(|role| format!("-{role}"))
            .collect();
        pieces.extend(suffixes.iter().map(String::as_str));
        let mut namespaces = Vec::new();
        for first in &pieces {
            for second in &pieces {
                for end in ["", ":"] {
                    namespaces.push(format!("{first}{second}{end}"));
                }
            }
        }
        let users = [
            "k",
            "x:k",
            "fence:k",
            "-fence:k",
            ":k",
            "-k",
            "",
            "{t}k",
            "a-fence:k",
            "k:",
        ];
        for hash_tagged in [false, true] {
            let mut owner: std::collections::HashMap<String, (String, &str, &str)> =
                std::collections::HashMap::new();
            let mut accepted = 0;
            for namespace in &namespaces {
                if check_namespace(namespace).is_err() {
                    continue;
                }
                accepted += 1;
                let keys = if hash_tagged {
                    KeySpace::hash_tagged(namespace.clone())
                } else {
                    KeySpace::new(namespace.clone())
                };
                for user in users {
                    for (name, role) in names(&keys, user) {
                        let this = (keys.namespace().to_owned(), user, role);
                        if let Some(other) = owner.insert(name.clone(), this.clone()) {
                            assert_eq!(other, this, "`{name}` names two things");
                        }
                    }
                }
            }
            assert!(accepted > 100, "only {accepted} namespaces accepted");
        }
    }

    #[test]
    fn namespaces_that_would_collide_are_refused() {
        for refused in [
            "app-fence",
            "app-rwfence:",
            "lock-rw",
            "a:b",
            "a:b:",
            "-sem",
        ] {
            assert!(
                matches!(check_namespace(refused), Err(LockError::InvalidOptions(_))),
                "{refused}"
            );
        }
        for accepted in [
            "lock:",
            "lock",
            "app",
            "my-app",
            "app-fencer",
            "",
            ":",
            "a-b-c",
        ] {
            assert!(check_namespace(accepted).is_ok(), "{accepted}");
        }
    }
}
