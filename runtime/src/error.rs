//! The one error type of the crate, and what a service answers for each
//! error (one table for HTTP and gRPC, used by the tower layer and offered to
//! services that use the attribute).

use std::sync::Arc;
use std::time::Duration;

/// The lower error behind a [`LockError`] (the Redis client's error, an I/O
/// error), shared so that `LockError` stays `Clone`. [`LockError`] returns
/// it from [`source()`](std::error::Error::source), so `anyhow` and `eyre`
/// reports show it, and code can downcast it.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while taking, keeping or giving back a lock.
///
/// Every variant says what happened and what the caller can do about it.
/// Variants that wrap a lower error return it from `source()`; their
/// messages are the library's own words and never hold a password.
///
/// ```no_run
/// # use leasehold_runtime::{LockError, LockManager, LockOptions};
/// # async fn example(locks: LockManager) {
/// match locks.acquire("stock:42", LockOptions::new()).await {
///     Ok(guard) => drop(guard),
///     Err(LockError::Busy { .. } | LockError::Timeout { .. }) => { /* someone else has it */ }
///     Err(err @ LockError::Auth { .. }) => panic!("fix the credentials: {err}"),
///     Err(err) if err.is_retryable() => { /* back off and try again */ }
///     Err(err) => eprintln!("lock failed ({}): {err}", err.http_status()),
/// }
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock server could not be reached or did not answer in time.
    #[error("lock server unreachable or not answering: {detail}; check that it is running and the URL is right, then retry")]
    Connection {
        /// What failed, and where.
        detail: String,
        /// The lower error, where there was one.
        source: Option<Cause>,
    },
    /// The TLS handshake with the lock server failed, e.g. its certificate does
    /// not chain to a trusted root or does not name the host.
    #[error("TLS handshake with the lock server failed: {detail}; check that the server's certificate chains to a root you trust (the system's store, or LockManagerBuilder::tls_root_certificate) and names the host in the URL")]
    Tls {
        /// What failed, and where.
        detail: String,
        /// The lower error, where there was one.
        source: Option<Cause>,
    },
    /// The lock server (or a Sentinel) refused the credentials: a password
    /// is missing (`NOAUTH`), wrong (`WRONGPASS`), or given to a server that
    /// has none. Found when the manager is built, or on the first command
    /// after the password was changed on the server; retrying will not help.
    #[error("the lock server refused the credentials: {detail}")]
    Auth {
        /// Which server, and what it refused (never the password).
        detail: String,
        /// The lower error, where there was one.
        source: Option<Cause>,
    },
    /// The lock server answered with an error.
    #[error("lock server returned an error: {detail}")]
    Server {
        /// The server's error, in its words.
        detail: String,
        /// The lower error, where there was one.
        source: Option<Cause>,
    },
    /// The server's ACL refused a command, key or channel the lock needs to
    /// the manager's Redis user.
    #[error("the lock server's ACL refused this user: {detail}; grant it {rule} with ACL SETUSER (the guide's \"Least privilege\" section, leasehold::guide::operating, lists every rule a lock needs)")]
    PermissionDenied {
        /// What the server refused, in its words.
        detail: String,
        /// The ACL rule that grants it.
        rule: String,
        /// The server's refusal, where there was one.
        source: Option<Cause>,
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
    /// Another holder has the lock, or the server is in its lock-delay,
    /// and this attempt did not wait for it (`wait` of zero, `try_acquire`
    /// reports it as `Ok(None)` instead).
    #[error("{}; this attempt did not wait (give it a `wait`, or retry later)", refused(.key, .remaining, .lock_delay))]
    Busy {
        /// The lock key, without namespace.
        key: String,
        /// About how long until the key may be free, where the backend said:
        /// the holder's lease's time left (for a semaphore: the earliest of
        /// its permits' leases; the holder may renew it), or in a
        /// lock-delay, what is left of it.
        remaining: Option<Duration>,
        /// `Some` when the server refused because it is in its lock-delay
        /// (it was promoted or restarted without its data, see
        /// [`LockManagerBuilder::lock_delay`](crate::LockManagerBuilder::lock_delay)):
        /// about how long the delay has left. Nobody may hold the key.
        lock_delay: Option<Duration>,
    },
    /// Another holder kept the lock, or the server its lock-delay, for the
    /// whole `wait` period.
    #[error("{}; gave up after waiting {waited:?} (raise `wait` or retry later)", waited_for(.key, .lock_delay))]
    Timeout {
        /// The lock key, without namespace.
        key: String,
        /// How long we waited.
        waited: Duration,
        /// `Some` when the last attempt was refused because the server is in
        /// its lock-delay (it was promoted or restarted without its data):
        /// about how long the delay had left then, counted from when the
        /// wait ended.
        lock_delay: Option<Duration>,
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

/// The start of `Busy`'s message: who holds the key, or the lock-delay.
fn refused(key: &str, remaining: &Option<Duration>, lock_delay: &Option<Duration>) -> String {
    match (lock_delay, remaining) {
        (Some(left), _) => in_lock_delay(key, *left),
        (None, Some(remaining)) => format!(
            "lock `{key}` is held by another owner (its lease ends in about {remaining:?} unless renewed)"
        ),
        (None, None) => format!("lock `{key}` is held by another owner"),
    }
}

/// The start of `Timeout`'s message: who held the key, or the lock-delay.
fn waited_for(key: &str, lock_delay: &Option<Duration>) -> String {
    match lock_delay {
        Some(left) => in_lock_delay(key, *left),
        None => format!("lock `{key}` is held by another owner"),
    }
}

/// Why a server in its lock-delay refused `key`, and for how long more.
fn in_lock_delay(key: &str, left: Duration) -> String {
    format!(
        "lock `{key}` is not granted: the server was promoted or restarted (a failover) and grants nothing for {:.1} s more (lock-delay), as a lease it may have lost could still be held",
        left.as_secs_f64()
    )
}

fn not_held(key: &Option<String>) -> String {
    match key {
        Some(key) => format!("no lock scope running here holds `{key}`"),
        None => "no lock scope is running here".to_owned(),
    }
}

impl LockError {
    /// `Connection` with no lower error.
    pub(crate) fn connection(detail: impl Into<String>) -> Self {
        LockError::Connection {
            detail: detail.into(),
            source: None,
        }
    }

    /// `Server` with no lower error.
    pub(crate) fn server(detail: impl Into<String>) -> Self {
        LockError::Server {
            detail: detail.into(),
            source: None,
        }
    }

    /// The lower error behind this one, as its own type: downcast it
    /// (`err.cause()?.downcast_ref::<redis::RedisError>()`) to read what
    /// the Redis client or the operating system reported. `source()` shows
    /// the same error (its message and its own chain), wrapped in [`Cause`].
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            LockError::Connection { source, .. }
            | LockError::Tls { source, .. }
            | LockError::Auth { source, .. }
            | LockError::Server { source, .. }
            | LockError::PermissionDenied { source, .. } => source.as_deref(),
            _ => None,
        }
    }

    /// Whether retrying the same call later may succeed. Never for `Auth`
    /// or `PermissionDenied`: those need the configuration fixed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Connection { .. }
                | LockError::Busy { .. }
                | LockError::Timeout { .. }
                | LockError::NotReplicated { .. }
        )
    }

    /// The HTTP status a service answers when a request failed with this
    /// error: the one table the tower layer uses too, so a service that maps
    /// the attribute's errors with it answers as the layer does.
    ///
    /// | error | status |
    /// | --- | --- |
    /// | `Busy`, `Timeout` | 409 Conflict (the layer answers 429 instead when configured so) |
    /// | `LeaseLost` | 503 Service Unavailable: the work may be partly done; retry it |
    /// | `Connection`, `Tls`, `Server`, `NotReplicated`, `ShutDown` | 503 Service Unavailable |
    /// | `InvalidOptions` (an empty key or placeholder, a bad computed setting) | 400 Bad Request |
    /// | `Auth`, `PermissionDenied` and every other error | 500 Internal Server Error |
    pub fn http_status(&self) -> u16 {
        match self.answer() {
            Answer::Busy => 409,
            Answer::Unavailable => 503,
            Answer::BadRequest => 400,
            Answer::Internal => 500,
        }
    }

    /// The gRPC status code (as tonic's `Code::from_i32` reads it) for this
    /// error, on the same table as [`http_status`](Self::http_status):
    /// `Busy`/`Timeout` 10 `ABORTED`, `LeaseLost` and the unavailable
    /// server 14 `UNAVAILABLE`, `InvalidOptions` 3 `INVALID_ARGUMENT`,
    /// every other error 13 `INTERNAL`.
    pub fn grpc_code(&self) -> i32 {
        match self.answer() {
            Answer::Busy => 10,
            Answer::Unavailable => 14,
            Answer::BadRequest => 3,
            Answer::Internal => 13,
        }
    }

    /// Which row of the status table this error falls in.
    fn answer(&self) -> Answer {
        match self {
            LockError::Busy { .. } | LockError::Timeout { .. } => Answer::Busy,
            LockError::LeaseLost { .. }
            | LockError::Connection { .. }
            | LockError::Tls { .. }
            | LockError::Server { .. }
            | LockError::NotReplicated { .. }
            | LockError::ShutDown => Answer::Unavailable,
            LockError::InvalidOptions(_) => Answer::BadRequest,
            _ => Answer::Internal,
        }
    }
}

