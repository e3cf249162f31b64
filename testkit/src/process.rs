//! Spawning one `redis-server` (or `valkey-server`) process and waiting
//! until it answers.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::resp::{self, RespValue, Timeouts};

/// The only interface servers listen on and clients connect to.
pub(crate) const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Upper bound on waiting for a server to answer, or for its port to free up.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two polls of a condition.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Timeouts of the readiness probe: the server is local, so it answers fast or not yet.
const PROBE_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_millis(200),
    io: Duration::from_secs(1),
};
/// Log lines quoted in a startup failure message.
const LOG_TAIL_LINES: usize = 20;

/// Why an attempt to bring a server up failed.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The process exited during startup, most likely because another process
    /// took the port first; trying again can help.
    Exited(String),
    /// Anything else; trying again would not help.
    Fatal(String),
}

/// Spawns `engine`'s server on `port` with its data in `data_dir`, its output
/// in `log` and, if given, `config_file` as its config file, then waits until
/// it answers `PING` as itself. On failure the process is killed and reaped.
pub(crate) fn spawn_ready(
    engine: Engine,
    port: u16,
    data_dir: &Path,
    log: &Path,
    config_file: Option<&Path>,
    extra_args: &[String],
) -> Result<Child, StartError> {
    let mut child = spawn(engine, port, data_dir, log, config_file, extra_args)?;
    match wait_ready(engine, &mut child, port, log) {
        Ok(()) => Ok(child),
        Err(error) => {
            stop(&mut child);
            Err(error)
        }
    }
}

/// Kills the process with SIGKILL and reaps it so no zombie remains.
pub(crate) fn stop(child: &mut Child) {
    // Both fail only if the process is already gone and reaped: nothing left to do.
    let _ = child.kill();
    let _ = child.wait();
}

/// The socket address of a server listening on `port`.
pub(crate) fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((LOOPBACK, port))
}

/// Waits, at most [`START_TIMEOUT`], until `port` can be bound on loopback.
pub(crate) fn wait_until_bindable(port: u16) -> Result<(), StartError> {
    match poll(START_TIMEOUT, || TcpListener::bind(addr(port)).ok()) {
        Some(_listener) => Ok(()),
        None => Err(StartError::Fatal(format!(
            "port {port} still in use after {START_TIMEOUT:?}"
        ))),
    }
}

/// Calls `probe` every [`POLL_INTERVAL`] until it returns `Some`, for at most
/// `timeout` and at most `timeout / POLL_INTERVAL + 1` calls.
pub(crate) fn poll<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let max_calls = timeout.as_millis() / POLL_INTERVAL.as_millis() + 1;
    for _ in 0..max_calls {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            break;
        }
        thread::sleep(POLL_INTERVAL);
    }
    None
}

/// Starts the process; panics if the binary cannot be executed at all.
fn spawn(
    engine: Engine,
    port: u16,
    data_dir: &Path,
    log: &Path,
    config_file: Option<&Path>,
    extra_args: &[String],
) -> Result<Child, StartError> {
    let output = File::create(log).and_then(|file| Ok((file.try_clone()?, file)));
    let (stdout, stderr) =
        output.map_err(|e| StartError::Fatal(format!("cannot create {}: {e}", log.display())))?;
    let bin = engine.binary();
    let child = Command::new(&bin)
        // Both servers take their config file only as the first argument.
        .args(config_file)
        .args(["--port", &port.to_string(), "--bind", &LOOPBACK.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        // Tests need DEBUG SLEEP; "local" admits loopback clients, i.e. all of them.
        .args(["--enable-debug-command", "local"])
        // Replicas sync at once instead of after the default 5 s batching delay.
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(data_dir)
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("{}", engine.spawn_failure(&bin, &e)));
    Ok(child)
}

/// Polls until the server answers, exits, or [`START_TIMEOUT`] passes.
fn wait_ready(engine: Engine, child: &mut Child, port: u16, log: &Path) -> Result<(), StartError> {
    let program = engine.program();
    let outcome = poll(START_TIMEOUT, || match child.try_wait() {
        Ok(Some(status)) => Some(Err(StartError::Exited(format!(
            "{program} on port {port} exited during startup ({status}); log:\n{}",
            log_tail(log)
        )))),
        Ok(None) => answers_as(port, child.id()).then_some(Ok(())),
        Err(e) => Some(Err(StartError::Fatal(format!(
            "cannot poll {program}: {e}"
        )))),
    });
    outcome.unwrap_or_else(|| {
        Err(StartError::Fatal(format!(
            "{program} on port {port} did not answer PING within {START_TIMEOUT:?}; log:\n{}",
            log_tail(log)
        )))
    })
}

/// Whether the server on `port` answers `PING` with `PONG` and is process `pid`
/// (and not some other server that won a race for the port).
fn answers_as(port: u16, pid: u32) -> bool {
    let pong = resp::request(addr(port), &["PING"], PROBE_TIMEOUTS);
    pong.is_ok_and(|reply| reply.as_str() == Some("PONG")) && server_pid(port) == Some(pid)
}

/// The `process_id` reported by `INFO server`.
fn server_pid(port: u16) -> Option<u32> {
    let info = resp::request(addr(port), &["INFO", "server"], PROBE_TIMEOUTS).ok()?;
    let RespValue::Bulk(text) = info else {
        return None;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// The last [`LOG_TAIL_LINES`] lines of the server log, for failure messages.
pub(crate) fn log_tail(log: &Path) -> String {
    match fs::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", log.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_stops_at_first_success() {
        let mut calls = 0;
        let found = poll(Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(found, Some(3));
    }

    #[test]
    fn poll_gives_up_after_timeout() {
        let started = Instant::now();
        let mut calls = 0;
        assert_eq!(
            poll(Duration::from_millis(50), || -> Option<()> {
                calls += 1;
                None
            }),
            None
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(calls <= 6);
    }
}
