//! Lock throughput (issue 7): our public API against a hand-written baseline,
//! in one process, against one Redis server; then the same on Redlock, and
//! through the `#[distributed_lock]` attribute.
//!
//! ```text
//! cargo bench --bench lock_throughput            # starts its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379 cargo bench --bench lock_throughput
//! ```
//!
//! Every workload runs through the subjects of its table, one column each:
//! - **ours**: `LockManager::acquire` (ttl 10 s, wait 10 s) and `LockGuard::release`;
//! - **raw**: `SET key token NX PX 10000`, retried every 1 ms while busy, and an
//!   EVALSHA of a compare-and-delete script, on one `MultiplexedConnection`;
//! - **ours on Redlock**: as ours, on a Redlock manager over 3 more local
//!   redis-servers (always started through the testkit, also with `REDIS_URL`);
//!   its table compares it with raw on the one server;
//! - **macro**, **with_lock**, **acquire+release**: an empty body under
//!   `#[distributed_lock(key = "bench:u:{i}", ttl = "10s", client = self.locks)]`,
//!   the same through `LockManager::with_lock` (which the attribute calls), and
//!   through `acquire` and `release`, all with the attribute's options.
//!
//! The subjects take turns going first from round to round (with two: raw
//! first on even rounds, ours first on odd ones) so that noise on a shared
//! machine hits all; the fastest run of each, by cycles/s, is reported in
//! Markdown tables with the first column divided by each other one. Commands
//! are counted with `INFO commandstats` after a `CONFIG RESETSTAT` before each
//! run, on the servers the subject uses (summed over the Redlock nodes); CPU
//! time per cycle comes from `/proc/self/task/*/schedstat` (this process) and
//! `INFO cpu` (the servers). Nothing is asserted: this prints numbers. See
//! BENCHMARKS.md for what they mean.
//!
//! Under `cargo test` (no `--bench` argument) each workload runs once at 1/100
//! of its size, so the bench keeps compiling and working without slowing the suite.
//!
//! To add a workload: write one `async fn(Client, Scale) -> Run` (most are a
//! [`Plan`] handed to [`drive`]) and add one entry to a table of [`TABLES`]
//! naming the figures its rows show. Another client is one more [`Subject`]
//! and [`Client`] variant.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use distributed_lock::{distributed_lock, LockError, LockGuard, LockManager, LockOptions};
use distributed_lock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};

/// Lease of every lock taken here.
const TTL: Duration = Duration::from_secs(10);
/// Longest wait for a busy lock, for ours and raw.
const WAIT: Duration = Duration::from_secs(10);
/// Pause between two attempts of the raw client on a busy lock.
const RAW_POLL: Duration = Duration::from_millis(1);
/// Pause before each run at full size, so background work of the previous one
/// (a spawned unsubscribe) lands before the command counters are reset.
const SETTLE: Duration = Duration::from_millis(100);
/// Redlock servers of the R3-U1 table (its name and title say 3).
const REDLOCK_NODES: usize = 3;

/// Compare-and-delete: the raw client's release.
/// KEYS[1] lock key, ARGV[1] owner token; returns 1 when deleted, 0 when not ours.
const RAW_RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One Markdown table: workloads measured through the same subjects.
struct Table {
    /// Printed above the table.
    title: &'static str,
    /// One column each; the ratios are the first over each of the others.
    subjects: &'static [Subject],
    workloads: &'static [Workload],
}

/// One workload: how to measure one client, how often, and which figures its rows show.
struct Workload {
    name: &'static str,
    run: fn(Client, Scale) -> BoxFuture<Run>,
    /// Runs per subject; the fastest is reported.
    rounds: usize,
    figures: &'static [Figure],
}

/// The figures of the uncontended workloads.
const UNCONTENDED: &[Figure] = &[
    Figure::CyclesPerSec,
    Figure::CycleP50,
    Figure::CycleP99,
    Figure::ClientCpu,
    Figure::ServerCpu,
    Figure::Commands,
];

