//! `cargo xtask test`: builds and lints every test binary of the workspace
//! once, then runs them side by side, N rounds (`scripts/test` runs one with
//! `--checks`, `scripts/soak` several under a CPU burner).
//!
//! The build runs clippy as the compiler of the workspace's crates
//! (`RUSTC_WORKSPACE_WRAPPER=clippy-driver`, set here only: a contributor's
//! own `cargo test` compiles with rustc), so one build both lints every
//! target with all features and produces the test binaries; a separate
//! `cargo clippy` would compile every dependency a second time, in check
//! mode. Any warning in the workspace's code fails the run.
//!
//! cargo runs test binaries one after another; ours mostly wait on TTLs,
//! timeouts and server processes, so running them at the same time takes
//! the wall time of the slowest instead of the sum. The doctests, and with
//! `--checks` the docs, run beside them; with `--checks`,
//! `scripts/check-packages` (in a target directory of its own) starts with
//! the build, and trybuild's cases as soon as their binary is linked. Valkey
//! and Redis 8.6 are built beside the build (`servers`).
//!
//! Prints each job's result and time, the 10 slowest tests, each test that
//! failed with how often (and, in a single round, the failing job's
//! output), and last `N passed, M failed`. Logs are kept under the target
//! directory, in `xtask-logs/`; nothing outside it is removed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use crate::build;
use crate::jobs::{Job, Outcome, Pool};
use crate::metadata::Workspace;
use crate::results;
use crate::servers::Servers;

/// Threads of each test binary. The tests mostly wait (on TTLs, timeouts
/// and server processes); their bounds come from the leases, not from how
/// fast this machine is, so they hold with every core busy.
const TEST_THREADS: &str = "8";

/// Jobs that run at once: the slow ones start first and the small test
/// binaries fill in beside them.
const PARALLEL_JOBS: usize = 8;

/// How much of a failed job's log is shown.
const SHOWN_LOG_BYTES: usize = 20_000;

/// The command line of `cargo xtask test`.
#[derive(Debug)]
pub struct Options {
    checks: bool,
    repeat: u32,
}

impl Options {
    /// `[--checks] [--repeat N]`.
    pub fn parse(arguments: &[String]) -> Result<Self, String> {
        let mut options = Self {
            checks: false,
            repeat: 1,
        };
        let mut arguments = arguments.iter();
        while let Some(argument) = arguments.next() {
            match argument.as_str() {
                "--checks" => options.checks = true,
                "--repeat" => {
                    options.repeat = arguments
                        .next()
                        .and_then(|count| count.parse().ok())
                        .filter(|&count| count > 0)
                        .ok_or("--repeat takes a number of rounds, 1 or more")?;
                }
                other => return Err(format!("test: unknown argument {other}")),
            }
        }
        Ok(options)
    }
}

/// Runs the suite; `Ok(false)` when a test, a job or the lints failed.
pub fn run(options: Options) -> Result<bool, String> {
    let workspace = Workspace::load()?;
    let env = cargo_env(&workspace.root)?;
    let started = Instant::now();
    let servers = Arc::new(Servers::start(&workspace.root));
    let logs = log_dir(&workspace.target)?;
    let pool = Pool::new(PARALLEL_JOBS);
    let log_of = |round: u32, job: &Job| logs.join(format!("{round}-{}.log", file_name(&job.name)));

    let mut first_round: Vec<Receiver<Outcome>> = Vec::new();
    if options.checks {
        let job = packages_job(&workspace.root, &env);
        first_round.push(pool.submit(job.clone(), log_of(1, &job), &servers));
    }
    let mut started_early = Vec::new();
    let binaries = build(&workspace.root, &env, |job| {
        first_round.push(pool.submit(job.clone(), log_of(1, &job), &servers));
        started_early.push(job.name);
    })?;
    eprintln!(
        "xtask: built and linted {} test binaries in {:.0} s",
        binaries.len(),
        started.elapsed().as_secs_f64()
    );

    let mut report = Report::default();
    for round in 1..=options.repeat {
        let mut jobs = cargo_jobs(&workspace.root, &env, options.checks && round == 1);
        jobs.extend(
            binaries
                .iter()
                .filter(|job| round > 1 || !started_early.contains(&job.name))
                .cloned(),
        );
        // The slowest first, so that they start at once.
        jobs.sort_by_key(|job| !(job.name.starts_with("suite") || job.name.starts_with("docs")));
        let round_started = Instant::now();
        let mut running = if round == 1 {
            std::mem::take(&mut first_round)
        } else {
            Vec::new()
        };
        running.extend(jobs.into_iter().map(|job| {
            let log = log_of(round, &job);
            pool.submit(job, log, &servers)
        }));
        for outcome in running {
            let outcome = outcome
                .recv()
                .map_err(|_| "a job's thread panicked".to_owned())?;
            report.add(round, &outcome, options.repeat == 1);
        }
        eprintln!(
            "xtask: round {round} took {:.0} s",
            round_started.elapsed().as_secs_f64()
        );
    }
    drop(pool);
    Ok(report.print(options.repeat))
}

