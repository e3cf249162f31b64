//! Where the bench and its redis-servers run, and how much CPU this process
//! uses. As in production, Redis gets a CPU of its own and the clients run on
//! another: the bench pins itself, and each redis-server it starts, with
//! `taskset` (threads and child processes started later inherit the pinning).

use std::process::{Command, Stdio};
use std::time::Duration;

/// Environment variable with the CPUs of the redis-servers the bench starts.
const REDIS_CPUS_VAR: &str = "LOCK_BENCH_REDIS_CPUS";
/// Environment variable with the CPUs of the bench and its worker processes.
const CLIENT_CPUS_VAR: &str = "LOCK_BENCH_CLIENT_CPUS";

/// Which CPUs one side may run on.
#[derive(Debug, Clone)]
enum Pin {
    /// A `taskset` CPU list, e.g. `0`, `2-3` or `1,3`.
    Cpus(String),
    /// Left to the scheduler, and why.
    Unpinned(String),
}

/// The CPUs of the redis-servers and of the bench, read from
/// `LOCK_BENCH_REDIS_CPUS` and `LOCK_BENCH_CLIENT_CPUS` (`taskset` CPU lists;
/// `none` leaves a side unpinned). Defaults: Redis on CPU 0, the bench on
/// CPU 1, on a machine with at least 2 CPUs; unpinned otherwise.
#[derive(Debug)]
pub struct Placement {
    redis: Pin,
    client: Pin,
}

impl Placement {
    /// The placement the environment asks for on a machine with `cpus` CPUs.
    pub fn from_env(cpus: usize) -> Placement {
        let side = |var: &str, default: &str| match std::env::var(var) {
            Ok(list) if list.trim().eq_ignore_ascii_case("none") => {
                Pin::Unpinned(format!("{var}=none"))
            }
            Ok(list) => Pin::Cpus(list.trim().to_owned()),
            Err(_) if cpus >= 2 => Pin::Cpus(default.to_owned()),
            Err(_) => Pin::Unpinned(format!("{cpus} CPU")),
        };
        Placement {
            redis: side(REDIS_CPUS_VAR, "0"),
            client: side(CLIENT_CPUS_VAR, "1"),
        }
    }

    /// Pins every thread of this process to the client CPUs. Call it first:
    /// threads, worker processes and redis-servers started afterwards inherit
    /// it (the servers are moved to their own CPUs by [`Self::pin_server`]).
    /// A failure is reported on stderr and leaves the process unpinned.
    pub fn pin_self(&mut self) {
        pin(&mut self.client, std::process::id());
    }

    /// Pins every thread of the redis-server with process id `pid` to the
    /// Redis CPUs; a failure is reported on stderr and in [`Self::describe`].
    pub fn pin_server(&mut self, pid: u32) {
        pin(&mut self.redis, pid);
    }

    /// One line for the report: where each side runs, as Linux reports it
    /// (`Cpus_allowed_list`) for this process and for the server `redis_pid`.
    pub fn describe(&self, redis_pid: Option<u32>) -> String {
        let side = |pin: &Pin, pid: Option<u32>| match (pin, pid.and_then(allowed_cpus)) {
            (Pin::Cpus(_), Some(allowed)) => format!("on CPU {allowed}"),
            (Pin::Cpus(cpus), None) => format!("on CPU {cpus}"),
            (Pin::Unpinned(why), Some(allowed)) => format!("unpinned ({why}; may use {allowed})"),
            (Pin::Unpinned(why), None) => format!("unpinned ({why})"),
        };
        format!(
            "redis-server {}, bench and its worker processes {}",
            side(&self.redis, redis_pid),
            side(&self.client, Some(std::process::id())),
        )
    }
}

/// `taskset -a -p -c CPUS PID`; on failure `pin` becomes unpinned with the cause.
fn pin(pin: &mut Pin, pid: u32) {
    let Pin::Cpus(cpus) = pin else {
        return;
    };
    let outcome = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus.as_str(), &pid.to_string()])
        .stdout(Stdio::null())
        .output();
    let failure = match outcome {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(err) => format!("cannot run taskset: {err}"),
    };
    eprintln!("warning: not pinned to CPU {cpus}: {failure}");
    *pin = Pin::Unpinned(format!("taskset failed: {failure}"));
}

/// The CPUs process `pid` may run on (`Cpus_allowed_list` of
/// `/proc/PID/status`); `None` off Linux.
fn allowed_cpus(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_owned())
}

/// CPU time all live threads of this process have used, from Linux's
/// `/proc/self/task/*/schedstat` (nanoseconds on CPU); `None` elsewhere.
pub fn process_cpu() -> Option<Duration> {
    let mut nanos = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let schedstat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        nanos += schedstat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(nanos))
}

/// The CPU model Linux reports (first `model name` of `/proc/cpuinfo`).
pub fn model() -> Option<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}