const TABLES: &[Table] = &[
    Table {
        title: "Ours against raw, on one redis-server.",
        subjects: &[Subject::Ours, Subject::Raw],
        workloads: &[
            Workload {
                name: "U1",
                run: |client, scale| Box::pin(u1(client, scale)),
                rounds: 5,
                figures: UNCONTENDED,
            },
            Workload {
                name: "U32",
                run: |client, scale| Box::pin(u32_tasks(client, scale)),
                rounds: 5,
                figures: UNCONTENDED,
            },
            Workload {
                name: "C8",
                run: |client, scale| Box::pin(c8(client, scale)),
                rounds: 3,
                figures: &[
                    Figure::CyclesPerSec,
                    Figure::WaitP50,
                    Figure::WaitP99,
                    Figure::WaitMax,
                    Figure::FirstSecondMin,
                    Figure::FirstSecondMax,
                    Figure::Commands,
                ],
            },
        ],
    },
    Table {
        title: "R3-U1: U1 through ours on Redlock over 3 redis-servers, against raw U1 on \
                one server (there is no raw Redlock); redis-server CPU and commands of \
                ours on Redlock are summed over the 3 servers.",
        subjects: &[Subject::OursRedlock, Subject::Raw],
        workloads: &[Workload {
            name: "R3-U1",
            run: |client, scale| Box::pin(u1(client, scale)),
            // A run of ours on Redlock takes 4 to 7 s on the 2-vCPU machine.
            rounds: 3,
            figures: UNCONTENDED,
        }],
    },
    Table {
        title: "Macro overhead: U1 through `#[distributed_lock]` around an empty body, \
                against `with_lock` around an empty body and against `acquire` + \
                `release`, same options (ttl 10 s, wait 0), one redis-server.",
        subjects: &[Subject::Macro, Subject::WithLock, Subject::AcquireRelease],
        workloads: &[Workload {
            name: "M-U1",
            run: |client, scale| Box::pin(u1(client, scale)),
            // Each subject goes first once.
            rounds: 3,
            figures: UNCONTENDED,
        }],
    },
];

/// U1: one task, 20 000 acquire/release cycles over 1 000 keys.
async fn u1(client: Client, scale: Scale) -> Run {
    let plan = Plan {
        tasks: 1,
        cycles: scale.of(20_000),
        keys: (0..1000).map(|i| format!("bench:u:{i}")).collect(),
        key_of: |_, cycle| cycle % 1000,
        hold: Duration::ZERO,
    };
    drive(client, plan).await
}

/// U32: 32 tasks, each on its own key, 50 000 cycles in total.
async fn u32_tasks(client: Client, scale: Scale) -> Run {
    let plan = Plan {
        tasks: 32,
        cycles: scale.of(50_000),
        keys: (0..32).map(|task| format!("bench:p:{task}")).collect(),
        key_of: |task, _| task,
        hold: Duration::ZERO,
    };
    drive(client, plan).await
}

/// C8: 8 tasks on one key, 500 cycles each, holding the lock 1 ms each time.
async fn c8(client: Client, scale: Scale) -> Run {
    let plan = Plan {
        tasks: 8,
        cycles: 8 * scale.of(500),
        keys: vec!["bench:c".to_owned()],
        key_of: |_, _| 0,
        hold: Duration::from_millis(1),
    };
    drive(client, plan).await
}

/// Divides workload sizes: 1 under `cargo bench`, 100 for the smoke run of `cargo test`.
#[derive(Debug, Clone, Copy)]
struct Scale(usize);

impl Scale {
    fn of(self, cycles: usize) -> usize {
        (cycles / self.0).max(1)
    }

    /// Runs per subject: the workload's own number at full size, else one.
    fn rounds(self, full_size: usize) -> usize {
        if self.0 == 1 {
            full_size
        } else {
            1
        }
    }

    /// Pause before each run: [`SETTLE`] at full size, a tenth of it in the
    /// smoke run, whose counts nobody reads.
    fn settle(self) -> Duration {
        if self.0 == 1 {
            SETTLE
        } else {
            SETTLE / 10
        }
    }
}

/// What a workload is measured through: one column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// `acquire` (ttl 10 s, wait 10 s) and `release` on the one server.
    Ours,
    /// The hand-written baseline on the one server.
    Raw,
    /// As `Ours`, on a Redlock manager over the 3 Redlock servers.
    OursRedlock,
    /// [`Annotated::cycle`]: the attribute around an empty body.
    Macro,
    /// `with_lock` around an empty body, with the attribute's options.
    WithLock,
    /// `acquire` and `release` with the attribute's options.
    AcquireRelease,
}

