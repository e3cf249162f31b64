//! `cargo xtask quick [FILTER]`: the loop after an edit. Builds with rustc
//! (no clippy), in one cargo call, the runtime's unit tests and the suite,
//! then runs both side by side: every unit test, and the suite's cases
//! matching FILTER (`::memory::` by default: every behaviour on the
//! in-memory backend, no server; with a FILTER, the Valkey and Redis 8.6
//! paths are set as `cargo xtask test` sets them). Prints the build's and
//! each binary's time, and a failing binary's output.
//!
//! One loop for every filter: the runtime's unit tests bring its
//! dev-dependencies' features into the build, so a plain `cargo test
//! --test suite` builds other units than this command does. Without a
//! FILTER the suite is built with `--cfg leasehold_memory_only`, which
//! leaves its server-only modules and cases out (see `server_tests!` in
//! tests/support), in the `quick` profile's directory of its own: an edit
//! of the runtime then rebuilds a suite of about a hundred cases, not
//! fifteen hundred, and the whole suite's build is left as it was.

use std::sync::Arc;
use std::time::Instant;

use crate::build;
use crate::jobs::{Job, Pool};
use crate::metadata::Workspace;
use crate::results;
use crate::servers::Servers;

/// Threads of each binary on the in-memory cases: they mostly sleep
/// through TTLs, so the slowest one, not the count, bounds the run.
const MEMORY_THREADS: &str = "32";

/// Threads with a filter, as `cargo xtask test` runs: the cases on real
/// servers start processes and hold their bounds on a busy machine at that.
const SERVER_THREADS: &str = "8";

/// Runs the loop; `Ok(false)` when a test failed.
pub fn run(filter: Option<&str>) -> Result<bool, String> {
    let needs_servers = filter.is_some();
    let filter = filter.unwrap_or("::memory::");
    let workspace = Workspace::load()?;
    let library_path = build::library_path(&workspace.root)?;
    let started = Instant::now();
    let mut jobs = Vec::new();
    let mut selection = vec![
        "--all-features",
        "-p",
        "leasehold-runtime",
        "--lib",
        "-p",
        "leasehold",
        "--test",
        "suite",
    ];
    let mut env = Vec::new();
    if !needs_servers {
        selection.extend(["--profile", "quick"]);
        let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
        flags.push_str(" --cfg leasehold_memory_only");
        env.push(("RUSTFLAGS".to_owned(), flags.trim().to_owned()));
    }
    build::test_binaries(&workspace.root, &selection, &env, |binary| {
        let mut argv = vec![binary.executable];
        if binary.name.starts_with("suite") {
            argv.push(filter.to_owned());
        }
        let threads = if needs_servers {
            SERVER_THREADS
        } else {
            MEMORY_THREADS
        };
        argv.extend(["--test-threads".to_owned(), threads.to_owned()]);
        jobs.push(Job {
            name: binary.name,
            argv,
            env: vec![
                (
                    "CARGO_MANIFEST_DIR".to_owned(),
                    binary.package_dir.display().to_string(),
                ),
                ("LD_LIBRARY_PATH".to_owned(), library_path.clone()),
            ],
            cwd: binary.package_dir,
            needs_servers,
        });
    })?;
    let built = started.elapsed().as_secs_f64();
    let logs = workspace.target.join("xtask-logs");
    std::fs::create_dir_all(&logs)
        .map_err(|error| format!("cannot create {}: {error}", logs.display()))?;
    let servers = Arc::new(if needs_servers {
        Servers::start(&workspace.root)
    } else {
        Servers::none()
    });
    let pool = Pool::new(jobs.len().max(1));
    let running: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let log = logs.join(format!(
                "quick-{}.log",
                job.name.replace(|c: char| !c.is_alphanumeric(), "_")
            ));
            pool.submit(job, log, &servers)
        })
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for outcome in running {
        let outcome = outcome
            .recv()
            .map_err(|_| "a job's thread panicked".to_owned())?;
        let found = results::read(&outcome.log);
        passed += found.passed;
        failed += found.failed;
        eprintln!(
            "xtask: {:<32} {:5.1} s  {:4} passed  {}",
            outcome.job.name,
            outcome.seconds,
            found.passed,
            if outcome.success { "ok" } else { "FAILED" }
        );
        if !outcome.success {
            failed += u64::from(found.failed == 0);
            let text = std::fs::read(&outcome.log).unwrap_or_default();
            eprint!("{}", String::from_utf8_lossy(&text));
        }
    }
    eprintln!(
        "xtask: quick: built in {built:.1} s, {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    println!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}
