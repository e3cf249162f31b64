//! [`Engine`]: which server program a [`RedisServer`](crate::RedisServer)
//! runs, and where its binary is.

use std::ffi::{OsStr, OsString};
use std::io::{self, ErrorKind};

/// Environment variable naming the `valkey-server` binary; there is no
/// default, as no distribution this project runs on packages Valkey 9.
pub const VALKEY_BIN_ENV: &str = "LEASEHOLD_VALKEY_SERVER";

/// Environment variable overriding the `redis-server` binary.
const REDIS_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// The server program a [`RedisServer`](crate::RedisServer) runs. Both take
/// the same command line and speak the same protocol, so the harness starts,
/// probes and stops them alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    /// `redis-server` from `PATH` (Debian's, Redis 7.0), or the path in
    /// `REDIS_SERVER_BIN`.
    #[default]
    Redis,
    /// `valkey-server` 9.1, from the path in `LEASEHOLD_VALKEY_SERVER`, which
    /// `scripts/run-tests` sets to the build `scripts/ensure-valkey` caches.
    /// Starting it with the variable unset panics with what to run.
    Valkey,
}

impl Engine {
    /// The program's name, for messages: `redis-server` or `valkey-server`.
    pub fn program(self) -> &'static str {
        match self {
            Engine::Redis => "redis-server",
            Engine::Valkey => "valkey-server",
        }
    }

    /// The binary to execute. Panics for Valkey when [`VALKEY_BIN_ENV`] is
    /// unset, rather than skipping: a test that meant to run on Valkey must
    /// not pass without running.
    #[track_caller]
    pub(crate) fn binary(self) -> OsString {
        match (self, self.overridden()) {
            (_, Some(path)) => path,
            (Engine::Redis, None) => self.program().into(),
            (Engine::Valkey, None) => panic!(
                "{VALKEY_BIN_ENV} is not set, so this Valkey test has no valkey-server to start: \
                 run `export {VALKEY_BIN_ENV}=$(scripts/ensure-valkey)`, which builds Valkey 9.1 \
                 once (about 1.5 min, cached under ~/.cache/leasehold) and prints its path; \
                 scripts/test and scripts/run-tests set it themselves"
            ),
        }
    }

    /// Explains why `bin` could not be executed.
    pub(crate) fn spawn_failure(self, bin: &OsStr, error: &io::Error) -> String {
        match (error.kind(), self.overridden().is_some()) {
            (ErrorKind::NotFound, false) => "redis-server not found on PATH: install it with \
                `apt-get install -y redis-server` (Debian) or run scripts/test, which installs it"
                .to_owned(),
            (ErrorKind::NotFound, true) => format!(
                "{}={bin:?} does not exist{}",
                self.env_var(),
                match self {
                    Engine::Redis => "",
                    Engine::Valkey =>
                        "; `scripts/ensure-valkey` prints the path of a valkey-server 9.1",
                }
            ),
            _ => format!("cannot execute {bin:?}: {error}"),
        }
    }

    /// The variable naming this engine's binary.
    fn env_var(self) -> &'static str {
        match self {
            Engine::Redis => REDIS_BIN_ENV,
            Engine::Valkey => VALKEY_BIN_ENV,
        }
    }

    /// The binary named by [`env_var`](Self::env_var), if set and not empty.
    fn overridden(self) -> Option<OsString> {
        std::env::var_os(self.env_var()).filter(|path| !path.is_empty())
    }
}
