//! Commands sent, counted exactly: one more run of a workload with `MONITOR`
//! on the subject's servers, whose log tells the commands a client sent
//! (`[0 127.0.0.1:port]`) from those its scripts ran (`[0 lua]`). The
//! server's own counters cannot: `INFO commandstats` counts a SET the same
//! whether a client or a script sent it. MONITOR costs Redis time, so this
//! run is never one of the timed ones.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::Monitor;
use tokio::task::JoinHandle;

use crate::catalog::Workload;
use crate::redis_stats::Admin;
use crate::subjects::Side;
use crate::workloads::Scale;

/// How much smaller than the timed runs the counted run is.
const SHRINK: usize = 10;
/// Longest wait for a server's MONITOR log to reach the end marker.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Commands that set up a connection or belong to the bench, not to a
/// cycle: a worker process's connection set-up and script loading, and the
/// bench's counters.
const NOT_PER_CYCLE: &[&str] = &[
    "client", "hello", "select", "auth", "script", "config", "info", "command", "echo",
];

/// Commands of one counted run, by lower-case name.
#[derive(Debug, Default, Clone)]
pub struct Accounting {
    /// Sent by clients: each one a round trip, unless a client pipelines.
    pub sent: BTreeMap<String, u64>,
    /// Run by scripts.
    pub in_scripts: BTreeMap<String, u64>,
    /// Cycles the run completed.
    pub cycles: usize,
}

impl Accounting {
    /// Commands clients sent per cycle, connection set-up left out.
    pub fn sent_per_cycle(&self) -> f64 {
        self.sent.values().sum::<u64>() as f64 / self.cycles.max(1) as f64
    }

    /// The share of `name`'s calls that clients sent (the rest ran inside
    /// scripts); 0 for a command the counted run did not see.
    pub fn sent_share(&self, name: &str) -> f64 {
        let sent = self.sent.get(name).copied().unwrap_or(0);
        let in_scripts = self.in_scripts.get(name).copied().unwrap_or(0);
        if sent == 0 {
            0.0
        } else {
            sent as f64 / (sent + in_scripts) as f64
        }
    }
}

/// Runs `workload` once through `side` at a tenth of `scale`'s size with
/// every server of `side` monitored, and counts the commands.
pub async fn account(workload: &Workload, side: &Side, scale: Scale) -> Accounting {
    let mut servers = side.servers.clone();
    let monitoring = Monitoring::start(&servers).await;
    let timings = (workload.run)(side.clone(), Scale(scale.0 * SHRINK)).await;
    Accounting {
        cycles: timings.cycles,
        ..monitoring.stop(&mut servers).await
    }
}

/// The commands every server of `servers` runs during `window`, counted
/// under MONITOR (`cycles` is 0).
pub async fn count_for(servers: &mut Admin, window: Duration) -> Accounting {
    let monitoring = Monitoring::start(servers).await;
    tokio::time::sleep(window).await;
    monitoring.stop(servers).await
}

/// One MONITOR connection per server, each counting its log.
struct Monitoring {
    marker: String,
    monitors: Vec<JoinHandle<Accounting>>,
}

impl Monitoring {
    /// Turns MONITOR on for every server of `servers`: on once this returns.
    async fn start(servers: &Admin) -> Monitoring {
        let marker = format!("bench-monitor-end-{}", std::process::id());
        let mut monitors = Vec::new();
        for url in servers.urls() {
            // MONITOR is on once this returns: the server has answered it.
            let monitor = redis::Client::open(url.as_str())
                .expect("invalid Redis URL")
                .get_async_monitor()
                .await
                .expect("MONITOR: cannot connect");
            monitors.push(tokio::spawn(count_until(monitor, marker.clone())));
        }
        Monitoring { marker, monitors }
    }

    /// Marks the end in every server's log and sums what was counted
    /// until then.
    async fn stop(self, servers: &mut Admin) -> Accounting {
        servers.echo(&self.marker).await;
        let mut total = Accounting::default();
        for monitor in self.monitors {
            let counted = tokio::time::timeout(DRAIN_TIMEOUT, monitor)
                .await
                .expect("MONITOR log did not reach the end marker")
                .expect("MONITOR task panicked");
            for (name, calls) in counted.sent {
                *total.sent.entry(name).or_default() += calls;
            }
            for (name, calls) in counted.in_scripts {
                *total.in_scripts.entry(name).or_default() += calls;
            }
        }
        total
    }
}

/// Counts the lines of `monitor` until the `ECHO marker` one.
async fn count_until(monitor: Monitor, marker: String) -> Accounting {
    let mut lines = Box::pin(monitor.into_on_message::<String>());
    let mut counted = Accounting::default();
    while let Some(line) = lines.next().await {
        let Some((source, name)) = parse(&line) else {
            continue;
        };
        if name == "echo" && line.contains(&marker) {
            return counted;
        }
        if NOT_PER_CYCLE.contains(&name.as_str()) {
            continue;
        }
        let counts = if source == Source::Script {
            &mut counted.in_scripts
        } else {
            &mut counted.sent
        };
        *counts.entry(name).or_default() += 1;
    }
    panic!("a MONITOR connection closed before the end marker")
}

/// Who sent a command in a MONITOR line.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    Client,
    Script,
}

/// `1700000000.123456 [0 127.0.0.1:5555] "SET" "k" ...` → (client, "set");
/// `... [0 lua] "del" ...` → (script, "del").
fn parse(line: &str) -> Option<(Source, String)> {
    let (_, rest) = line.split_once('[')?;
    let (origin, rest) = rest.split_once(']')?;
    let source = if origin.split_whitespace().nth(1) == Some("lua") {
        Source::Script
    } else {
        Source::Client
    };
    let name = rest.trim_start().strip_prefix('"')?.split('"').next()?;
    Some((source, name.to_ascii_lowercase()))
}
