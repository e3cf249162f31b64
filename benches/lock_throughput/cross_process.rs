//! X4x2, the cross-process workload: 4 processes × 2 tasks on one key,
//! holding it 1 ms each time, as 4 instances of a service contend in
//! production. The bench starts its own binary as the worker processes
//! (`--worker SUBJECT URL TASKS CYCLES_PER_TASK HOLD_US`); each connects a
//! client of its own, prints `ready`, starts on a `go` line on its stdin, and
//! prints its figures as one line on stdout, which the parent merges.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use tokio::runtime::Handle;

use crate::cpu::process_cpu;
use crate::subjects::{Client, Side, Subject};
use crate::workloads::{drive, Baseline, Hold, Plan, Scale, Timings};

/// First argument that makes the bench binary a worker process.
pub const WORKER_ARG: &str = "--worker";
/// Worker processes per run.
const PROCESSES: usize = 4;
/// Tasks in each worker process.
const TASKS_PER_PROCESS: usize = 2;
/// Cycles of each task at full size.
const CYCLES_PER_TASK: usize = 250;
/// How long each task holds the lock.
const HOLD: Duration = Duration::from_millis(1);
/// The one key all tasks of all processes take turns on.
const KEY: &str = "bench:x";
/// Uncontended cycles each worker runs on a key of its own before `ready`:
/// loads the scripts and warms the connection.
const WARM_UP: usize = 20;
/// Longest a run may take, start-up included, before its workers are killed.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Runs X4x2 through `side`'s subject in [`PROCESSES`] worker processes on
/// `side`'s server and merges their figures. The run starts when the parent
/// sends `go`: cycles/s and the counters (taken then) leave out the workers'
/// start-up.
pub async fn x4(side: Side, scale: Scale) -> Timings {
    let cycles = scale.of(CYCLES_PER_TASK);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || run_workers(side, cycles, &runtime))
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

/// Starts the workers, waits for each to be ready, starts them together and
/// collects their reports; panics (after killing them) if one fails or the
/// run exceeds [`RUN_LIMIT`]. `runtime` takes the counters at the start.
fn run_workers(side: Side, cycles_per_task: usize, runtime: &Handle) -> Timings {
    let Side {
        subject,
        url,
        mut servers,
        ..
    } = side;
    let deadline = Instant::now() + RUN_LIMIT;
    let args = [
        WORKER_ARG.to_owned(),
        subject.label().to_owned(),
        url,
        TASKS_PER_PROCESS.to_string(),
        cycles_per_task.to_string(),
        HOLD.as_micros().to_string(),
    ];
    let (mut workers, lines) = Workers::start(PROCESSES, &args);
    one_line_each(&lines, PROCESSES, deadline, "ready", |line| {
        (line == "ready").then_some(())
    });
    let baseline = runtime.block_on(Baseline::take(&mut servers));
    let go_at = SystemTime::now();
    workers.tell("go");
    let reports = one_line_each(
        &lines,
        PROCESSES,
        deadline,
        "its figures",
        WorkerReport::parse,
    );
    workers.finish(deadline);
    Timings {
        baseline: Some(baseline),
        ..merge(go_at, reports)
    }
}

/// The next line of each of the `processes` workers, parsed by `parse`;
/// panics on a line that does not parse, and when a worker exits or
/// `deadline` passes first.
pub fn one_line_each<T>(
    lines: &Receiver<(usize, String)>,
    processes: usize,
    deadline: Instant,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Vec<T> {
    let mut got: Vec<Option<T>> = (0..processes).map(|_| None).collect();
    while got.iter().any(Option::is_none) {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let (index, line) = match lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("a worker process did not report {what} in time")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("a worker process exited before it reported {what}")
            }
        };
        let parsed = parse(&line)
            .unwrap_or_else(|| panic!("worker process {index} printed `{line}`, expected {what}"));
        got[index] = Some(parsed);
    }
    got.into_iter().flatten().collect()
}

/// The worker processes of one run; those still running when it is dropped
/// (a failed run) are killed.
pub struct Workers(Vec<Child>);