impl Subject {
    fn label(self) -> &'static str {
        match self {
            Subject::Ours => "ours",
            Subject::Raw => "raw",
            Subject::OursRedlock => "ours on Redlock",
            Subject::Macro => "macro",
            Subject::WithLock => "with_lock",
            Subject::AcquireRelease => "acquire+release",
        }
    }
}

/// One subject ready to run: its client, and the servers its runs are counted on.
struct Side {
    subject: Subject,
    client: Client,
    servers: Admin,
}

/// Everything the subjects need, connected once.
struct Setup {
    /// Manager on the one server; the attribute's client too.
    single: LockManager,
    redlock: LockManager,
    raw: Raw,
    /// Counters of the one server.
    server: Admin,
    /// Counters of the Redlock servers, summed.
    nodes: Admin,
}

impl Setup {
    fn side(&self, subject: Subject) -> Side {
        let ours = LockOptions::new().ttl(TTL).wait(WAIT);
        // What `#[distributed_lock(ttl = "10s")]` passes: the defaults but the ttl.
        let attribute = LockOptions::new().ttl(TTL);
        let (client, servers) = match subject {
            Subject::Ours => (Client::ours(&self.single, ours), &self.server),
            Subject::Raw => (Client::Raw(self.raw.clone()), &self.server),
            Subject::OursRedlock => (Client::ours(&self.redlock, ours), &self.nodes),
            Subject::Macro => (
                Client::Macro(Annotated {
                    locks: self.single.clone(),
                }),
                &self.server,
            ),
            Subject::WithLock => (
                Client::WithLock {
                    manager: self.single.clone(),
                    options: attribute,
                },
                &self.server,
            ),
            Subject::AcquireRelease => (Client::ours(&self.single, attribute), &self.server),
        };
        Side {
            subject,
            client,
            servers: servers.clone(),
        }
    }
}

/// The lock client under measurement.
#[derive(Clone)]
enum Client {
    /// `acquire` with these options, then `release`.
    Ours {
        manager: LockManager,
        options: LockOptions,
    },
    Raw(Raw),
    /// The attribute; its key is built from the key index, so only for U1's
    /// keys (`bench:u:{i}`).
    Macro(Annotated),
    /// `with_lock` around an empty body.
    WithLock {
        manager: LockManager,
        options: LockOptions,
    },
}

/// U1 through the attribute, as an application would write it.
#[derive(Clone)]
struct Annotated {
    locks: LockManager,
}

impl Annotated {
    /// Locks `bench:u:{i}` around an empty body.
    #[distributed_lock(key = "bench:u:{i}", ttl = "10s", client = self.locks)]
    async fn cycle(&self, i: u64) -> Result<(), LockError> {
        Ok(())
    }
}

/// The hand-written baseline: what a careful user would write with redis-rs alone.
#[derive(Clone)]
struct Raw {
    connection: MultiplexedConnection,
    release: Arc<Script>,
    tokens: Arc<TokenSource>,
}

/// Unique owner tokens for the raw client: a per-process prefix and a counter.
struct TokenSource {
    prefix: u64,
    next: AtomicU64,
}

/// A lock held by one of the clients.
enum Held {
    Ours(LockGuard),
    Raw { key: String, token: String },
}

impl Client {
    fn ours(manager: &LockManager, options: LockOptions) -> Client {
        Client::Ours {
            manager: manager.clone(),
            options,
        }
    }

    /// One cycle on `key`, which is `keys[index]` of the plan: acquire, hold
    /// for `hold`, release. Returns when the lock was held, or `None` for the
    /// clients that take and release it around an empty body in one call
    /// (they only run with `hold` zero).
    async fn cycle(&mut self, key: &str, index: usize, hold: Duration) -> Option<Instant> {
        match self {
            Client::Macro(annotated) => {
                assert!(hold.is_zero(), "the annotated body cannot hold the lock");
                annotated
                    .cycle(index as u64)
                    .await
                    .unwrap_or_else(|err| panic!("macro: `bench:u:{index}`: {err}"));
                None
            }
            Client::WithLock { manager, options } => {
                assert!(hold.is_zero(), "the with_lock body cannot hold the lock");
                manager
                    .with_lock(key, options.clone(), async {})
                    .await
                    .unwrap_or_else(|err| panic!("with_lock `{key}`: {err}"));
                None
            }
            Client::Ours { .. } | Client::Raw(_) => {
                let held = self.acquire(key).await;
                let acquired = Instant::now();
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                self.release(held).await;
                Some(acquired)
            }
        }
    }

