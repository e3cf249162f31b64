//! One cargo build of test binaries, read from cargo's JSON messages: each
//! binary as it is linked, and the warnings of the workspace's own code.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::results;

/// A test binary cargo linked.
#[derive(Debug)]
pub struct Binary {
    /// Its target and kind, e.g. `suite (test)`.
    pub name: String,
    /// Its path.
    pub executable: String,
    /// Its package's folder, where cargo would run it.
    pub package_dir: PathBuf,
}

/// Runs `cargo test --no-run` with `selection` and `env`, handing each test
/// binary to `linked` as cargo links it; prints the workspace's warnings and
/// errors, and fails when there is any or the build fails.
pub fn test_binaries(
    root: &Path,
    selection: &[&str],
    env: &[(String, String)],
    mut linked: impl FnMut(Binary),
) -> Result<(), String> {
    let mut cargo = Command::new("cargo");
    let mut cargo = without_run_env(&mut cargo)
        .args(["test", "--no-run", "--message-format=json"])
        .args(selection)
        .current_dir(root)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run cargo: {error}"))?;
    let mut warnings = 0;
    let stdout = cargo.stdout.take().ok_or("cargo's output is not piped")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|error| format!("cannot read cargo's output: {error}"))?;
        if let Some(rendered) = results::workspace_diagnostic(&line) {
            eprint!("{rendered}");
            warnings += 1;
        } else if let Some(binary) = test_binary(&line) {
            linked(binary);
        }
    }
    let status = cargo
        .wait()
        .map_err(|error| format!("cargo did not finish: {error}"))?;
    if !status.success() || warnings > 0 {
        return Err(format!(
            "the build failed or warned ({warnings} diagnostics)"
        ));
    }
    Ok(())
}

/// `command` without the variables `cargo run` set for this xtask (its
/// package's `CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). A cargo started
/// with them reruns the build scripts that watch them (ring's does), and
/// then rebuilds what depends on those crates (rustls, redis, ...): a
/// plain `cargo test` after `cargo xtask` would rebuild them back.
pub fn without_run_env(command: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_by_run = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
            || key == "CARGO_PRIMARY_PACKAGE"
            || key == "OUT_DIR";
        if set_by_run {
            command.env_remove(&*key);
        }
    }
    command
}

/// The test binary a `compiler-artifact` line announces, else `None`.
fn test_binary(line: &str) -> Option<Binary> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let target = &message["target"];
    Some(Binary {
        name: format!(
            "{} ({})",
            target["name"].as_str()?,
            target["kind"][0].as_str()?
        ),
        executable: message["executable"].as_str()?.to_owned(),
        package_dir: Path::new(message["manifest_path"].as_str()?)
            .parent()?
            .to_owned(),
    })
}

/// `LD_LIBRARY_PATH` for the test binaries, as cargo sets it: a proc-macro
/// crate's unit tests link the standard library dynamically, from the
/// toolchain's target libdir.
pub fn library_path(root: &Path) -> Result<String, String> {
    let output = Command::new("rustc")
        .args(["--print", "target-libdir"])
        .current_dir(root)
        .output()
        .map_err(|error| format!("cannot run rustc: {error}"))?;
    let libdir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok(match std::env::var("LD_LIBRARY_PATH") {
        Ok(path) if !path.is_empty() => format!("{libdir}:{path}"),
        _ => libdir,
    })
}
