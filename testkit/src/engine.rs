//! [`Engine`]: which server program a [`RedisServer`](crate::RedisServer)
//! runs, and where its binary is.

use std::ffi::{OsStr, OsString};
use std::io::{self, ErrorKind};

/// Environment variable naming the `valkey-server` binary; there is no
/// default, as no distribution this project runs on packages Valkey 9.
pub const VALKEY_BIN_ENV: &str = "LEASEHOLD_VALKEY_SERVER";

/// Environment variable naming the Redis 8.6 `redis-server` binary; there
/// is no default, as Debian stable packages Redis 7.
pub const REDIS8_BIN_ENV: &str = "LEASEHOLD_REDIS8_SERVER";

/// Environment variable overriding the `redis-server` binary.
const REDIS_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// The server program a [`RedisServer`](crate::RedisServer) runs. All take
/// the same command line and speak the same protocol, so the harness starts,
/// probes and stops them alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    /// `redis-server` from `PATH` (Debian's, Redis 7.0), or the path in
    /// `REDIS_SERVER_BIN`.
    #[default]
    Redis,
    /// `valkey-server` 9.1, from the path in `LEASEHOLD_VALKEY_SERVER`, which
    /// `cargo xtask test` sets to the build `scripts/ensure-valkey` caches.
    /// Starting it with the variable unset panics with what to run.
    Valkey,
    /// `redis-server` 8.6 (which has `DELEX` and `SET … IFEQ`), from the
    /// path in `LEASEHOLD_REDIS8_SERVER`, which `cargo xtask test` sets to
    /// the build `scripts/ensure-redis8` caches. Starting it with the
    /// variable unset panics with what to run.
    Redis8,
}

impl Engine {
    /// Every engine, in the order the suites name them.
    pub const ALL: [Engine; 3] = [Engine::Redis, Engine::Valkey, Engine::Redis8];

    /// The program's name, for messages: `redis-server` or `valkey-server`.
    pub fn program(self) -> &'static str {
        match self {
            Engine::Redis | Engine::Redis8 => "redis-server",
            Engine::Valkey => "valkey-server",
        }
    }

    /// The binary to execute. Panics for a built engine (Valkey, Redis 8)
    /// whose variable is unset, rather than skipping: a test that meant to
    /// run on it must not pass without running.
    #[track_caller]
    pub(crate) fn binary(self) -> OsString {
        match (self, self.overridden(), self.built_by()) {
            (_, Some(path), _) => path,
            (_, None, None) => self.program().into(),
            (_, None, Some((script, release))) => panic!(
                "{var} is not set, so this {release} test has no {program} to start: \
                 run `export {var}=$({script})`, which builds {release} once (a few \
                 minutes, cached under ~/.cache/leasehold) and prints its path; \
                 scripts/test and `cargo xtask test` set it themselves",
                var = self.env_var(),
                program = self.program(),
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
                self.built_by()
                    .map(|(script, release)| format!(
                        "; `{script}` prints the path of a {} {release}",
                        self.program()
                    ))
                    .unwrap_or_default()
            ),
            _ => format!("cannot execute {bin:?}: {error}"),
        }
    }

    /// The script that builds this engine and the release it builds, for
    /// the engines no package provides.
    fn built_by(self) -> Option<(&'static str, &'static str)> {
        match self {
            Engine::Redis => None,
            Engine::Valkey => Some(("scripts/ensure-valkey", "Valkey 9.1")),
            Engine::Redis8 => Some(("scripts/ensure-redis8", "Redis 8.6")),
        }
    }

    /// The variable naming this engine's binary.
    fn env_var(self) -> &'static str {
        match self {
            Engine::Redis => REDIS_BIN_ENV,
            Engine::Valkey => VALKEY_BIN_ENV,
            Engine::Redis8 => REDIS8_BIN_ENV,
        }
    }

    /// The binary named by [`env_var`](Self::env_var), if set and not empty.
    fn overridden(self) -> Option<OsString> {
        std::env::var_os(self.env_var()).filter(|path| !path.is_empty())
    }
}