    async fn acquire(&mut self, key: &str) -> Held {
        match self {
            Client::Ours { manager, options } => {
                let guard = manager
                    .acquire(key, options.clone())
                    .await
                    .unwrap_or_else(|err| panic!("ours: acquire `{key}`: {err}"));
                Held::Ours(guard)
            }
            Client::Raw(raw) => raw.acquire(key).await,
            Client::Macro(_) | Client::WithLock { .. } => {
                unreachable!("these clients lock around a body")
            }
        }
    }

    async fn release(&mut self, held: Held) {
        match (self, held) {
            (Client::Ours { .. }, Held::Ours(guard)) => guard
                .release()
                .await
                .unwrap_or_else(|err| panic!("ours: release: {err}")),
            (Client::Raw(raw), Held::Raw { key, token }) => raw.release(&key, &token).await,
            _ => unreachable!("a lock is released by the client that took it"),
        }
    }
}
impl Raw {
    async fn connect(url: &str) -> Raw {
        let connection = redis::Client::open(url)
            .expect("raw: invalid REDIS_URL")
            .get_multiplexed_async_connection()
            .await
            .expect("raw: cannot connect");
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Raw {
            connection,
            release: Arc::new(Script::new(RAW_RELEASE)),
            tokens: Arc::new(TokenSource {
                prefix: (u64::from(std::process::id()) << 32) ^ started.as_nanos() as u64,
                next: AtomicU64::new(0),
            }),
        }
    }

    /// `SET NX PX`, retried every [`RAW_POLL`] while someone else holds the key.
    async fn acquire(&mut self, key: &str) -> Held {
        let key = format!("raw:{key}");
        let token = format!(
            "{:016x}{:016x}",
            self.tokens.prefix,
            self.tokens.next.fetch_add(1, Ordering::Relaxed)
        );
        let deadline = Instant::now() + WAIT;
        loop {
            let reply: Value = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query_async(&mut self.connection)
                .await
                .unwrap_or_else(|err| panic!("raw: SET `{key}`: {err}"));
            if reply != Value::Nil {
                return Held::Raw { key, token };
            }
            if Instant::now() >= deadline {
                panic!("raw: `{key}` stayed busy for {WAIT:?}");
            }
            tokio::time::sleep(RAW_POLL).await;
        }
    }

    async fn release(&mut self, key: &str, token: &str) {
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.connection)
            .await
            .unwrap_or_else(|err| panic!("raw: release `{key}`: {err}"));
        if deleted != 1 {
            panic!("raw: `{key}` was no longer ours at release");
        }
    }
}

/// What the tasks of one workload do: `tasks` tasks share `cycles` cycles of
/// acquire, hold for `hold`, release, on `keys[key_of(task, cycle)]`.
struct Plan {
    tasks: usize,
    cycles: usize,
    keys: Vec<String>,
    key_of: fn(usize, usize) -> usize,
    hold: Duration,
}

/// The measurements of one run of one workload through one client.
#[derive(Debug, Default)]
struct Run {
    cycles: usize,
    /// From the start signal to the last release.
    elapsed: Duration,
    /// Each cycle from calling acquire to release returning, hold included.
    cycle_times: Vec<Duration>,
    /// Each acquire call, from calling it to holding the lock (none for
    /// the clients that lock around a body).
    waits: Vec<Duration>,
    /// Cycles each task completed within the first second.
    first_second: Vec<usize>,
    /// `INFO commandstats` calls during the run, by command.
    commands: BTreeMap<String, u64>,
    /// CPU time this process used during the run (all threads); `None` off Linux.
    client_cpu: Option<Duration>,
    /// CPU time the Redis servers used during the run (`INFO cpu`).
    server_cpu: Duration,
}

/// What one task measured.
struct TaskRecord {
    cycle_times: Vec<Duration>,
    waits: Vec<Duration>,
    done_at: Vec<Instant>,
}

