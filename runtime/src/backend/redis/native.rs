//! The server's own compare-and-delete and compare-and-renew, where it has
//! them: one command instead of a script, and no Lua on the server.
//!
//! | server | release | renewal |
//! | --- | --- | --- |
//! | Valkey 9.0 and later | `DELIFEQ key token` | `SET key token IFEQ token PX ttl` |
//! | Valkey 8.1 | the script | `SET … IFEQ …` |
//! | Redis 8.4 and later | `DELEX key IFEQ token` | `SET … IFEQ …` |
//! | older servers | the scripts | the scripts |
//!
//! Only a plain lock's release and a lock's (or writer's) renewal have a
//! native form. While waiters are queued for a plain lock its value carries
//! the waiters' mark (see `prelude.lua`), so the native compare fails and
//! the caller falls back to the script, which hands the lock to the first
//! waiter: a native release never skips a queued waiter.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Value};

use super::commands::set_command;
use super::connection::describe;
use crate::backend::step::Claim;
use crate::keys::LockKey;
use crate::token::OwnerToken;

/// What one server offers natively, probed once per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Native {
    /// The compare-and-delete, if the server has one.
    pub(crate) release: Option<NativeRelease>,
    /// Whether the server has `SET … IFEQ`.
    pub(crate) renew: bool,
}

/// The spelling of a server's compare-and-delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NativeRelease {
    /// Valkey: `DELIFEQ key value`.
    DelIfEq,
    /// Redis: `DELEX key IFEQ value`.
    DelExIfEq,
}

impl Native {
    /// What the server named `server` (`valkey` or `redis`, as `HELLO`
    /// says) at `version` offers.
    pub(crate) fn of(server: &str, version: &str) -> Self {
        let version = major_minor(version);
        match server {
            "valkey" => Native {
                release: (version >= (9, 0)).then_some(NativeRelease::DelIfEq),
                renew: version >= (8, 1),
            },
            "redis" if version >= (8, 4) => Native {
                release: Some(NativeRelease::DelExIfEq),
                renew: true,
            },
            _ => Native::default(),
        }
    }

    /// Asks the server on `connection`: `HELLO` without arguments (one
    /// round trip; it needs no ACL permission and keeps the connection's
    /// protocol). Nothing native when it does not answer.
    pub(crate) async fn probe(connection: &mut (impl ConnectionLike + Send)) -> Self {
        match redis::cmd("HELLO").query_async::<Value>(connection).await {
            Ok(hello) => {
                let (server, version) = server_of(hello);
                Native::of(&server, &version)
            }
            Err(err) => {
                tracing::debug!(error = %describe(&err), "server version unknown; locks use the scripts");
                Native::default()
            }
        }
    }

    /// The server's own commands these offer, as an operator reads them.
    pub(crate) fn names(self) -> Vec<&'static str> {
        let release = self.release.map(|release| match release {
            NativeRelease::DelIfEq => "DELIFEQ",
            NativeRelease::DelExIfEq => "DELEX IFEQ",
        });
        release
            .into_iter()
            .chain(self.renew.then_some("SET IFEQ"))
            .collect()
    }
}

/// The server's name and version in a `HELLO` reply (`redis`, `7.0.15`);
/// empty where it does not say.
pub(in crate::backend) fn server_of(hello: Value) -> (String, String) {
    let mut fields = fields(hello);
    let mut take = |name: &str| {
        fields
            .iter()
            .position(|(key, _)| key == name)
            .map(|at| fields.swap_remove(at).1)
            .unwrap_or_default()
    };
    let server = take("server");
    (server, take("version"))
}

