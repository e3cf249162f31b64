//! [`RedisServer`]: one real `redis-server` (or `valkey-server`) process
//! owned by a test.

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::engine::Engine;
use crate::ports::PortReservation;
use crate::process::{self, StartError};
use crate::resp::{self, RespValue, Timeouts};
use crate::tempdir::TempDir;

/// Timeouts of [`RedisServer::command`].
const COMMAND_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    io: Duration::from_secs(5),
};
/// Start attempts at most when the process keeps exiting during startup.
const MAX_START_ATTEMPTS: usize = 5;

/// A `redis-server` process listening on `127.0.0.1`, without automatic
/// persistence, owned by the current test; or a `valkey-server`, started
/// with the same options, for a builder given [`Engine::Valkey`].
///
/// The process is killed with SIGKILL and reaped, and its scratch directory
/// deleted, when the value is dropped, including during unwinding after a
/// failed assertion. Its port stays reserved within this process for the
/// value's whole life, so [`RedisServer::restart_empty`] and
/// [`RedisServer::restart_from_disk`] can take it back.
///
/// Snapshots are written only when asked for: `command(&["SAVE"])` (or
/// `BGSAVE`) writes `dump.rdb` into the server's data directory, which
/// [`restart_from_disk`](RedisServer::restart_from_disk) loads again. For
/// automatic persistence pass redis-server's own options, e.g.
/// `.arg("--appendonly").arg("yes")` or `.arg("--save").arg("1 1")`.
#[must_use = "the server is killed as soon as it is dropped"]
#[derive(Debug)]
pub struct RedisServer {
    engine: Engine,
    child: Mutex<Option<Child>>,
    config_file: Option<PathBuf>,
    args: Vec<String>,
    /// Processes started so far; numbers their logs and fresh data directories.
    runs: u32,
    /// Data directory of the current process (`--dir`): its snapshot and AOF.
    data_dir: PathBuf,
    dir: TempDir,
    port: PortReservation,
}

/// Options for starting a [`RedisServer`]; obtained from [`RedisServer::builder`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct RedisServerBuilder {
    engine: Engine,
    port: Option<u16>,
    config_file: Option<PathBuf>,
    args: Vec<String>,
}

impl RedisServerBuilder {
    /// Runs `engine`'s server instead of `redis-server`, with the same
    /// options, port handling and clean-up. [`Engine::Valkey`] needs
    /// `LEASEHOLD_VALKEY_SERVER`, [`Engine::Redis8`] `LEASEHOLD_REDIS8_SERVER`;
    /// without it `start` panics with what to run.
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// Listens on `port` instead of a free one picked automatically; `0`
    /// restores the automatic pick. `start` waits up to 10 s for the port to
    /// become free, then panics.
    pub fn port(mut self, port: u16) -> Self {
        self.port = (port != 0).then_some(port);
        self
    }

    /// Passes `path` to redis-server as its config file. The harness's
    /// defaults and [`arg`](Self::arg)s come after it on the command line, so
    /// they override its directives. Needed for Sentinel (`.arg("--sentinel")`),
    /// which refuses to run without a config file and rewrites it: the file
    /// must stay writable, in a directory that outlives the server.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// Appends one command-line argument, e.g. `.arg("--maxmemory").arg("1mb")`.
    /// Extra arguments come after the harness's defaults, so they override them.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts the server and returns once it answers `PING` with `PONG`.
    ///
    /// Panics with the cause and the server log's tail if it cannot start
    /// within 10 s per attempt (a lost race for an automatically picked port
    /// is retried on another port, up to 5 attempts), and with installation
    /// instructions if `redis-server` is not installed.
    #[track_caller]
    pub fn start(self) -> RedisServer {
        let started = match self.port {
            None => with_retries(|| RedisServer::launch_new(PortReservation::free()?, &self)),
            Some(port) => with_retries(|| {
                let reservation = PortReservation::exact(port)?;
                process::wait_until_bindable(port)?;
                RedisServer::launch_new(reservation, &self)
            }),
        };
        started.unwrap_or_else(|e| panic!("cannot start {}: {e}", self.engine.program()))
    }
}