/// Runs `plan` on spawned tasks that start together, and collects their measurements.
async fn drive(client: Client, plan: Plan) -> Run {
    let plan = Arc::new(plan);
    let start_line = Arc::new(tokio::sync::Barrier::new(plan.tasks + 1));
    let tasks: Vec<_> = (0..plan.tasks)
        .map(|task| {
            let (mut client, plan, start_line) =
                (client.clone(), Arc::clone(&plan), Arc::clone(&start_line));
            tokio::spawn(async move {
                let cycles =
                    plan.cycles / plan.tasks + usize::from(task < plan.cycles % plan.tasks);
                let mut record = TaskRecord {
                    cycle_times: Vec::with_capacity(cycles),
                    waits: Vec::with_capacity(cycles),
                    done_at: Vec::with_capacity(cycles),
                };
                start_line.wait().await;
                for cycle in 0..cycles {
                    let index = (plan.key_of)(task, cycle);
                    let started = Instant::now();
                    let acquired = client.cycle(&plan.keys[index], index, plan.hold).await;
                    let done = Instant::now();
                    if let Some(acquired) = acquired {
                        record.waits.push(acquired - started);
                    }
                    record.cycle_times.push(done - started);
                    record.done_at.push(done);
                }
                record
            })
        })
        .collect();
    start_line.wait().await;
    let start = Instant::now();
    let mut run = Run::default();
    let mut last = start;
    for task in tasks {
        let record = task.await.expect("a benchmark task panicked");
        let first_second = record
            .done_at
            .iter()
            .filter(|done| done.saturating_duration_since(start) <= Duration::from_secs(1))
            .count();
        run.first_second.push(first_second);
        last = record.done_at.iter().copied().fold(last, Instant::max);
        run.cycles += record.cycle_times.len();
        run.cycle_times.extend(record.cycle_times);
        run.waits.extend(record.waits);
    }
    run.elapsed = last - start;
    run.cycle_times.sort_unstable();
    run.waits.sort_unstable();
    run
}

/// A figure of the table: one row per workload that shows it.
#[derive(Debug, Clone, Copy)]
enum Figure {
    CyclesPerSec,
    CycleP50,
    CycleP99,
    WaitP50,
    WaitP99,
    WaitMax,
    FirstSecondMin,
    FirstSecondMax,
    ClientCpu,
    ServerCpu,
    Commands,
}

impl Figure {
    fn label(self) -> &'static str {
        match self {
            Figure::CyclesPerSec => "cycles/s",
            Figure::CycleP50 => "cycle p50",
            Figure::CycleP99 => "cycle p99",
            Figure::WaitP50 => "acquire wait p50",
            Figure::WaitP99 => "acquire wait p99",
            Figure::WaitMax => "acquire wait max",
            Figure::FirstSecondMin => "cycles in 1st s, least served task",
            Figure::FirstSecondMax => "cycles in 1st s, most served task",
            Figure::ClientCpu => "bench process CPU/cycle",
            Figure::ServerCpu => "redis-server CPU/cycle",
            Figure::Commands => "commands/cycle (incl. inside scripts)",
        }
    }

    /// The number the ours/raw ratio is taken of.
    fn value(self, run: &Run) -> f64 {
        match self {
            Figure::CyclesPerSec => run.cycles_per_sec(),
            Figure::CycleP50 => percentile(&run.cycle_times, 0.50).as_secs_f64(),
            Figure::CycleP99 => percentile(&run.cycle_times, 0.99).as_secs_f64(),
            Figure::WaitP50 => percentile(&run.waits, 0.50).as_secs_f64(),
            Figure::WaitP99 => percentile(&run.waits, 0.99).as_secs_f64(),
            Figure::WaitMax => percentile(&run.waits, 1.0).as_secs_f64(),
            Figure::FirstSecondMin => run.first_second.iter().min().copied().unwrap_or(0) as f64,
            Figure::FirstSecondMax => run.first_second.iter().max().copied().unwrap_or(0) as f64,
            Figure::ClientCpu => run.client_cpu.map_or(f64::NAN, |cpu| run.per_cycle(cpu)),
            Figure::ServerCpu => run.per_cycle(run.server_cpu),
            Figure::Commands => run.commands.values().sum::<u64>() as f64 / run.cycles as f64,
        }
    }

    fn show(self, run: &Run) -> String {
        let value = self.value(run);
        match self {
            Figure::CyclesPerSec => format!("{value:.0}"),
            Figure::CycleP50
            | Figure::CycleP99
            | Figure::WaitP50
            | Figure::WaitP99
            | Figure::WaitMax
            | Figure::ClientCpu
            | Figure::ServerCpu => show_seconds(value),
            Figure::FirstSecondMin | Figure::FirstSecondMax => format!("{value:.0}"),
            Figure::Commands => {
                let mut by_calls: Vec<_> = run.commands.iter().collect();
                by_calls.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                let detail: Vec<String> = by_calls
                    .iter()
                    .map(|(name, calls)| {
                        format!("{name} {:.2}", **calls as f64 / run.cycles as f64)
                    })
                    .collect();
                format!("{value:.2}: {}", detail.join(", "))
            }
        }
    }
}