impl Workers {
    /// Starts `count` copies of this binary with `args`, stdin and stdout
    /// piped; their stdout lines come on the receiver with the worker's
    /// index (0 to `count - 1`).
    pub fn start(count: usize, args: &[String]) -> (Workers, Receiver<(usize, String)>) {
        let exe = std::env::current_exe().expect("cannot locate the bench binary");
        let (sender, lines) = mpsc::channel();
        let mut workers = Workers(Vec::with_capacity(count));
        for index in 0..count {
            let mut child = Command::new(&exe)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("cannot start a worker process");
            let stdout = child.stdout.take().expect("stdout is piped");
            let sender = sender.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if sender.send((index, line)).is_err() {
                        break;
                    }
                }
            });
            workers.0.push(child);
        }
        (workers, lines)
    }

    /// Sends `line` to every worker's stdin.
    pub fn tell(&mut self, line: &str) {
        for child in &mut self.0 {
            let stdin = child.stdin.as_mut().expect("stdin is piped");
            writeln!(stdin, "{line}")
                .and_then(|()| stdin.flush())
                .expect("cannot write to a worker process");
        }
    }

    /// Waits for every worker to exit by `deadline`; panics if one failed or
    /// is still running then.
    pub fn finish(&mut self, deadline: Instant) {
        for child in &mut self.0 {
            loop {
                if let Some(status) = child.try_wait().expect("cannot wait for a worker") {
                    assert!(status.success(), "a worker process failed: {status}");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "a worker process did not exit in time"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The run's figures from all workers: cycles/s counts from `go_at` to the
/// last release of any worker.
fn merge(go_at: SystemTime, reports: Vec<WorkerReport>) -> Timings {
    let end = reports
        .iter()
        .map(|report| report.started_at + report.elapsed)
        .max()
        .unwrap_or(go_at);
    let mut timings = Timings {
        cycles: 0,
        elapsed: end.duration_since(go_at).unwrap_or_default(),
        started_at: go_at,
        cycle_times: Vec::new(),
        waits: Vec::new(),
        handoffs: Vec::new(),
        holds: Vec::new(),
        first_second: Vec::new(),
        worker_cpu: Duration::ZERO,
        baseline: None,
    };
    for report in reports {
        timings.cycles += report.cycles;
        timings.waits.extend(report.waits);
        timings.first_second.extend(report.first_second);
        timings.worker_cpu += report.cpu;
        timings.holds.extend(report.holds);
    }
    timings.waits.sort_unstable();
    timings.handoffs = handoffs(&mut timings.holds);
    timings
}

/// The hand-offs between the `holds` of one key, whichever processes they
/// were in: from each release sent to the next hold (the holds are sorted
/// by when they began; one holder at a time, so each begins after the one
/// before was released, on the one wall clock of this machine).
fn handoffs(holds: &mut [Hold]) -> Vec<Duration> {
    holds.sort_unstable();
    let mut handoffs: Vec<Duration> = holds
        .windows(2)
        .map(|pair| {
            pair[1]
                .held
                .duration_since(pair[0].released)
                .unwrap_or_default()
        })
        .collect();
    handoffs.sort_unstable();
    handoffs
}

/// What one worker measured: the line it prints, e.g.
/// `cycles=500 started_unix_ns=… elapsed_ns=… cpu_ns=… first_second=61,60 waits_ns=…,… holds_unix_ns=requested:held:released,…`.
struct WorkerReport {
    cycles: usize,
    started_at: SystemTime,
    elapsed: Duration,
    /// CPU time of the worker during the run (zero off Linux).
    cpu: Duration,
    first_second: Vec<usize>,
    waits: Vec<Duration>,
    /// Each hold: when it was asked for, began, and its release was sent.
    holds: Vec<Hold>,
}

/// Nanoseconds since the Unix epoch of `at`.
fn unix_ns(at: SystemTime) -> u128 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

impl WorkerReport {
    fn line(&self) -> String {
        let list = |values: Vec<String>| values.join(",");
        format!(
            "cycles={} started_unix_ns={} elapsed_ns={} cpu_ns={} first_second={} waits_ns={} holds_unix_ns={}",
            self.cycles,
            unix_ns(self.started_at),
            self.elapsed.as_nanos(),
            self.cpu.as_nanos(),
            list(self.first_second.iter().map(usize::to_string).collect()),
            list(
                self.waits
                    .iter()
                    .map(|w| w.as_nanos().to_string())
                    .collect()
            ),
            list(
                self.holds
                    .iter()
                    .map(|hold| {
                        format!(
                            "{}:{}:{}",
                            unix_ns(hold.requested),
                            unix_ns(hold.held),
                            unix_ns(hold.released)
                        )
                    })
                    .collect()
            ),
        )
    }

    /// The inverse of [`Self::line`]; `None` for anything else.
    fn parse(line: &str) -> Option<WorkerReport> {
        let fields: Vec<(&str, &str)> = line
            .split_whitespace()
            .map(|field| field.split_once('='))
            .collect::<Option<_>>()?;
        let field = |name: &str| fields.iter().find(|(key, _)| *key == name).map(|f| f.1);
        let number = |name: &str| field(name)?.parse::<u64>().ok();
        let list = |name: &str| -> Option<Vec<u64>> {
            let values = field(name)?;
            values
                .split(',')
                .filter(|value| !value.is_empty())
                .map(|value| value.parse().ok())
                .collect()
        };
        Some(WorkerReport {
            cycles: usize::try_from(number("cycles")?).ok()?,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_nanos(number("started_unix_ns")?),
            elapsed: Duration::from_nanos(number("elapsed_ns")?),
            cpu: Duration::from_nanos(number("cpu_ns")?),
            first_second: list("first_second")?
                .into_iter()
                .map(|count| usize::try_from(count).ok())
                .collect::<Option<_>>()?,
            waits: list("waits_ns")?
                .into_iter()
                .map(Duration::from_nanos)
                .collect(),
            holds: field("holds_unix_ns")?
                .split(',')
                .filter(|hold| !hold.is_empty())
                .map(|hold| {
                    let at = |ns: &str| {
                        Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.parse().ok()?))
                    };
                    let mut times = hold.split(':').map(at);
                    Some(Hold {
                        requested: times.next()??,
                        held: times.next()??,
                        released: times.next()??,
                    })
                })
                .collect::<Option<_>>()?,
        })
    }
}

/// What a worker process is told on its command line.
struct WorkerSpec {
    subject: Subject,
    url: String,
    tasks: usize,
    cycles_per_task: usize,
    hold: Duration,
}

impl WorkerSpec {
    /// `SUBJECT URL TASKS CYCLES_PER_TASK HOLD_US`.
    fn parse(args: &[String]) -> Result<WorkerSpec, String> {
        let [subject, url, tasks, cycles, hold] = args else {
            return Err(format!(
                "expected SUBJECT URL TASKS CYCLES_PER_TASK HOLD_US, got {args:?}"
            ));
        };
        let number = |name: &str, value: &str| {
            value
                .parse::<u64>()
                .map_err(|err| format!("{name} `{value}`: {err}"))
        };
        let tasks = number("TASKS", tasks)?;
        if tasks == 0 {
            return Err("TASKS must be at least 1".to_owned());
        }
        Ok(WorkerSpec {
            subject: Subject::for_worker(subject)
                .ok_or_else(|| format!("SUBJECT `{subject}`: expected `ours` or `raw`"))?,
            url: url.clone(),
            tasks: usize::try_from(tasks).map_err(|err| err.to_string())?,
            cycles_per_task: usize::try_from(number("CYCLES_PER_TASK", cycles)?)
                .map_err(|err| err.to_string())?,
            hold: Duration::from_micros(number("HOLD_US", hold)?),
        })
    }
}

/// The worker process: `args` are those after [`WORKER_ARG`]. Exits with
/// status 2 on bad arguments; panics (status 101) if the run fails.
pub fn worker_main(args: &[String]) {
    let spec = WorkerSpec::parse(args).unwrap_or_else(|err| {
        eprintln!("lock_throughput {WORKER_ARG}: {err}");
        std::process::exit(2);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client = runtime.block_on(async {
        let client = Client::connect(spec.subject, &spec.url).await;
        let warm_up_key = format!("bench:x:warm:{}", std::process::id());
        drive(
            client.clone(),
            Plan::one_key(&warm_up_key, 1, WARM_UP, Duration::ZERO),
        )
        .await;
        client
    });
    say("ready");
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .expect("worker: cannot read stdin");
    assert_eq!(go.trim(), "go", "worker: expected `go` on stdin");
    let before = process_cpu();
    let plan = Plan::one_key(KEY, spec.tasks, spec.cycles_per_task, spec.hold);
    let timings = runtime.block_on(drive(client, plan));
    let cpu = process_cpu()
        .zip(before)
        .map(|(after, before)| after.saturating_sub(before));
    let report = WorkerReport {
        cycles: timings.cycles,
        started_at: timings.started_at,
        elapsed: timings.elapsed,
        cpu: cpu.unwrap_or_default(),
        first_second: timings.first_second,
        waits: timings.waits,
        holds: timings.holds,
    };
    say(&report.line());
}

/// One line on stdout, flushed at once: the parent is waiting for it.
pub fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .expect("worker: cannot write to stdout");
}
