//! The `parked` workload (issue 28 item 4): what waiters cost Redis and
//! their clients while they wait. The bench process takes one key (ttl 30 s,
//! renewed by the watchdog) and keeps it; 4 worker processes
//! (`--parked-worker URL WAITERS`) each start 250 waiters on it (`acquire`,
//! wait 60 s), which park behind the holder. After 3 s of settling it
//! measures for 10 s: the server's CPU (`INFO cpu`) as a share of one core,
//! its commands per second (`INFO commandstats`, a script's inner commands
//! included) and script calls per second (EVALSHA, EVAL, FCALL: each one
//! sent by a client), the workers' CPU, and how many waiters got the lock or
//! failed meanwhile (none may); then, for 3 s more under MONITOR, the
//! commands clients sent per second. Redis's CPU is also measured for
//! 10 s before the workers start, with the holder alone (its own cron, the
//! holder's renewals), to tell what the waiters add. Then the holder releases and every
//! waiter must get the lock in turn (each releases it at once): it reports
//! how many did, and how long the hand-offs took from the holder's release
//! to the last grant. Under `cargo test`: 4 × 2 waiters, 0.3 s alone,
//! 0.5 s settling, 1 s measured, 0.5 s monitored.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use leasehold::{LockError, LockManager, LockOptions};

use crate::cpu::process_cpu;
use crate::cross_process::{one_line_each, say, Workers};
use crate::monitor;
use crate::redis_stats::Admin;
use crate::workloads::Scale;

/// First argument that makes the bench binary a parked-waiters worker.
pub const WORKER_ARG: &str = "--parked-worker";
/// Worker processes.
const PROCESSES: usize = 4;
/// Waiters in each worker process at full size.
const WAITERS_PER_PROCESS: usize = 250;
/// The one key held and waited for.
const KEY: &str = "bench:parked";
/// Lease of the holder: renewed by the watchdog, so it stays held.
const HOLDER_TTL: Duration = Duration::from_secs(30);
/// Lease each waiter asks for.
const WAITER_TTL: Duration = Duration::from_secs(10);
/// How long each waiter waits: longer than the whole workload.
const WAIT: Duration = Duration::from_secs(60);
/// Longest a worker may take to start or to answer a report.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// Durations of one run's phases.
struct Phases {
    waiters_per_process: usize,
    /// From the workers' start to the measurement: the waiters' first
    /// attempts are over and each keeps its place as it does while parked.
    settle: Duration,
    /// The measured window.
    window: Duration,
    /// The window under MONITOR, after the measured one.
    monitored: Duration,
    /// The window before the workers start, with the holder alone: Redis's
    /// own background work and the holder's renewals.
    idle: Duration,
}

impl Phases {
    fn at(scale: Scale) -> Phases {
        if scale.is_full() {
            Phases {
                waiters_per_process: WAITERS_PER_PROCESS,
                settle: Duration::from_secs(3),
                window: Duration::from_secs(10),
                monitored: Duration::from_secs(3),
                idle: Duration::from_secs(10),
            }
        } else {
            Phases {
                waiters_per_process: 2,
                settle: Duration::from_millis(500),
                window: Duration::from_secs(1),
                monitored: Duration::from_millis(500),
                idle: Duration::from_millis(300),
            }
        }
    }
}

/// What the workers have seen so far: the line a worker prints, e.g.
/// `granted=0 failed=0 cpu_ns=… last_grant_unix_ns=0`, and the sum of
/// several.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    granted: usize,
    failed: usize,
    cpu: Duration,
    /// When the last waiter got the lock (zero: none yet).
    last_grant_unix_ns: u64,
}

impl Tally {
    fn line(&self) -> String {
        format!(
            "granted={} failed={} cpu_ns={} last_grant_unix_ns={}",
            self.granted,
            self.failed,
            self.cpu.as_nanos(),
            self.last_grant_unix_ns
        )
    }

    /// The inverse of [`Self::line`]; `None` for anything else.
    fn parse(line: &str) -> Option<Tally> {
        let mut tally = Tally::default();
        let mut fields = 0;
        for field in line.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match name {
                "granted" => tally.granted = usize::try_from(value).ok()?,
                "failed" => tally.failed = usize::try_from(value).ok()?,
                "cpu_ns" => tally.cpu = Duration::from_nanos(value),
                "last_grant_unix_ns" => tally.last_grant_unix_ns = value,
                _ => return None,
            }
            fields += 1;
        }
        (fields == 4).then_some(tally)
    }

    fn sum(tallies: &[Tally]) -> Tally {
        tallies.iter().fold(Tally::default(), |sum, tally| Tally {
            granted: sum.granted + tally.granted,
            failed: sum.failed + tally.failed,
            cpu: sum.cpu + tally.cpu,
            last_grant_unix_ns: sum.last_grant_unix_ns.max(tally.last_grant_unix_ns),
        })
    }
}