impl RedisServer {
    /// Starts a server with default options on a free loopback port; see
    /// [`RedisServerBuilder::start`] for the guarantees and panics.
    #[track_caller]
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    /// Options for starting a server: extra arguments, a specific port.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Starts `n` independent servers on distinct ports: standalone masters
    /// that neither replicate nor form a Redis Cluster (e.g. Redlock nodes).
    /// Panics like [`RedisServer::start`].
    #[track_caller]
    pub fn start_independent(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// The server program this value runs.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// `redis://127.0.0.1:PORT`; unchanged by [`kill`](Self::kill),
    /// [`restart_empty`](Self::restart_empty) and
    /// [`restart_from_disk`](Self::restart_from_disk).
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The TCP port, fixed for the value's whole life.
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        process::addr(self.port())
    }

    /// Whether the process is still alive: false after [`kill`](Self::kill),
    /// and also after it exited by itself (e.g. `SHUTDOWN`), in which case it
    /// is reaped here.
    pub fn is_running(&self) -> bool {
        let mut slot = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        let running = matches!(slot.as_mut().map(Child::try_wait), Some(Ok(None)));
        if let Some(mut exited) = slot.take_if(|_| !running) {
            process::stop(&mut exited);
        }
        running
    }

    /// Kills the process with SIGKILL and reaps it; it has stopped listening
    /// when this returns. Data is lost. Does nothing if already stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child_slot().take() {
            process::stop(&mut child);
        }
    }

    /// Kills the process if it is running, then starts a fresh, empty one on
    /// the same port, as if the server restarted without persistence. Returns
    /// once it answers `PING`; panics if the port stays busy or the server
    /// does not come up within 10 s (up to 5 attempts).
    #[track_caller]
    pub fn restart_empty(&mut self) {
        self.restart(Data::Fresh);
    }

    /// Kills the process with SIGKILL if it is running, then starts a new one
    /// on the same port and in the same data directory, as after a crash: it
    /// loads what was on disk, i.e. the last snapshot (`SAVE`, `BGSAVE`, or a
    /// `--save` schedule) or, with `--appendonly yes`, the AOF. Writes after
    /// the last completed snapshot are lost; without one it starts empty.
    /// Returns once it answers `PING` (Redis refuses it with `LOADING` until the
    /// data is loaded); panics like
    /// [`restart_empty`](Self::restart_empty).
    ///
    /// ```
    /// use leasehold_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start();
    /// server.command(&["SET", "k", "saved"]).unwrap();
    /// server.command(&["SAVE"]).unwrap();
    /// server.command(&["SET", "k", "lost in the crash"]).unwrap();
    /// server.restart_from_disk();
    /// assert_eq!(server.command(&["GET", "k"]).unwrap().as_str(), Some("saved"));
    /// ```
    #[track_caller]
    pub fn restart_from_disk(&mut self) {
        self.restart(Data::Kept);
    }

    /// Sends one command on a fresh connection and returns the parsed reply.
    ///
    /// `Err` if the server is unreachable, a read or write takes over 5 s
    /// (mind `DEBUG SLEEP`), the reply is malformed, or Redis answers with an
    /// error reply (errors nested in arrays stay [`RespValue::Error`]). Each
    /// call uses its own connection, so connection state such as `MULTI` or
    /// `SELECT` does not carry over.
    pub fn command(&self, args: &[&str]) -> Result<RespValue, String> {
        resp::request(self.addr(), args, COMMAND_TIMEOUTS)
    }

    /// Calls per command from `INFO commandstats`, keyed by lowercase name as
    /// Redis reports it (`"evalsha"`, `"client|setname"`). Commands never
    /// called are absent. Panics if the server cannot be queried.
    #[track_caller]
    pub fn info_commandstats(&self) -> HashMap<String, u64> {
        let reply = self.expect(&["INFO", "commandstats"]);
        let text = reply
            .as_str()
            .unwrap_or_else(|| panic!("INFO replied {reply:?}"));
        parse_commandstats(text)
    }

    /// Makes this server a replica of `primary` (`REPLICAOF 127.0.0.1 PORT`).
    /// Replication is asynchronous: this returns before data has been copied.
    /// Panics if the command fails.
    #[track_caller]
    pub fn replica_of(&self, primary: &RedisServer) {
        self.expect(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    }

    /// Makes this server a primary again (`REPLICAOF NO ONE`), keeping its data.
    /// Panics if the command fails.
    #[track_caller]
    pub fn promote(&self) {
        self.expect(&["REPLICAOF", "NO", "ONE"]);
    }

    /// The last lines of the current process's log, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        process::log_tail(&self.log_path())
    }

    /// Creates the value and brings up its first process.
    fn launch_new(port: PortReservation, options: &RedisServerBuilder) -> Result<Self, StartError> {
        let dir = TempDir::new(&format!("testkit-{}", port.port()))
            .map_err(|e| StartError::Fatal(format!("cannot create a temp dir: {e}")))?;
        let mut server = RedisServer {
            engine: options.engine,
            child: Mutex::new(None),
            config_file: options.config_file.clone(),
            args: options.args.clone(),
            runs: 0,
            data_dir: dir.path().to_path_buf(),
            dir,
            port,
        };
        server.launch(Data::Fresh)?;
        Ok(server)
    }

    /// Kills the process, then starts another on the same port.
    #[track_caller]
    fn restart(&mut self, data: Data) {
        self.kill();
        let (program, port) = (self.engine.program(), self.port());
        with_retries(|| {
            process::wait_until_bindable(port)?;
            self.launch(data)
        })
        .unwrap_or_else(|e| panic!("cannot restart {program} on port {port}: {e}"));
    }

    /// Starts a process with its own log, in a fresh or the current data
    /// directory, and records it.
    fn launch(&mut self, data: Data) -> Result<(), StartError> {
        self.runs += 1;
        let log = self.log_path();
        if data == Data::Fresh {
            let data_dir = self.dir.path().join(format!("run-{}", self.runs));
            fs::create_dir(&data_dir).map_err(|e| {
                StartError::Fatal(format!("cannot create {}: {e}", data_dir.display()))
            })?;
            self.data_dir = data_dir;
        }
        let config_file = self.config_file.as_deref();
        let child = process::spawn_ready(
            self.engine,
            self.port(),
            &self.data_dir,
            &log,
            config_file,
            &self.args,
        )?;
        *self.child_slot() = Some(child);
        Ok(())
    }

    /// The log of the current (or last) process.
    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("run-{}.log", self.runs))
    }

    /// The process slot, reached without locking through `&mut self`.
    fn child_slot(&mut self) -> &mut Option<Child> {
        self.child.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`command`](Self::command), panicking on failure.
    #[track_caller]
    fn expect(&self, args: &[&str]) -> RespValue {
        self.command(args)
            .unwrap_or_else(|e| panic!("{} on port {}: {e}", self.engine.program(), self.port()))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where a new process keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    /// A new, empty data directory: the server starts without data.
    Fresh,
    /// The previous process's directory: the server loads what it saved.
    Kept,
}