/// The environment of every job: clippy compiles the workspace's crates, so
/// the build lints. With rustup, the toolchain rust-toolchain.toml pins is
/// named in RUSTUP_TOOLCHAIN: trybuild's cargo, run from its project under
/// the target directory, would otherwise get rustup's default toolchain.
fn cargo_env(root: &Path) -> Result<Vec<(String, String)>, String> {
    if Command::new("clippy-driver")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err(
            "clippy-driver not found; install clippy with 'rustup component add clippy'".to_owned(),
        );
    }
    let mut env = vec![(
        "RUSTC_WORKSPACE_WRAPPER".to_owned(),
        "clippy-driver".to_owned(),
    )];
    if std::env::var_os("RUSTUP_TOOLCHAIN").is_none()
        && let Ok(output) = Command::new("rustup")
            .args(["show", "active-toolchain"])
            .current_dir(root)
            .output()
        && let Some(active) = String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .next()
    {
        env.push(("RUSTUP_TOOLCHAIN".to_owned(), active.to_owned()));
    }
    Ok(env)
}

/// `xtask-logs/` under the target directory, emptied of the last run's logs.
fn log_dir(target: &Path) -> Result<PathBuf, String> {
    let logs = target.join("xtask-logs");
    if logs.exists() {
        std::fs::remove_dir_all(&logs)
            .map_err(|error| format!("cannot empty {}: {error}", logs.display()))?;
    }
    std::fs::create_dir_all(&logs)
        .map_err(|error| format!("cannot create {}: {error}", logs.display()))?;
    Ok(logs)
}

fn file_name(job: &str) -> String {
    job.chars()
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect()
}

/// Every publishable crate packaged, then built from its package alone, and
/// the runtime's unit tests run and linted without features, in a target
/// directory of its own: it needs nothing of the build and starts with it,
/// on the cores it leaves idle.
fn packages_job(root: &Path, env: &[(String, String)]) -> Job {
    Job {
        name: "packages".to_owned(),
        argv: vec![
            "scripts/check-packages".to_owned(),
            "--message-format=json".to_owned(),
        ],
        cwd: root.to_owned(),
        env: env.to_vec(),
        needs_servers: false,
    }
}

/// The cargo commands that run beside the test binaries, on the build's
/// target directory: the doctests, and with `docs` the documentation.
fn cargo_jobs(root: &Path, env: &[(String, String)], docs: bool) -> Vec<Job> {
    let cargo = |name: &str, arguments: &[&str], extra: Option<(&str, &str)>| {
        let mut env = env.to_vec();
        env.extend(extra.map(|(key, value)| (key.to_owned(), value.to_owned())));
        Job {
            name: name.to_owned(),
            argv: std::iter::once("cargo")
                .chain(arguments.iter().copied())
                .map(str::to_owned)
                .collect(),
            cwd: root.to_owned(),
            env,
            needs_servers: false,
        }
    };
    let mut jobs = vec![cargo(
        "doctests",
        &["test", "--workspace", "--doc", "--all-features"],
        None,
    )];
    if docs {
        jobs.push(cargo(
            "docs",
            &["doc", "--workspace", "--all-features", "--no-deps"],
            Some(("RUSTDOCFLAGS", "-D warnings")),
        ));
    }
    jobs
}