/// Runs the workload on the server at `url` and prints its table.
pub async fn run(url: &str, scale: Scale) {
    let phases = Phases::at(scale);
    let waiters = PROCESSES * phases.waiters_per_process;
    let mut admin = Admin::connect(&[url.to_owned()]).await;
    let manager = LockManager::connect(url).await.expect("connect");
    let holder = manager
        .acquire(KEY, LockOptions::new().ttl(HOLDER_TTL).wait(Duration::ZERO))
        .await
        .expect("the holder takes the key");
    let idle_started = Instant::now();
    let idle_before = admin.cpu().await;
    tokio::time::sleep(phases.idle).await;
    let idle_cpu = admin.cpu().await.saturating_sub(idle_before);
    let idle_share = 100.0 * idle_cpu.as_secs_f64() / idle_started.elapsed().as_secs_f64();
    let args = [
        WORKER_ARG.to_owned(),
        url.to_owned(),
        phases.waiters_per_process.to_string(),
    ];
    let (mut workers, lines) = tokio::task::block_in_place(|| {
        let (workers, lines) = Workers::start(PROCESSES, &args);
        let deadline = Instant::now() + ANSWER_LIMIT;
        one_line_each(&lines, PROCESSES, deadline, "started", |line| {
            (line == "started").then_some(())
        });
        (workers, lines)
    });
    tokio::time::sleep(phases.settle).await;
    admin.reset().await;
    let server_before = admin.cpu().await;
    let before = report(&mut workers, &lines);
    let started = Instant::now();
    tokio::time::sleep(phases.window).await;
    let server_after = admin.cpu().await;
    let after = report(&mut workers, &lines);
    let window = started.elapsed();
    let commands = admin.commands().await;
    let sent = monitor::count_for(&mut admin, phases.monitored).await;
    let while_parked = Tally::sum(&report(&mut workers, &lines));
    assert!(
        !holder.is_lost(),
        "the holder lost the key while it held it"
    );
    let released_at = SystemTime::now();
    holder.release().await.expect("the holder releases the key");
    let end = tokio::task::block_in_place(|| {
        workers.tell("finish");
        let deadline = Instant::now() + WAIT + ANSWER_LIMIT;
        let tallies = one_line_each(&lines, PROCESSES, deadline, "its tally", Tally::parse);
        workers.finish(deadline);
        Tally::sum(&tallies)
    });

    let per_second = |count: u64| count as f64 / window.as_secs_f64();
    let share_of_core = |cpu: Duration| 100.0 * cpu.as_secs_f64() / window.as_secs_f64();
    let script_calls: u64 = ["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall"]
        .iter()
        .filter_map(|name| commands.get(*name))
        .map(|stat| stat.calls)
        .sum();
    let total_commands: u64 = commands.values().map(|stat| stat.calls).sum();
    let sent_total: u64 = sent.sent.values().sum();
    println!(
        "\nparked: one key held (ttl {HOLDER_TTL:?}, renewed) with {waiters} waiters parked on it \
         ({PROCESSES} worker processes × {}, wait {WAIT:?}); measured over {window:.1?} after \
         {:?} of settling, commands sent counted over {:?} more under MONITOR; Redis CPU \
         (no waiters): over {:?} with the holder alone, before the workers started",
        phases.waiters_per_process, phases.settle, phases.monitored, phases.idle,
    );
    println!(
        "{:>8} {:>9} {:>7} {:>10} {:>12} {:>11} {:>15} {:>12} {:>11}",
        "waiters",
        "got lock",
        "failed",
        "Redis CPU",
        "(no waiters)",
        "commands/s",
        "script calls/s",
        "sent/s",
        "worker CPU",
    );
    println!(
        "{:>8} {:>9} {:>7} {:>9.2}% {:>11.2}% {:>11.1} {:>15.1} {:>12.1} {:>10.2}%",
        waiters,
        while_parked.granted,
        while_parked.failed,
        share_of_core(server_after.saturating_sub(server_before)),
        idle_share,
        per_second(total_commands),
        per_second(script_calls),
        sent_total as f64 / phases.monitored.as_secs_f64(),
        share_of_core(
            Tally::sum(&after)
                .cpu
                .saturating_sub(Tally::sum(&before).cpu)
        ),
    );
    let mut by_command: Vec<_> = commands.iter().collect();
    by_command.sort_by_key(|(_, stat)| std::cmp::Reverse(stat.calls));
    let listed: Vec<String> = by_command
        .iter()
        .map(|(name, stat)| format!("{name} {:.1}", per_second(stat.calls)))
        .collect();
    println!("commands/s by command: {}", listed.join(", "));
    let sent_listed: Vec<String> = sent
        .sent
        .iter()
        .map(|(name, calls)| {
            format!(
                "{name} {:.1}",
                *calls as f64 / phases.monitored.as_secs_f64()
            )
        })
        .collect();
    println!("sent/s by command: {}", sent_listed.join(", "));
    let handoffs = Duration::from_nanos(end.last_grant_unix_ns).saturating_sub(
        released_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    println!(
        "released: {} of {waiters} waiters got the lock in turn, {} failed, the last {:.2?} after \
         the holder's release",
        end.granted, end.failed, handoffs,
    );
}

/// Asks every worker for its tally.
fn report(workers: &mut Workers, lines: &Receiver<(usize, String)>) -> Vec<Tally> {
    tokio::task::block_in_place(|| {
        workers.tell("report");
        let deadline = Instant::now() + ANSWER_LIMIT;
        one_line_each(lines, PROCESSES, deadline, "its tally", Tally::parse)
    })
}

/// Counts of one worker's waiters, shared by them.
#[derive(Default)]
struct Counts {
    granted: AtomicUsize,
    failed: AtomicUsize,
    last_grant_unix_ns: AtomicU64,
}

impl Counts {
    fn granted(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let now = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        self.last_grant_unix_ns.fetch_max(now, Ordering::Relaxed);
        self.granted.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self, err: &LockError) {
        if self.failed.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!(
                "parked worker {}: a waiter failed: {err}",
                std::process::id()
            );
        }
    }

    fn tally(&self) -> Tally {
        Tally {
            granted: self.granted.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            cpu: process_cpu().unwrap_or_default(),
            last_grant_unix_ns: self.last_grant_unix_ns.load(Ordering::Relaxed),
        }
    }
}