/// The rows of the status table.
enum Answer {
    Busy,
    Unavailable,
    BadRequest,
    Internal,
}

impl From<LockError> for std::io::Error {
    fn from(err: LockError) -> Self {
        let kind = match err {
            LockError::Connection { .. } => std::io::ErrorKind::ConnectionRefused,
            LockError::Timeout { .. } => std::io::ErrorKind::TimedOut,
            LockError::Busy { .. } => std::io::ErrorKind::WouldBlock,
            LockError::InvalidUrl { .. } | LockError::InvalidOptions(_) => {
                std::io::ErrorKind::InvalidInput
            }
            LockError::Tls { .. } => std::io::ErrorKind::InvalidData,
            LockError::UnknownService { .. } => std::io::ErrorKind::NotFound,
            LockError::PermissionDenied { .. } | LockError::Auth { .. } => {
                std::io::ErrorKind::PermissionDenied
            }
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::sync::Arc;
    use std::time::Duration;

    use super::LockError;

    #[test]
    fn a_wrapped_error_is_its_source_and_stays_out_of_the_message() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "os words");
        let err = LockError::Connection {
            detail: "cannot connect to 127.0.0.1:1".to_owned(),
            source: Some(Arc::new(cause)),
        };
        let source = err.source().expect("the cause is kept");
        assert_eq!(source.to_string(), "os words");
        let cause = err.cause().expect("the cause is kept");
        assert!(cause.downcast_ref::<std::io::Error>().is_some());
        assert!(!err.to_string().contains("os words"), "{err}");
        let copy = err.clone();
        assert!(copy.source().is_some());
    }

