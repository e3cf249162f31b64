//! `cargo xtask`: the project's own tasks, in Rust with std and serde_json.
//!
//! - `cargo xtask test [--checks] [--repeat N]`: the whole suite (what
//!   `scripts/test` and `scripts/soak` run): one build of every target,
//!   linted by clippy, then every test binary side by side (`suite`).
//! - `cargo xtask quick [FILTER]`: the in-memory loop, the runtime's unit
//!   tests and the suite's in-memory cases (`quick`).
//! - `cargo xtask circles [--update]`: lists every circle of `use` imports
//!   between the workspace's files (`circles`).

mod build;
mod circles;
mod jobs;
mod metadata;
mod quick;
mod results;
mod servers;
mod suite;

use std::process::ExitCode;

const USAGE: &str =
    "usage: cargo xtask test [--checks] [--repeat N] | quick [FILTER] | circles [--update]";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match arguments.first().map(String::as_str) {
        Some("test") => suite::Options::parse(&arguments[1..]).and_then(suite::run),
        Some("quick") => quick::run(arguments.get(1).map(String::as_str)),
        Some("circles") if arguments.len() == 1 => circles::run(false),
        Some("circles") if arguments[1..] == ["--update"] => circles::run(true),
        _ => Err(USAGE.to_owned()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
