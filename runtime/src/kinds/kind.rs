//! What each kind of lease is, described once: its names' roles, how it
//! waits, how its leases are held on a server (and with `rules`, the
//! options it takes, how it shares its key and re-enters). The engine
//! (`acquire`), the leases and the backends read the kind through these
//! answers and never ask which kind they run; the backends' per-kind files
//! (`backend/redis/kinds.rs`, `backend/memory/kinds.rs`) are the only other
//! places that tell kinds apart, each mapping a kind to its scripts or its
//! in-memory model. Adding a kind is a variant here, its answers, its
//! scripts and its model.

/// The kinds of lock a key can have; each keeps its own state, so one user
/// key can be held as several kinds at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A plain lock (`acquire`, `#[distributed_lock]`): see
    /// [`LockManager::inspect`](crate::LockManager::inspect).
    Lock,
    /// A read/write lock (`acquire_read`, `acquire_write`): see
    /// [`RwLock::inspect`](crate::RwLock::inspect).
    ReadWrite,
    /// A counting semaphore (`semaphore(key, n)`): see
    /// [`Semaphore::inspect`](crate::Semaphore::inspect).
    Semaphore,
}

/// The kind of one lease, one per public [`LockKind`]: a lock, a read or
/// write lease of a read/write lock, or a permit of a semaphore of
/// `permits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The plain lock on a key.
    Lock,
    /// A read or the write lease of a read/write lock.
    ReadWrite(Side),
    /// One permit of a semaphore that admits `permits` holders at once.
    Semaphore { permits: u32 },
}

/// Which lease of a read/write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// One of the readers, who hold it beside each other.
    Read,
    /// The writer, who holds it alone.
    Write,
}

/// How a waiter of a kind waits for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Queues: where the backend hands the key to the first waiter on
    /// release, the waiter keeps a place in the backend's queue from when
    /// it watches for its grant; elsewhere a newcomer queues behind this
    /// process's waiters before it tries.
    Queues,
    /// Keeps a place (a writer's intent, a reader's mark that readers
    /// wait) from its first attempt on, refreshed by its own attempts.
    KeepsPlace,
    /// Is woken by releases and tries again; keeps nothing on the server.
    Woken,
}

/// How a kind's lease is held on a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holding {
    /// As the value of one key, with the lease as its TTL (a lock, a
    /// writer): renewed by compare-and-renew on that key.
    Key,
    /// As a member of a sorted set of leases, scored by its end (a permit,
    /// a reader): renewed and given back as that member.
    Member,
}

impl Kind {
    /// The kind's name in log lines and metrics: `lock`, `read`, `write` or
    /// `permit`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::ReadWrite(Side::Read) => "read",
            Kind::ReadWrite(Side::Write) => "write",
            Kind::Semaphore { .. } => "permit",
        }
    }

    /// Its place among the kinds, `0..KINDS` (metrics keep one entry each).
    pub(crate) fn index(self) -> usize {
        match self {
            Kind::Lock => 0,
            Kind::Semaphore { .. } => 1,
            Kind::ReadWrite(Side::Read) => 2,
            Kind::ReadWrite(Side::Write) => 3,
        }
    }

    /// The public kind it is a lease of.
    pub(crate) fn public(self) -> LockKind {
        match self {
            Kind::Lock => LockKind::Lock,
            Kind::ReadWrite(_) => LockKind::ReadWrite,
            Kind::Semaphore { .. } => LockKind::Semaphore,
        }
    }

    /// The roles of its names that say a lease of it is held (see
    /// `keys::held_of`): its name, and the set its member leases live in.
    pub(crate) fn held_roles(self) -> impl Iterator<Item = &'static str> {
        let [name, _, _, _, members, _] = self.roles();
        let members = (self.holding() == Holding::Member).then_some(members);
        std::iter::once(name).chain(members)
    }

    /// What follows the namespace in each of its names (see `keys`): its
    /// name (the lock, the writer, the holder set), the fencing counter,
    /// the queue (waiting lockers, writers' intents), the places (waiting
    /// lockers' place ends, the readers' turn), the member leases (readers,
    /// the holder set again) and the record. A kind that has no use for a
    /// role names the lock's of the same key, which its steps never touch.
    pub(crate) fn roles(self) -> [&'static str; 6] {
        match self {
            Kind::Lock => [":", "-fence:", "-queue:", "-wait:", "-read:", "-record:"],
            Kind::ReadWrite(_) => [
                "-rw:",
                "-rwfence:",
                "-intent:",
                "-rwturn:",
                "-read:",
                "-record:",
            ],
            Kind::Semaphore { .. } => {
                ["-sem:", "-fence:", "-queue:", "-wait:", "-sem:", "-record:"]
            }
        }
    }

    /// Whether its waiters are woken by member leases ending (a writer,
    /// who waits for the readers to leave) rather than by the release of
    /// its name.
    pub(crate) fn woken_by_members(self) -> bool {
        self == Kind::ReadWrite(Side::Write)
    }

    /// How its lease is held on a server.
    pub(crate) fn holding(self) -> Holding {
        match self {
            Kind::Lock | Kind::ReadWrite(Side::Write) => Holding::Key,
            Kind::ReadWrite(Side::Read) | Kind::Semaphore { .. } => Holding::Member,
        }
    }

    /// How its waiter waits.
    pub(crate) fn waiting(self) -> Waiting {
        match self {
            Kind::Lock => Waiting::Queues,
            Kind::ReadWrite(_) => Waiting::KeepsPlace,
            Kind::Semaphore { .. } => Waiting::Woken,
        }
    }

    /// Whether its first attempt also issues the fencing token of a
    /// `fenced` acquisition (one script on one server); other fenced kinds
    /// ask for it once the lease is held.
    pub(crate) fn fences_first_attempt(self) -> bool {
        self == Kind::Lock
    }

    /// Whether a single server's busy answer to its first attempt leaves
    /// the holder's remaining time unsaid (a plain `SET NX`), so that one
    /// attempt asks for it separately.
    pub(crate) fn asks_remaining(self) -> bool {
        self == Kind::Lock
    }

    /// Whether its leases are locks of the lock scope that holds them (a
    /// nested acquisition of the same key may re-enter them, and a scope's
    /// fencing token is theirs): every kind but permits.
    pub(crate) fn scoped(self) -> bool {
        !matches!(self, Kind::Semaphore { .. })
    }

    /// Whether it is the plain lock, which `fencing_token_for(key)` names.
    pub(crate) fn is_lock(self) -> bool {
        self == Kind::Lock
    }
}

/// How many kinds [`Kind::index`] numbers.
pub(crate) const KINDS: usize = 4;

/// Every kind, in [`Kind::index`] order (a semaphore's permits do not
/// matter where every kind is walked: its names' roles are the same).
pub(crate) const EVERY: [Kind; KINDS] = [
    Kind::Lock,
    Kind::Semaphore { permits: 1 },
    Kind::ReadWrite(Side::Read),
    Kind::ReadWrite(Side::Write),
];
