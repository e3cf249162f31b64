//! Rounds: each workload runs through each subject in turn, with the Redis
//! and CPU counters taken around every run, and the best run of each subject
//! is kept.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::catalog::{Figure, Workload};
use crate::cpu::process_cpu;
use crate::monitor::{self, Accounting};
use crate::redis_stats::CommandStat;
use crate::subjects::Side;
use crate::workloads::{Baseline, Scale, Timings};

/// The measurements of one run of one workload through one subject.
#[derive(Debug)]
pub struct Run {
    pub timings: Timings,
    /// CPU time of the client side during the run: this process (all
    /// threads) plus its worker processes; `None` off Linux.
    pub client_cpu: Option<Duration>,
    /// CPU time the subject's Redis servers used during the run (`INFO cpu`).
    pub server_cpu: Duration,
    /// Calls and time per command during the run, on the subject's servers.
    pub commands: BTreeMap<String, CommandStat>,
    /// Who sent the commands, from one more run under MONITOR
    /// ([`monitor::account`]); set on the run that is reported.
    pub accounting: Accounting,
}

/// Runs `workload` its number of rounds through each side, and returns the
/// fastest run of each by cycles/s, in the order of `sides`. Each round
/// starts with another side and goes on in turn (with two sides: the second
/// first on even rounds), so that slow phases of a shared machine hit all.
/// Fastest, not median: other processes only ever slow a run down, so the
/// fastest run is the one least disturbed.
pub async fn measure(workload: &Workload, sides: &[Side], scale: Scale) -> Vec<Run> {
    let rounds = scale.rounds(workload.rounds);
    let mut runs: Vec<Vec<Run>> = sides.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let first = sides.len() - 1 - round % sides.len();
        for index in (0..sides.len()).map(|k| (first + k) % sides.len()) {
            let side = &sides[index];
            let run = run_once(workload, side, scale).await;
            eprintln!(
                "{} round {round} {}: {:.0} cycles/s, acquire max {}, \
                 cycles in 1st s per task {}-{}",
                workload.name,
                side.subject.label(),
                run.cycles_per_sec(),
                Figure::AcquireMax.show(&run),
                Figure::FirstSecondMin.show(&run),
                Figure::FirstSecondMax.show(&run),
            );
            runs[index].push(run);
        }
    }
    let mut best = Vec::with_capacity(sides.len());
    for (runs, side) in runs.into_iter().zip(sides) {
        let mut run = runs
            .into_iter()
            .max_by(|a, b| a.cycles_per_sec().total_cmp(&b.cycles_per_sec()))
            .expect("every workload runs at least once");
        run.accounting = monitor::account(workload, side, scale).await;
        best.push(run);
    }
    best
}

/// One run of `workload` through `side`, with the counters around it
/// (from the workload's own [`Timings::baseline`] if it took one).
async fn run_once(workload: &Workload, side: &Side, scale: Scale) -> Run {
    let mut servers = side.servers.clone();
    tokio::time::sleep(scale.settle()).await;
    let before = Baseline::take(&mut servers).await;
    let timings = (workload.run)(side.clone(), scale).await;
    let before = timings.baseline.unwrap_or(before);
    let commands = servers.commands().await;
    let server_cpu = servers.cpu().await.saturating_sub(before.server_cpu);
    let client_cpu = process_cpu()
        .zip(before.client_cpu)
        .map(|(after, before)| after.saturating_sub(before) + timings.worker_cpu);
    Run {
        timings,
        client_cpu,
        server_cpu,
        commands,
        accounting: Accounting::default(),
    }
}