/// Builds (and lints) every test target once; returns a job per test
/// binary. Hands trybuild's job to `start` as soon as cargo has linked it:
/// its cases need no server and nothing else of the build.
fn build(
    root: &Path,
    env: &[(String, String)],
    mut start: impl FnMut(Job),
) -> Result<Vec<Job>, String> {
    let library_path = build::library_path(root)?;
    let mut jobs = Vec::new();
    build::test_binaries(
        root,
        &["--workspace", "--all-targets", "--all-features"],
        env,
        |binary| {
            let trybuild = binary
                .package_dir
                .file_name()
                .is_some_and(|name| name == "ui-tests");
            let mut job_env = env.to_vec();
            job_env.push((
                "CARGO_MANIFEST_DIR".to_owned(),
                binary.package_dir.display().to_string(),
            ));
            job_env.push(("LD_LIBRARY_PATH".to_owned(), library_path.clone()));
            let mut argv = vec![
                binary.executable,
                "--test-threads".to_owned(),
                TEST_THREADS.to_owned(),
            ];
            if !trybuild {
                // libtest's per-test durations are behind -Z unstable-options,
                // which a stable-built test binary accepts with RUSTC_BOOTSTRAP
                // in its environment. Not for trybuild, whose cargo must not
                // see it (it would rebuild what depends on it).
                job_env.push(("RUSTC_BOOTSTRAP".to_owned(), "1".to_owned()));
                argv.extend(["-Z", "unstable-options", "--report-time"].map(str::to_owned));
            }
            let job = Job {
                name: binary.name,
                argv,
                cwd: binary.package_dir,
                env: job_env,
                // trybuild's cases start no server.
                needs_servers: !trybuild,
            };
            if trybuild {
                start(job.clone());
            }
            jobs.push(job);
        },
    )?;
    Ok(jobs)
}

/// What the rounds found, printed at the end.
#[derive(Debug, Default)]
struct Report {
    passed: u64,
    failed: u64,
    /// What failed (`job: test`, or `job: exited with ...`) and how often.
    failures: BTreeMap<String, u32>,
    /// Each test's longest time over the rounds.
    durations: BTreeMap<String, f64>,
}

impl Report {
    /// Counts one job's outcome and prints its line (and with `show_log`,
    /// its log when it failed).
    fn add(&mut self, round: u32, outcome: &Outcome, show_log: bool) {
        let found = results::read(&outcome.log);
        self.passed += found.passed;
        self.failed += found.failed;
        let mut failed_here = false;
        for test in &found.tests {
            let longest = self.durations.entry(test.name.clone()).or_default();
            *longest = longest.max(test.seconds);
            if test.failed {
                failed_here = true;
                *self
                    .failures
                    .entry(format!("{}: {}", outcome.job.name, test.name))
                    .or_default() += 1;
            }
        }
        for rendered in &found.warnings {
            eprint!("{rendered}");
        }
        let ok = outcome.success && found.warnings.is_empty();
        if !ok && !failed_here {
            let what = format!(
                "{}: exited with {}, {} warnings",
                outcome.job.name,
                outcome
                    .code
                    .map_or_else(|| "no code".to_owned(), |code| code.to_string()),
                found.warnings.len()
            );
            *self.failures.entry(what).or_default() += 1;
            self.failed += 1;
        }
        let status = if ok {
            "ok".to_owned()
        } else {
            format!("FAILED, log: {}", outcome.log.display())
        };
        eprintln!(
            "xtask: round {round} {:<40} {:6.1} s  {:4} passed  {status}",
            outcome.job.name, outcome.seconds, found.passed
        );
        if !ok && show_log {
            let text = std::fs::read(&outcome.log).unwrap_or_default();
            let tail = &text[text.len().saturating_sub(SHOWN_LOG_BYTES)..];
            let _ = std::io::stderr().write_all(String::from_utf8_lossy(tail).as_bytes());
        }
    }

    /// Prints the slowest tests, what failed, and the totals; whether all
    /// passed.
    fn print(&self, rounds: u32) -> bool {
        eprintln!("\nxtask: the 10 slowest tests");
        let mut slowest: Vec<_> = self.durations.iter().collect();
        slowest.sort_by(|a, b| b.1.total_cmp(a.1));
        for (name, seconds) in slowest.into_iter().take(10) {
            eprintln!("  {seconds:7.2} s  {name}");
        }
        if !self.failures.is_empty() {
            eprintln!("\nxtask: what failed, with how often (of {rounds} rounds)");
            let mut failures: Vec<_> = self.failures.iter().collect();
            failures.sort_by_key(|&(_, count)| std::cmp::Reverse(*count));
            for (name, count) in failures {
                eprintln!("  {count}x  {name}");
            }
        }
        println!("{} passed, {} failed", self.passed, self.failed);
        self.failures.is_empty()
    }
}