/// Runs `attempt` until it succeeds, fails for good, or has run
/// [`MAX_START_ATTEMPTS`] times with the process exiting during startup.
fn with_retries<T>(mut attempt: impl FnMut() -> Result<T, StartError>) -> Result<T, String> {
    let mut last = String::new();
    for _ in 0..MAX_START_ATTEMPTS {
        match attempt() {
            Ok(value) => return Ok(value),
            Err(StartError::Exited(message)) => last = message,
            Err(StartError::Fatal(message)) => return Err(message),
        }
    }
    Err(format!(
        "gave up after {MAX_START_ATTEMPTS} attempts; last: {last}"
    ))
}

/// Parses `cmdstat_<name>:calls=<n>,...` lines of `INFO commandstats`.
fn parse_commandstats(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats_lines() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setname:calls=1,usec=1\r\n\
            cmdstat_broken:usec=1\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.len(), 2);
        assert_eq!(stats["evalsha"], 12);
        assert_eq!(stats["client|setname"], 1);
    }

    #[test]
    fn retries_only_early_exits() {
        let mut calls = 0;
        let result: Result<(), String> = with_retries(|| {
            calls += 1;
            Err(StartError::Exited(format!("exit {calls}")))
        });
        assert_eq!(calls, MAX_START_ATTEMPTS);
        assert!(result.unwrap_err().ends_with("exit 5"));

        let mut calls = 0;
        let result: Result<(), String> = with_retries(|| {
            calls += 1;
            Err(StartError::Fatal("fatal".into()))
        });
        assert_eq!((calls, result), (1, Err("fatal".into())));
    }
}
