//! `dlock doctor`: the library's own check of a deployment
//! (`LockManager::check`) for an operator: each node, the risks to the
//! lock's guarantees, and the verdict, also as the exit code.

use leasehold::{CheckReport, LockManager, NodeReport, Risk, Verdict};
use serde::Serialize;

use crate::failure::Failure;
use crate::locks;

/// Checks the deployment of `manager` and prints the report (as JSON with
/// `json`). Healthy is `Ok`; at risk or degraded is a [`Failure::Verdict`],
/// whose exit code says which.
pub async fn run(manager: &LockManager, json: bool) -> Result<(), Failure> {
    let report = manager.check().await?;
    if json {
        locks::print_json(&ReportJson::of(&report))?;
    } else {
        println!("{report}");
    }
    match report.verdict() {
        Verdict::Healthy => Ok(()),
        verdict => Err(Failure::Verdict(verdict)),
    }
}

/// The report as `--json` prints it.
#[derive(Serialize)]
struct ReportJson<'a> {
    deployment: &'a str,
    verdict: String,
    nodes: Vec<NodeJson<'a>>,
    risks: Vec<RiskJson>,
}

/// One node, as `--json` prints it.
#[derive(Serialize)]
struct NodeJson<'a> {
    address: &'a str,
    role: String,
    round_trip_ms: Option<f64>,
    server: Option<&'a str>,
    native: &'a [&'static str],
    failure: Option<String>,
}

/// One risk, as `--json` prints it: its kind, node and the whole advice.
#[derive(Serialize)]
struct RiskJson {
    kind: &'static str,
    message: String,
}

impl<'a> ReportJson<'a> {
    fn of(report: &'a CheckReport) -> Self {
        ReportJson {
            deployment: &report.deployment,
            verdict: report.verdict().to_string(),
            nodes: report.nodes.iter().map(NodeJson::of).collect(),
            risks: report
                .risks
                .iter()
                .map(|risk| RiskJson {
                    kind: kind_of(risk),
                    message: risk.to_string(),
                })
                .collect(),
        }
    }
}

impl<'a> NodeJson<'a> {
    fn of(node: &'a NodeReport) -> Self {
        NodeJson {
            address: &node.address,
            role: node.role.to_string(),
            round_trip_ms: node
                .round_trip
                .map(|round_trip| round_trip.as_secs_f64() * 1000.0),
            server: node.server.as_deref(),
            native: &node.native,
            failure: node.failure.as_ref().map(ToString::to_string),
        }
    }
}

/// A risk's kind, for programs that read `--json`.
fn kind_of(risk: &Risk) -> &'static str {
    match risk {
        Risk::Eviction { .. } => "eviction",
        Risk::AsyncReplication { .. } => "async_replication",
        Risk::NoAppendOnlyFile { .. } => "no_append_only_file",
        Risk::ClockJump { .. } => "clock_jump",
        Risk::SettingsUnreadable { .. } => "settings_unreadable",
        _ => "other",
    }
}