    #[test]
    fn auth_is_not_retryable_and_answers_as_a_server_fault() {
        let err = LockError::Auth {
            detail: "x".to_owned(),
            source: None,
        };
        assert!(!err.is_retryable());
        assert_eq!((err.http_status(), err.grpc_code()), (500, 13));
    }

    #[test]
    fn a_refusal_in_the_lock_delay_names_it_and_a_plain_busy_lock_does_not() {
        let left = Some(Duration::from_millis(2_100));
        let delayed = LockError::Busy {
            key: "k".to_owned(),
            remaining: left,
            lock_delay: left,
        };
        let message = delayed.to_string();
        assert!(message.contains("promoted or restarted"), "{message}");
        assert!(message.contains("2.1 s more (lock-delay)"), "{message}");
        let timed_out = LockError::Timeout {
            key: "k".to_owned(),
            waited: Duration::from_millis(300),
            lock_delay: left,
        };
        assert!(
            timed_out.to_string().contains("(lock-delay)"),
            "{timed_out}"
        );
        let held = LockError::Busy {
            key: "k".to_owned(),
            remaining: left,
            lock_delay: None,
        };
        assert!(!held.to_string().contains("lock-delay"), "{held}");
        assert!(held.to_string().contains("held by another owner"), "{held}");
        assert_eq!([delayed.http_status(), timed_out.http_status()], [409, 409]);
    }

    #[test]
    fn the_status_table_answers_each_row() {
        let busy = LockError::Busy {
            key: "k".to_owned(),
            remaining: None,
            lock_delay: None,
        };
        let lost = LockError::LeaseLost {
            key: "k".to_owned(),
        };
        let bad = LockError::InvalidOptions("empty key".to_owned());
        let down = LockError::connection("down");
        let rows = [busy, lost, bad, down, LockError::NotInstalled]
            .map(|err| (err.http_status(), err.grpc_code()));
        assert_eq!(rows, [(409, 10), (503, 14), (400, 3), (503, 14), (500, 13)]);
    }
}
