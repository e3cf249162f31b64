//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong while taking, keeping or giving back a lock.
///
/// Every variant says what happened and what the caller can do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock server could not be reached or did not answer in time.
    #[error("lock server unreachable or not answering: {0}; check that Redis is running and the URL is right, then retry")]
    Connection(String),
    /// The TLS handshake with the lock server failed, e.g. its certificate does
    /// not chain to a trusted root or does not name the host.
    #[error("TLS handshake with the lock server failed: {0}; check that the server's certificate chains to a root you trust (the system's store, or LockManagerBuilder::tls_root_certificate) and names the host in the URL")]
    Tls(String),
    /// The lock server answered with an error.
    #[error("lock server returned an error: {0}")]
    Server(String),
    /// The server's ACL refused a command, key or channel the lock needs to
    /// the manager's Redis user.
    #[error("the lock server's ACL refused this user: {detail}; grant it {rule} with ACL SETUSER (the README's \"Least privilege\" section lists every rule a lock needs)")]
    PermissionDenied {
        /// What the server refused, in its words.
        detail: String,
        /// The ACL rule that grants it.
        rule: String,
    },
    /// The URL given to `LockManager::connect` could not be parsed.
    #[error("invalid Redis URL `{url}`: {reason}; expected redis://[user:pass@]host[:port][/db], or rediss://… for TLS with the `tls` feature")]
    InvalidUrl {
        /// The URL as given, its password replaced by `***`
        /// (see [`redact_url`](crate::redact_url)).
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No Sentinel monitors a primary under the service name given to
    /// `LockManagerBuilder::sentinel`.
    #[error("no Sentinel monitors a service named `{service}`; check the name against the `sentinel monitor <name> …` lines of the Sentinels' configuration (or `SENTINEL MASTERS`)")]
    UnknownService {
        /// The service name as given.
        service: String,
    },
    /// Another holder has the lock, and this attempt did not wait for it
    /// (`wait` of zero, `try_acquire` reports it as `Ok(None)` instead).
    #[error("lock `{key}` is held by another owner{}; this attempt did not wait (give it a `wait`, or retry later)", ends_in(.remaining))]
    Busy {
        /// The lock key, without namespace.
        key: String,
        /// About how long the holder's lease has left, where the backend
        /// said (for a semaphore: the earliest of its permits' leases); the
        /// holder may renew it.
        remaining: Option<Duration>,
    },
    /// Another holder kept the lock for the whole `wait` period.
    #[error("lock `{key}` is held by another owner; gave up after waiting {waited:?} (raise `wait` or retry later)")]
    Timeout {
        /// The lock key, without namespace.
        key: String,
        /// How long we waited.
        waited: Duration,
    },
    /// The lease ran out or was taken over before the holder finished.
    #[error("lease on lock `{key}` was lost before the holder finished; its work must be treated as not protected")]
    LeaseLost {
        /// The lock key, without namespace.
        key: String,
    },
    /// A non-re-entrant lock was requested again inside its own holder.
    #[error("lock `{key}` is already held by this scope and was declared non-re-entrant; this call would deadlock")]
    AlreadyHeld {
        /// The lock key, without namespace.
        key: String,
    },
    /// A write lock was requested inside a scope that holds the same
    /// read/write lock for reading: the writer would wait for its own reader.
    #[error("read/write lock `{key}` is held for reading by this scope, so a write lock here would wait for itself; take the write lock around the whole scope instead (a read inside a write re-enters)")]
    UpgradeRefused {
        /// The lock key, without namespace.
        key: String,
    },
    /// No manager was installed and none was passed to the attribute.
    #[error("no LockManager installed: call leasehold::install(manager) at start-up, or pass `manager = …` to #[distributed_lock]")]
    NotInstalled,
    /// The manager was shut down with `LockManager::shutdown` (by this handle
    /// or a clone) and takes no more locks.
    #[error("this LockManager was shut down (LockManager::shutdown) and takes no more locks; build a new manager, or install one, to lock again")]
    ShutDown,
    /// The options cannot be satisfied, e.g. a zero TTL.
    #[error("invalid lock options: {0}")]
    InvalidOptions(String),
    /// A lock scope's fencing token was asked for where no running lock
    /// scope holds the key.
    #[error("{}: call it from the body of #[distributed_lock] or LockManager::with_lock, or use LockGuard::fencing_token", not_held(.key))]
    NotHeld {
        /// The key asked for (without namespace); `None` when any key would do.
        key: Option<String>,
    },
    /// Fewer replicas than `min_replicas` acknowledged the acquisition in time.
    #[error("lock `{key}` reached only {acknowledged} of {required} replicas in time; it was released again (check replication health)")]
    NotReplicated {
        /// The lock key, without namespace.
        key: String,
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
    },
}

fn ends_in(remaining: &Option<Duration>) -> String {
    match remaining {
        Some(remaining) => format!(" (its lease ends in about {remaining:?} unless renewed)"),
        None => String::new(),
    }
}

fn not_held(key: &Option<String>) -> String {
    match key {
        Some(key) => format!("no lock scope running here holds `{key}`"),
        None => "no lock scope is running here".to_owned(),
    }
}

impl LockError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Connection(_)
                | LockError::Busy { .. }
                | LockError::Timeout { .. }
                | LockError::NotReplicated { .. }
        )
    }
}

impl From<LockError> for std::io::Error {
    fn from(err: LockError) -> Self {
        let kind = match err {
            LockError::Connection(_) => std::io::ErrorKind::ConnectionRefused,
            LockError::Timeout { .. } => std::io::ErrorKind::TimedOut,
            LockError::Busy { .. } => std::io::ErrorKind::WouldBlock,
            LockError::InvalidUrl { .. } | LockError::InvalidOptions(_) => {
                std::io::ErrorKind::InvalidInput
            }
            LockError::Tls(_) => std::io::ErrorKind::InvalidData,
            LockError::UnknownService { .. } => std::io::ErrorKind::NotFound,
            LockError::PermissionDenied { .. } => std::io::ErrorKind::PermissionDenied,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, err)
    }
}