/// The worker process: `args` are those after [`WORKER_ARG`], `URL
/// WAITERS`. Starts the waiters, prints `started`, then answers each
/// `report` line on stdin with its tally; on `finish` waits for every
/// waiter to be done, prints the tally and exits. Exits with status 2 on
/// bad arguments.
pub fn worker_main(args: &[String]) {
    let (url, waiters) = match args {
        [url, waiters] => match waiters.parse::<usize>() {
            Ok(waiters) => (url.as_str(), waiters),
            Err(err) => {
                eprintln!("lock_throughput {WORKER_ARG}: WAITERS `{waiters}`: {err}");
                std::process::exit(2);
            }
        },
        _ => {
            eprintln!("lock_throughput {WORKER_ARG}: expected URL WAITERS, got {args:?}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let counts = Arc::new(Counts::default());
    let tasks: Vec<_> = runtime.block_on(async {
        let manager = LockManager::connect(url).await.expect("worker: connect");
        (0..waiters)
            .map(|_| tokio::spawn(wait_turn(manager.clone(), Arc::clone(&counts))))
            .collect()
    });
    say("started");
    for line in std::io::stdin().lines() {
        match line.expect("worker: cannot read stdin").trim() {
            "report" => say(&counts.tally().line()),
            "finish" => {
                let all_done = futures_util::future::join_all(tasks);
                // A waiter still waiting past its own wait is counted by
                // what it has not reported.
                let _ = runtime.block_on(async { tokio::time::timeout(WAIT, all_done).await });
                say(&counts.tally().line());
                return;
            }
            other => panic!("worker: expected `report` or `finish` on stdin, got `{other}`"),
        }
    }
}

/// One waiter: waits for the key, and releases it at once when it gets it.
async fn wait_turn(manager: LockManager, counts: Arc<Counts>) {
    let options = LockOptions::new().ttl(WAITER_TTL).wait(WAIT);
    match manager.acquire(KEY, options).await {
        Ok(guard) => {
            counts.granted();
            if let Err(err) = guard.release().await {
                counts.failed(&err);
            }
        }
        Err(err) => counts.failed(&err),
    }
}
