//! The workloads that run in one process (U1, U32, C8) as plans of tasks,
//! their sizes, and the driver that runs a plan on tasks that start together
//! and times every cycle. Worker processes of the cross-process workload run
//! their share through the same driver, and where a run's counters start
//! from ([`Baseline`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::cpu::process_cpu;
use crate::redis_stats::Admin;
use crate::subjects::{Client, ReleaseMark, Side};

/// Pause before each run at full size, so background work of the previous one
/// (a spawned release, an unsubscribe) lands before the counters are reset.
const SETTLE: Duration = Duration::from_millis(100);

/// Divides workload sizes: 1 under `cargo bench`, 100 for the smoke run of `cargo test`.
#[derive(Debug, Clone, Copy)]
pub struct Scale(pub usize);

impl Scale {
    /// `cycles` at this scale, at least 1.
    pub fn of(self, cycles: usize) -> usize {
        (cycles / self.0).max(1)
    }

    /// Whether this is the full-size run.
    pub fn is_full(self) -> bool {
        self.0 == 1
    }

    /// Runs per subject: the workload's own number at full size, else one.
    pub fn rounds(self, full_size: usize) -> usize {
        if self.is_full() {
            full_size
        } else {
            1
        }
    }

    /// Pause before each run: [`SETTLE`] at full size, a tenth of it in the
    /// smoke run, whose counts nobody reads.
    pub fn settle(self) -> Duration {
        if self.is_full() {
            SETTLE
        } else {
            SETTLE / 10
        }
    }
}

/// What the tasks of one workload do: `tasks` tasks share `cycles` cycles of
/// acquire, hold for `hold`, release, on `keys[key_of(task, cycle)]`.
pub struct Plan {
    pub tasks: usize,
    pub cycles: usize,
    pub keys: Vec<String>,
    pub key_of: fn(usize, usize) -> usize,
    pub hold: Duration,
}

impl Plan {
    /// U1's plan: one task, 20 000 cycles over 1 000 keys, no hold.
    pub fn u1(scale: Scale) -> Plan {
        Plan {
            tasks: 1,
            cycles: scale.of(20_000),
            keys: (0..1000).map(|i| format!("bench:u:{i}")).collect(),
            key_of: |_, cycle| cycle % 1000,
            hold: Duration::ZERO,
        }
    }

    /// `tasks` tasks taking turns on one key, `cycles_per_task` cycles each,
    /// holding the lock `hold` each time.
    pub fn one_key(key: &str, tasks: usize, cycles_per_task: usize, hold: Duration) -> Plan {
        Plan {
            tasks,
            cycles: tasks * cycles_per_task,
            keys: vec![key.to_owned()],
            key_of: |_, _| 0,
            hold,
        }
    }
}

/// U1: one task, 20 000 acquire/release cycles over 1 000 keys.
pub async fn u1(side: Side, scale: Scale) -> Timings {
    drive(side.client, Plan::u1(scale)).await
}

/// U32: 32 tasks, each on its own key, 50 000 cycles in total.
pub async fn u32_tasks(side: Side, scale: Scale) -> Timings {
    let plan = Plan {
        tasks: 32,
        cycles: scale.of(50_000),
        keys: (0..32).map(|task| format!("bench:p:{task}")).collect(),
        key_of: |task, _| task,
        hold: Duration::ZERO,
    };
    drive(side.client, plan).await
}

/// C8: 8 tasks on one key, 500 cycles each, holding the lock 1 ms each time.
pub async fn c8(side: Side, scale: Scale) -> Timings {
    let plan = Plan::one_key("bench:c", 8, scale.of(500), Duration::from_millis(1));
    drive(side.client, plan).await
}

/// What the tasks of one run measured.
#[derive(Debug)]
pub struct Timings {
    pub cycles: usize,
    /// From the start signal to the last release.
    pub elapsed: Duration,
    /// Wall-clock time of the start signal, comparable across processes.
    pub started_at: SystemTime,
    /// Each cycle from calling acquire to release returning, hold included
    /// (sorted; none from worker processes).
    pub cycle_times: Vec<Duration>,
    /// Each acquire call, from calling it to holding the lock (sorted; none
    /// for the clients that lock around a body).
    pub waits: Vec<Duration>,
    /// On one key: each hand-off, from the last release sent to the next
    /// holder holding (sorted; across worker processes, from their holds).
    pub handoffs: Vec<Duration>,
    /// On one key: each hold (from holding to sending the release) with
    /// when it was asked for.
    pub holds: Vec<Hold>,
    /// Cycles each task completed within the first second.
    pub first_second: Vec<usize>,
    /// CPU time of the worker processes that ran the cycles (cross-process
    /// workloads), on top of this process's own.
    pub worker_cpu: Duration,
    /// Counters taken by the workload itself at its start signal, when what
    /// came before (starting worker processes) must not count.
    pub baseline: Option<Baseline>,
}

