//! The figures of a run and the Markdown tables they are printed in: one
//! column per subject and the first subject's figure divided by each other
//! one's; then where each subject's Redis command time goes.

use std::time::Duration;

use crate::catalog::{Figure, Table};
use crate::measure::Run;
use crate::workloads::most_ahead;

impl Figure {
    fn label(self) -> &'static str {
        match self {
            Figure::CyclesPerSec => "cycles/s",
            Figure::CycleP50 => "cycle p50",
            Figure::CycleP99 => "cycle p99",
            Figure::AcquireP50 => "acquire p50",
            Figure::AcquireP99 => "acquire p99",
            Figure::AcquireMax => "acquire max",
            Figure::MostAhead => {
                "most holds ahead of one acquisition (in arrival order: tasks - 1)"
            }
            Figure::HandoffP50 => "hand-off p50 (release sent → next holder holds)",
            Figure::HandoffP99 => "hand-off p99",
            Figure::FirstSecondMin => "cycles in 1st s, least served task",
            Figure::FirstSecondMax => "cycles in 1st s, most served task",
            Figure::ClientCpu => "client CPU/cycle",
            Figure::ServerCpu => "Redis CPU/cycle (INFO cpu)",
            Figure::CommandTime => "Redis command time/cycle (commandstats)",
            Figure::Commands => "commands/cycle (incl. inside scripts)",
            Figure::CommandsSent => "commands sent/cycle (round trips unless pipelined)",
        }
    }

    /// The number the ratios are taken of; NaN when not measured.
    fn value(self, run: &Run) -> f64 {
        let timings = &run.timings;
        let seconds = |value: Option<Duration>| value.map_or(f64::NAN, |d| d.as_secs_f64());
        match self {
            Figure::CyclesPerSec => run.cycles_per_sec(),
            Figure::CycleP50 => seconds(percentile(&timings.cycle_times, 0.50)),
            Figure::CycleP99 => seconds(percentile(&timings.cycle_times, 0.99)),
            Figure::AcquireP50 => seconds(percentile(&timings.waits, 0.50)),
            Figure::AcquireP99 => seconds(percentile(&timings.waits, 0.99)),
            Figure::AcquireMax => seconds(percentile(&timings.waits, 1.0)),
            Figure::MostAhead => {
                most_ahead(&mut timings.holds.clone()).map_or(f64::NAN, |most| most as f64)
            }
            Figure::HandoffP50 => seconds(percentile(&timings.handoffs, 0.50)),
            Figure::HandoffP99 => seconds(percentile(&timings.handoffs, 0.99)),
            Figure::FirstSecondMin => timings
                .first_second
                .iter()
                .min()
                .map_or(f64::NAN, |&n| n as f64),
            Figure::FirstSecondMax => timings
                .first_second
                .iter()
                .max()
                .map_or(f64::NAN, |&n| n as f64),
            Figure::ClientCpu => run.client_cpu.map_or(f64::NAN, |cpu| run.per_cycle(cpu)),
            Figure::ServerCpu => run.per_cycle(run.server_cpu),
            Figure::CommandTime => {
                let usec: f64 = run
                    .commands
                    .iter()
                    .map(|(name, stat)| stat.usec as f64 * run.accounting.sent_share(name))
                    .sum();
                usec * 1e-6 / timings.cycles as f64
            }
            Figure::Commands => {
                run.commands.values().map(|stat| stat.calls).sum::<u64>() as f64
                    / timings.cycles as f64
            }
            Figure::CommandsSent => run.accounting.sent_per_cycle(),
        }
    }

    /// The figure as a table cell.
    pub fn show(self, run: &Run) -> String {
        let value = self.value(run);
        match self {
            Figure::CyclesPerSec
            | Figure::FirstSecondMin
            | Figure::FirstSecondMax
            | Figure::MostAhead => {
                if value.is_nan() {
                    "n/a".to_owned()
                } else {
                    format!("{value:.0}")
                }
            }
            Figure::Commands | Figure::CommandsSent => format!("{value:.2}"),
            Figure::CycleP50
            | Figure::CycleP99
            | Figure::AcquireP50
            | Figure::AcquireP99
            | Figure::AcquireMax
            | Figure::HandoffP50
            | Figure::HandoffP99
            | Figure::ClientCpu
            | Figure::ServerCpu
            | Figure::CommandTime => show_seconds(value),
        }
    }
}

