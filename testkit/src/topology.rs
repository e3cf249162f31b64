//! What [`RedisCluster`](crate::RedisCluster) and
//! [`RedisSentinel`](crate::RedisSentinel) share: bounded waits for a
//! topology to settle, failures that quote every node's log, and `ROLE`.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use crate::resp::RespValue;
use crate::server::RedisServer;

/// Pause between two checks of a topology, which each cost a few requests.
const CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// A data node's replication role, as its `ROLE` reply states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Accepts writes.
    Primary,
    /// Follows the primary on `primary_port`; `connected` once its link is up.
    Replica { primary_port: u16, connected: bool },
}

/// Calls `check` every [`CHECK_INTERVAL`] until it returns `Ok`, for at most
/// `timeout` (and a matching number of calls). Panics with `what`, the last
/// error and the log tails of `nodes` if it never does.
#[track_caller]
pub(crate) fn wait_for<T>(
    what: &str,
    timeout: Duration,
    nodes: &[&RedisServer],
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    let max_checks = timeout.as_millis() / CHECK_INTERVAL.as_millis() + 1;
    let mut last = String::from("never checked");
    for _ in 0..max_checks {
        match check() {
            Ok(value) => return value,
            Err(error) => last = error,
        }
        if Instant::now() >= deadline {
            break;
        }
        thread::sleep(CHECK_INTERVAL);
    }
    fail(&format!("{what} within {timeout:?}"), &last, nodes)
}

/// Panics with "cannot `what`: `cause`" followed by the log tail of every node.
#[track_caller]
pub(crate) fn fail(what: &str, cause: &str, nodes: &[&RedisServer]) -> ! {
    let mut message = format!("cannot {what}: {cause}");
    for node in nodes {
        let state = if node.is_running() {
            "running"
        } else {
            "stopped"
        };
        let _ = write!(
            message,
            "\n--- log of redis-server {} ({state}) ---\n{}",
            node.addr(),
            node.log_tail()
        );
    }
    panic!("{message}")
}

/// Sends `args` to `node`; on an error, panics like [`fail`].
#[track_caller]
pub(crate) fn expect(node: &RedisServer, args: &[&str], nodes: &[&RedisServer]) -> RespValue {
    node.command(args)
        .unwrap_or_else(|error| fail(&format!("run {args:?}"), &error, nodes))
}

/// The text of a reply that must be a (simple or bulk) string.
pub(crate) fn text(node: &RedisServer, args: &[&str]) -> Result<String, String> {
    let reply = node.command(args)?;
    reply
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{args:?} on {} replied {reply:?}", node.addr()))
}

/// The role `node` reports with `ROLE`.
pub(crate) fn role(node: &RedisServer) -> Result<Role, String> {
    let reply = node.command(&["ROLE"])?;
    parse_role(&reply).ok_or_else(|| format!("ROLE on {} replied {reply:?}", node.addr()))
}

/// `["master", offset, replicas]` or `["slave", host, port, state, offset]`.
fn parse_role(reply: &RespValue) -> Option<Role> {
    let RespValue::Array(fields) = reply else {
        return None;
    };
    match fields.first()?.as_str()? {
        "master" => Some(Role::Primary),
        "slave" => Some(Role::Replica {
            primary_port: u16::try_from(fields.get(2)?.as_integer()?).ok()?,
            connected: fields.get(3)?.as_str()? == "connected",
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> RespValue {
        RespValue::Bulk(text.as_bytes().to_vec())
    }

    #[test]
    fn parses_role_replies() {
        let primary = RespValue::Array(vec![
            bulk("master"),
            RespValue::Integer(10),
            RespValue::Array(Vec::new()),
        ]);
        assert_eq!(parse_role(&primary), Some(Role::Primary));
        let replica = |state| {
            RespValue::Array(vec![
                bulk("slave"),
                bulk("127.0.0.1"),
                RespValue::Integer(7000),
                bulk(state),
                RespValue::Integer(10),
            ])
        };
        let connected = Role::Replica {
            primary_port: 7000,
            connected: true,
        };
        assert_eq!(parse_role(&replica("connected")), Some(connected));
        let syncing = Role::Replica {
            primary_port: 7000,
            connected: false,
        };
        assert_eq!(parse_role(&replica("sync")), Some(syncing));
        let sentinel = RespValue::Array(vec![bulk("sentinel"), RespValue::Array(Vec::new())]);
        assert_eq!(parse_role(&sentinel), None);
        assert_eq!(parse_role(&RespValue::Nil), None);
    }
}