impl Run {
    fn cycles_per_sec(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    fn per_cycle(&self, total: Duration) -> f64 {
        total.as_secs_f64() / self.cycles as f64
    }
}

/// Nearest-rank percentile of sorted durations; `q = 1.0` is the maximum.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn show_seconds(seconds: f64) -> String {
    if seconds.is_nan() {
        "n/a".to_owned()
    } else if seconds < 1e-3 {
        format!("{:.0} µs", seconds * 1e6)
    } else {
        format!("{:.2} ms", seconds * 1e3)
    }
}

/// CPU time all threads of this process have used, from Linux's
/// `/proc/self/task/*/schedstat` (nanoseconds on CPU); `None` elsewhere.
fn process_cpu() -> Option<Duration> {
    let mut nanos = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let schedstat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        nanos += schedstat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(nanos))
}

/// Connections for `CONFIG RESETSTAT` and `INFO`, apart from the clients,
/// to every server one subject uses; the figures are summed over them.
#[derive(Clone)]
struct Admin(Vec<MultiplexedConnection>);

impl Admin {
    async fn connect(urls: &[String]) -> Admin {
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            let connection = redis::Client::open(url.as_str())
                .expect("invalid Redis URL")
                .get_multiplexed_async_connection()
                .await
                .expect("admin: cannot connect");
            connections.push(connection);
        }
        Admin(connections)
    }

    async fn reset_stats(&mut self) {
        for connection in &mut self.0 {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async::<()>(connection)
                .await
                .expect("CONFIG RESETSTAT");
        }
    }

    /// Calls per command since the last reset, leaving out our own CONFIG and INFO.
    async fn command_calls(&mut self) -> BTreeMap<String, u64> {
        let mut calls = BTreeMap::new();
        for info in self.info("commandstats").await {
            for line in info.lines() {
                let Some((name, stats)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|line| line.split_once(':'))
                else {
                    continue;
                };
                if name.starts_with("config") || name.starts_with("info") {
                    continue;
                }
                let count = stats.split(',').find_map(|f| f.strip_prefix("calls="));
                if let Some(count) = count.and_then(|count| count.parse::<u64>().ok()) {
                    *calls.entry(name.to_owned()).or_default() += count;
                }
            }
        }
        calls
    }

    /// CPU time (user + system) the servers have used since they started.
    async fn server_cpu(&mut self) -> Duration {
        let seconds: f64 = self
            .info("cpu")
            .await
            .iter()
            .flat_map(|info| info.lines())
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                let used = name == "used_cpu_user" || name == "used_cpu_sys";
                used.then(|| value.trim().parse::<f64>().ok()).flatten()
            })
            .sum();
        Duration::from_secs_f64(seconds)
    }

    /// The version of the first server.
    async fn redis_version(&mut self) -> String {
        let info = self.info("server").await;
        info.first()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("redis_version:"))
            })
            .unwrap_or("unknown")
            .trim()
            .to_owned()
    }

    /// The section of `INFO` of each server.
    async fn info(&mut self, section: &str) -> Vec<String> {
        let mut infos = Vec::with_capacity(self.0.len());
        for connection in &mut self.0 {
            let info = redis::cmd("INFO")
                .arg(section)
                .query_async(connection)
                .await
                .expect("INFO");
            infos.push(info);
        }
        infos
    }
}