impl Run {
    /// Cycles completed by all tasks per second of the run.
    pub fn cycles_per_sec(&self) -> f64 {
        self.timings.cycles as f64 / self.timings.elapsed.as_secs_f64()
    }

    /// `total` divided by the run's cycles, in seconds.
    fn per_cycle(&self, total: Duration) -> f64 {
        total.as_secs_f64() / self.timings.cycles as f64
    }
}

/// Prints `table` with the best run of each subject per workload (`results`
/// in the order of `table.workloads`, each in the order of `table.subjects`).
/// Workloads that did not run (see `LOCK_BENCH_ONLY`) are left out, and so
/// is a table none of whose workloads ran.
pub fn print_table(table: &Table, results: &[Vec<Run>]) {
    if results.iter().all(Vec::is_empty) {
        return;
    }
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
        if runs.is_empty() {
            continue;
        }
        for figure in workload.figures {
            let mut row = format!("| {} | {} |", workload.name, figure.label());
            for run in runs {
                row += &format!(" {} |", figure.show(run));
            }
            for run in &runs[1..] {
                let ratio = figure.value(&runs[0]) / figure.value(run);
                if ratio.is_finite() {
                    row += &format!(" {ratio:.2} |");
                } else {
                    row += " n/a |";
                }
            }
            println!("{row}");
        }
    }
    println!();
}

/// Prints, per workload and subject of every table, the commands Redis ran
/// per cycle with their calls and time, largest time first.
pub fn print_command_time(tables: &[Table], results: &[Vec<Vec<Run>>]) {
    println!(
        "Where the Redis command time goes (`INFO commandstats`): per command, \
         calls per cycle × µs per call. * = sent by clients, wholly or in part (the \
         rest ran inside scripts), as counted in a run under MONITOR; a script's \
         time includes the commands it runs, which are listed too. The command \
         time per cycle sums what clients sent: a command's time in the share \
         clients sent.\n"
    );
    println!("| workload | subject | command time/cycle | by command |\n|---|---|--:|---|");
    for (table, table_runs) in tables.iter().zip(results) {
        for (workload, runs) in table.workloads.iter().zip(table_runs) {
            for (subject, run) in table.subjects.iter().zip(runs) {
                let mut by_time: Vec<_> = run.commands.iter().collect();
                by_time.sort_by(|a, b| b.1.usec.cmp(&a.1.usec).then(a.0.cmp(b.0)));
                let detail: Vec<String> = by_time
                    .iter()
                    .map(|(name, stat)| {
                        format!(
                            "{name}{} {:.2} × {:.2} µs",
                            if run.accounting.sent_share(name) > 0.0 {
                                "*"
                            } else {
                                ""
                            },
                            stat.calls as f64 / run.timings.cycles as f64,
                            stat.usec as f64 / stat.calls.max(1) as f64,
                        )
                    })
                    .collect();
                println!(
                    "| {} | {} | {} | {} |",
                    workload.name,
                    subject.label(),
                    Figure::CommandTime.show(run),
                    detail.join(", ")
                );
            }
        }
    }
    println!();
}

/// Nearest-rank percentile of sorted durations; `q = 1.0` is the maximum;
/// `None` when there are none.
fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// Seconds as µs (one decimal below 100 µs) or ms; `n/a` for NaN.
fn show_seconds(seconds: f64) -> String {
    if seconds.is_nan() {
        "n/a".to_owned()
    } else if seconds < 100e-6 {
        format!("{:.1} µs", seconds * 1e6)
    } else if seconds < 1e-3 {
        format!("{:.0} µs", seconds * 1e6)
    } else {
        format!("{:.2} ms", seconds * 1e3)
    }
}