/// One acquisition of a key shared by the tasks, in wall-clock time,
/// comparable across the processes of one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hold {
    /// When the lock was held (first: holds sort by it).
    pub held: SystemTime,
    /// When the acquisition was called.
    pub requested: SystemTime,
    /// When the release was sent.
    pub released: SystemTime,
}

/// The most holds that began while one acquisition waited for its own:
/// with one key and N tasks, a queue served in arrival order lets at most
/// N - 1 go ahead (every other task once). Sorts `holds` by when they
/// began.
pub fn most_ahead(holds: &mut [Hold]) -> Option<usize> {
    holds.sort_unstable();
    (0..holds.len())
        .map(|index| {
            let requested = holds[index].requested;
            index - holds[..index].partition_point(|hold| hold.held <= requested)
        })
        .max()
}

/// What one task measured.
struct TaskRecord {
    cycle_times: Vec<Duration>,
    waits: Vec<Duration>,
    handoffs: Vec<Duration>,
    holds: Vec<(Instant, Instant, Instant)>,
    done_at: Vec<Instant>,
}

/// Runs `plan` on spawned tasks that start together, and collects their measurements.
pub async fn drive(client: Client, plan: Plan) -> Timings {
    let plan = Arc::new(plan);
    let start_line = Arc::new(tokio::sync::Barrier::new(plan.tasks + 1));
    let releases = Arc::new(ReleaseMark::new());
    let tasks: Vec<_> = (0..plan.tasks)
        .map(|task| {
            let (mut client, plan, start_line, releases) = (
                client.clone(),
                Arc::clone(&plan),
                Arc::clone(&start_line),
                Arc::clone(&releases),
            );
            tokio::spawn(async move {
                let cycles =
                    plan.cycles / plan.tasks + usize::from(task < plan.cycles % plan.tasks);
                let mut record = TaskRecord {
                    cycle_times: Vec::with_capacity(cycles),
                    waits: Vec::with_capacity(cycles),
                    handoffs: Vec::new(),
                    holds: Vec::new(),
                    done_at: Vec::with_capacity(cycles),
                };
                let one_key = plan.keys.len() == 1 && plan.tasks > 1;
                start_line.wait().await;
                for cycle in 0..cycles {
                    let index = (plan.key_of)(task, cycle);
                    let started = Instant::now();
                    let acquired = client
                        .cycle(&plan.keys[index], index, plan.hold, &releases)
                        .await;
                    let done = Instant::now();
                    if let Some(acquired) = acquired {
                        record.waits.push(acquired.at - started);
                        if let Some(handoff) = acquired.handoff.filter(|_| one_key) {
                            record.handoffs.push(handoff);
                        }
                        if one_key {
                            record.holds.push((started, acquired.at, acquired.released));
                        }
                    }
                    record.cycle_times.push(done - started);
                    record.done_at.push(done);
                }
                record
            })
        })
        .collect();
    start_line.wait().await;
    let (start, started_at) = (Instant::now(), SystemTime::now());
    let mut timings = Timings {
        cycles: 0,
        elapsed: Duration::ZERO,
        started_at,
        cycle_times: Vec::new(),
        waits: Vec::new(),
        handoffs: Vec::new(),
        holds: Vec::new(),
        first_second: Vec::with_capacity(plan.tasks),
        worker_cpu: Duration::ZERO,
        baseline: None,
    };
    let mut last = start;
    for task in tasks {
        let record = task.await.expect("a benchmark task panicked");
        let first_second = record
            .done_at
            .iter()
            .filter(|done| done.saturating_duration_since(start) <= Duration::from_secs(1))
            .count();
        timings.first_second.push(first_second);
        last = record.done_at.iter().copied().fold(last, Instant::max);
        timings.cycles += record.cycle_times.len();
        timings.cycle_times.extend(record.cycle_times);
        timings.waits.extend(record.waits);
        timings.handoffs.extend(record.handoffs);
        let wall = |at: Instant| started_at + at.saturating_duration_since(start);
        timings.holds.extend(
            record
                .holds
                .into_iter()
                .map(|(requested, held, released)| Hold {
                    held: wall(held),
                    requested: wall(requested),
                    released: wall(released),
                }),
        );
    }
    timings.elapsed = last - start;
    timings.cycle_times.sort_unstable();
    timings.waits.sort_unstable();
    timings.handoffs.sort_unstable();
    timings
}

/// Where the counters of a run start from.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    pub client_cpu: Option<Duration>,
    pub server_cpu: Duration,
}

impl Baseline {
    /// Zeroes the command counters of `servers` and notes the CPU time used
    /// so far by them and by this process.
    pub async fn take(servers: &mut Admin) -> Baseline {
        servers.reset().await;
        Baseline {
            client_cpu: process_cpu(),
            server_cpu: servers.cpu().await,
        }
    }
}