/// Runs `workload` its number of rounds through each side, and returns the
/// fastest run of each by cycles/s, in the order of `sides`. Each round
/// starts with another side and goes on in turn (with two sides: the second
/// first on even rounds), so that slow phases of a shared machine hit all.
/// Fastest, not median: on a shared machine other processes only ever slow a
/// run down, so the fastest run is the one least disturbed.
async fn measure(workload: &Workload, sides: &[Side], scale: Scale) -> Vec<Run> {
    let rounds = scale.rounds(workload.rounds);
    let mut runs: Vec<Vec<Run>> = sides.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let first = sides.len() - 1 - round % sides.len();
        for index in (0..sides.len()).map(|k| (first + k) % sides.len()) {
            let side = &sides[index];
            let mut servers = side.servers.clone();
            tokio::time::sleep(scale.settle()).await;
            servers.reset_stats().await;
            let (client_before, server_before) = (process_cpu(), servers.server_cpu().await);
            let mut run = (workload.run)(side.client.clone(), scale).await;
            run.commands = servers.command_calls().await;
            run.server_cpu = servers.server_cpu().await.saturating_sub(server_before);
            run.client_cpu = process_cpu()
                .zip(client_before)
                .map(|(after, before)| after.saturating_sub(before));
            eprintln!(
                "{} round {round} {}: {:.0} cycles/s, acquire wait max {}, \
                 cycles in 1st s per task {}-{}",
                workload.name,
                side.subject.label(),
                run.cycles_per_sec(),
                Figure::WaitMax.show(&run),
                Figure::FirstSecondMin.show(&run),
                Figure::FirstSecondMax.show(&run),
            );
            runs[index].push(run);
        }
    }
    runs.into_iter()
        .map(|runs| {
            runs.into_iter()
                .max_by(|a, b| a.cycles_per_sec().total_cmp(&b.cycles_per_sec()))
                .expect("every workload runs at least once")
        })
        .collect()
}

/// One Markdown table: a column per subject, then the first subject's figure
/// divided by each other one's.
fn print_table(table: &Table, results: &[Vec<Run>]) {
    let (first, others) = table.subjects.split_first().expect("a table has subjects");
    let mut header = String::from("| workload | figure |");
    let mut rule = String::from("|---|---|");
    for subject in table.subjects {
        header += &format!(" {} |", subject.label());
        rule += "--:|";
    }
    for other in others {
        header += &format!(" {}/{} |", first.label(), other.label());
        rule += "--:|";
    }
    println!("{}\n\n{header}\n{rule}", table.title);
    for (workload, runs) in table.workloads.iter().zip(results) {
        for figure in workload.figures {
            let mut row = format!("| {} | {} |", workload.name, figure.label());
            for run in runs {
                row += &format!(" {} |", figure.show(run));
            }
            for run in &runs[1..] {
                row += &format!(" {:.2} |", figure.value(&runs[0]) / figure.value(run));
            }
            println!("{row}");
        }
    }
    println!();
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let scale = if full { Scale(1) } else { Scale(100) };
    let (_server, url, source) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url, "REDIS_URL"),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            (
                Some(server),
                url,
                "own redis-server, --save '' --appendonly no",
            )
        }
    };
    let nodes = RedisServer::start_independent(REDLOCK_NODES);
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let setup = Setup {
            single: LockManager::builder()
                .namespace("ours:")
                .connect(&url)
                .await
                .expect("ours: cannot connect"),
            redlock: LockManager::builder()
                .namespace("ours:")
                .redlock(&node_urls)
                .await
                .expect("ours on Redlock: cannot connect"),
            raw: Raw::connect(&url).await,
            server: Admin::connect(std::slice::from_ref(&url)).await,
            nodes: Admin::connect(&node_urls).await,
        };
        let mut subjects: Vec<Subject> = Vec::new();
        for table in TABLES {
            for subject in table.subjects {
                if !subjects.contains(subject) {
                    subjects.push(*subject);
                }
            }
        }
        // Loads the scripts and warms the connections before anything is
        // measured: 1 000 cycles per subject, 10 in the smoke run.
        for subject in subjects {
            u1(setup.side(subject).client, Scale(20 * scale.0)).await;
        }
        let mut results = Vec::new();
        for table in TABLES {
            let sides: Vec<Side> = table.subjects.iter().map(|s| setup.side(*s)).collect();
            let mut runs = Vec::new();
            for workload in table.workloads {
                runs.push(measure(workload, &sides, scale).await);
            }
            results.push(runs);
        }
        println!(
            "\nredis-server {} ({source}; Redlock: {REDLOCK_NODES} more, started by the \
             testkit), tokio multi-thread runtime with 2 workers, {} available CPUs; \
             fastest of alternating runs per subject{}\n",
            setup.server.clone().redis_version().await,
            std::thread::available_parallelism().map_or(0, usize::from),
            if full {
                ""
            } else {
                ", smoke run at 1/100 size"
            },
        );
        for (table, runs) in TABLES.iter().zip(&results) {
            print_table(table, runs);
        }
    });
}
