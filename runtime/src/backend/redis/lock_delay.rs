//! How long a server that was promoted, or restarted without its data, grants
//! nothing: the lock-delay each grant and renewal script checks (see
//! `node_delay` in `scripts/prelude.lua`). The delay must outlast every lease
//! such a server may have lost while its holder still believes it valid, so
//! by default it is the longest ttl this manager has asked for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisWrite, ToRedisArgs};

use crate::backend::step::millis;

/// The lock-delay a manager asks its servers to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum LockDelay {
    /// The longest ttl this manager has asked for so far.
    #[default]
    LongestTtl,
    /// This long, whatever the ttls.
    Fixed(Duration),
    /// None: a failover may let two holders in at once.
    Off,
}

/// What a grant script is told to keep the lock-delay (its argument
/// `DELAY_MS[+][ RUN_ID]`, see `node_delay` in `scripts/prelude.lua`): the
/// delay, whether a server up for less than it keeps it too (`+`), and the
/// `run_id` the manager saw when it connected, by which a server restarted
/// empty since (no marker, another process) is told from a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeCheck<'a> {
    /// The lock-delay in ms; 0 turns the check off.
    pub(crate) delay_ms: u64,
    /// Whether a server without a marker that started less than the delay
    /// ago keeps it (see `LockManagerBuilder::lock_delay_after_server_start`).
    pub(crate) after_start: bool,
    /// The server's `run_id` when the manager connected; empty if unknown.
    pub(crate) seen_run_id: &'a str,
}

impl NodeCheck<'static> {
    /// No check: no lock-delay is kept.
    pub(crate) const OFF: NodeCheck<'static> = NodeCheck {
        delay_ms: 0,
        after_start: false,
        seen_run_id: "",
    };
}

impl ToRedisArgs for NodeCheck<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let after_start = if self.after_start { "+" } else { "" };
        if self.delay_ms == 0 {
            out.write_arg_fmt(0);
        } else if self.seen_run_id.is_empty() {
            out.write_arg_fmt(format_args!("{}{after_start}", self.delay_ms));
        } else {
            out.write_arg_fmt(format_args!(
                "{}{after_start} {}",
                self.delay_ms, self.seen_run_id
            ));
        }
    }
}

/// The longest ttl one backend has asked for, for [`LockDelay::LongestTtl`].
#[derive(Debug, Default)]
pub(crate) struct LongestTtl(AtomicU64);

impl LockDelay {
    /// The delay in ms to send with a step for a lease of `ttl_ms`, where
    /// `longest` has the longest ttl asked for before; 0 when off.
    pub(crate) fn millis_for(self, ttl_ms: u64, longest: &LongestTtl) -> u64 {
        match self {
            LockDelay::Off => 0,
            LockDelay::Fixed(delay) => millis(delay),
            LockDelay::LongestTtl => longest.0.fetch_max(ttl_ms, Ordering::Relaxed).max(ttl_ms),
        }
    }
}

/// The server's `run_id` (`INFO server`); empty when it did not say (an
/// ACL without `+info` fails the grant scripts' check instead, with its
/// own error).
pub(crate) async fn run_id(connection: &mut (impl ConnectionLike + Send)) -> Box<str> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(connection)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("run_id:"))
        .filter(|id| id.chars().all(|c| c.is_ascii_hexdigit()))
        .unwrap_or_default()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_delay_is_the_longest_ttl_asked_for_so_far() {
        let longest = LongestTtl::default();
        let delay = LockDelay::default();
        assert_eq!(delay.millis_for(3_000, &longest), 3_000);
        assert_eq!(delay.millis_for(30_000, &longest), 30_000);
        assert_eq!(
            delay.millis_for(1_000, &longest),
            30_000,
            "a shorter ttl later"
        );
        assert_eq!(LockDelay::Off.millis_for(1_000, &longest), 0);
        let fixed = LockDelay::Fixed(Duration::from_secs(5));
        assert_eq!(fixed.millis_for(30_000, &longest), 5_000);
    }

    #[test]
    fn a_grant_script_is_told_the_delay_and_the_run_id_seen_at_connect() {
        let args = |check: NodeCheck<'_>| check.to_redis_args();
        let seen = NodeCheck {
            delay_ms: 3_000,
            after_start: false,
            seen_run_id: "ab12",
        };
        assert_eq!(args(seen), vec![b"3000 ab12".to_vec()]);
        let unknown = NodeCheck {
            seen_run_id: "",
            ..seen
        };
        assert_eq!(args(unknown), vec![b"3000".to_vec()]);
        let after_start = NodeCheck {
            after_start: true,
            ..seen
        };
        assert_eq!(args(after_start), vec![b"3000+ ab12".to_vec()]);
        assert_eq!(
            args(NodeCheck {
                seen_run_id: "",
                ..after_start
            }),
            vec![b"3000+".to_vec()]
        );
        assert_eq!(args(NodeCheck::OFF), vec![b"0".to_vec()]);
    }
}
