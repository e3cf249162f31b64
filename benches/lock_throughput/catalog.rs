//! What the bench measures and shows: the tables, their workloads and the
//! figures their rows show. How a workload runs is in [`crate::measure`];
//! how a figure is read and printed, in [`crate::report`].

use std::future::Future;
use std::pin::Pin;

use crate::subjects::{Side, Subject};
use crate::workloads::{Scale, Timings};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One Markdown table: workloads measured through the same subjects.
pub struct Table {
    /// Printed above the table.
    pub title: &'static str,
    /// One column each; the ratios are the first over each of the others.
    pub subjects: &'static [Subject],
    pub workloads: &'static [Workload],
}

/// One workload: how to run it through one subject, how often, and which
/// figures its rows show.
pub struct Workload {
    pub name: &'static str,
    pub run: fn(Side, Scale) -> BoxFuture<Timings>,
    /// Runs per subject; the fastest is reported.
    pub rounds: usize,
    pub figures: &'static [Figure],
}

/// A figure of the table: one row per workload that shows it.
#[derive(Debug, Clone, Copy)]
pub enum Figure {
    CyclesPerSec,
    CycleP50,
    CycleP99,
    AcquireP50,
    AcquireP99,
    AcquireMax,
    MostAhead,
    HandoffP50,
    HandoffP99,
    FirstSecondMin,
    FirstSecondMax,
    ClientCpu,
    ServerCpu,
    CommandTime,
    Commands,
    CommandsSent,
}