/// The text fields of a `HELLO` reply: a map in RESP3, a flat array of
/// names and values in RESP2.
fn fields(hello: Value) -> Vec<(String, String)> {
    let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
    match hello {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(key, value)| Some((text(key)?, text(value)?)))
            .collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|pair| Some((text(&pair[0])?, text(&pair[1])?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// `major.minor` of a version such as `9.1.2`; (0, 0) where unreadable.
fn major_minor(text: &str) -> (u32, u32) {
    let mut parts = text.trim().split('.').map(|part| part.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

impl NativeRelease {
    /// Deletes the lock `key` if its value is exactly `token` (ours, and no
    /// waiters' mark): whether it did.
    pub(in crate::backend) async fn run(
        self,
        connection: &mut (impl ConnectionLike + Send),
        key: &LockKey,
        token: &OwnerToken,
    ) -> Result<bool, RedisError> {
        let mut command = match self {
            NativeRelease::DelIfEq => redis::cmd("DELIFEQ"),
            NativeRelease::DelExIfEq => redis::cmd("DELEX"),
        };
        command.arg(key.lock());
        if self == NativeRelease::DelExIfEq {
            command.arg("IFEQ");
        }
        let deleted: i64 = command.arg(token.as_str()).query_async(connection).await?;
        Ok(deleted == 1)
    }
}

/// `SET key token IFEQ token PX ttl`: extends the claim's lease if the
/// lock's value is exactly its token; whether it did.
pub(in crate::backend) async fn renew(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
) -> Result<bool, RedisError> {
    let token = claim.token.as_str();
    let set: Option<()> = set_command(claim.key.lock(), token)
        .arg("IFEQ")
        .arg(token)
        .arg("PX")
        .arg(claim.ttl_ms)
        .query_async(connection)
        .await?;
    Ok(set.is_some())
}

/// What a server offers natively, until it refuses a native command once
/// (an ACL without `+delifeq` or `+delex`, say): the scripts from then on,
/// so a refusal costs one round trip, not one per release.
#[derive(Debug, Default)]
pub(crate) struct NativeCommands {
    offered: Native,
    refused: AtomicBool,
}

impl NativeCommands {
    /// The commands `offered`, none refused yet.
    pub(crate) fn new(offered: Native) -> Self {
        NativeCommands {
            offered,
            refused: AtomicBool::new(false),
        }
    }

    /// What is in use now: what was offered, or nothing once refused.
    pub(crate) fn in_use(&self) -> Native {
        if self.refused.load(Ordering::Relaxed) {
            Native::default()
        } else {
            self.offered
        }
    }

    /// The compare-and-delete to use, if any.
    pub(crate) fn release(&self) -> Option<NativeRelease> {
        self.offered
            .release
            .filter(|_| !self.refused.load(Ordering::Relaxed))
    }

    /// Whether to renew with `SET … IFEQ`.
    pub(crate) fn renew(&self) -> bool {
        self.offered.renew && !self.refused.load(Ordering::Relaxed)
    }

    /// A native step's answer, or `None` when the script must decide: the
    /// value was not exactly the token (marked for waiters, or not ours:
    /// the script tells which), or the server refused the command (an error
    /// reply changed nothing; the native commands are then given up). A
    /// connection error is final, as the script's would be: the step may
    /// have landed.
    pub(in crate::backend) fn settled(
        &self,
        answer: Result<bool, RedisError>,
    ) -> Option<Result<bool, RedisError>> {
        match answer {
            Ok(true) => Some(Ok(true)),
            Ok(false) => None,
            Err(err) if matches!(err.kind(), ErrorKind::Server(_)) => {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %describe(&err), "the server refused a native lock command; using the scripts from now on (allow +delifeq on Valkey, +delex on Redis, in the ACL)");
                }
                None
            }
            Err(err) => Some(Err(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_gets_the_commands_it_has() {
        let delifeq = Native {
            release: Some(NativeRelease::DelIfEq),
            renew: true,
        };
        let delex = Native {
            release: Some(NativeRelease::DelExIfEq),
            renew: true,
        };
        let set_ifeq_only = Native {
            release: None,
            renew: true,
        };
        for (server, version, native) in [
            ("valkey", "9.1.2", delifeq),
            ("valkey", "10.0.0", delifeq),
            ("valkey", "8.1.1", set_ifeq_only),
            ("valkey", "8.0.2", Native::default()),
            ("redis", "8.4.0", delex),
            ("redis", "9.0.1", delex),
            ("redis", "8.2.3", Native::default()),
            ("redis", "7.0.15", Native::default()),
            ("redis", "x.y", Native::default()),
            ("keydb", "9.9.9", Native::default()),
        ] {
            assert_eq!(Native::of(server, version), native, "{server} {version}");
        }
    }

    #[test]
    fn hello_replies_are_read_in_both_protocols() {
        let text = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            text("server"),
            text("valkey"),
            text("version"),
            text("9.1.2"),
            text("proto"),
            Value::Int(2),
        ]);
        let resp3 = Value::Map(vec![
            (text("server"), text("redis")),
            (text("version"), text("8.4.0")),
        ]);
        let pairs = |fields: Vec<(String, String)>| fields.into_iter().take(2).collect::<Vec<_>>();
        assert_eq!(
            pairs(fields(resp2)),
            [
                ("server".into(), "valkey".into()),
                ("version".into(), "9.1.2".into())
            ]
        );
        assert_eq!(
            pairs(fields(resp3)),
            [
                ("server".into(), "redis".into()),
                ("version".into(), "8.4.0".into())
            ]
        );
    }
}
