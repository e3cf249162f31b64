//! What `cargo metadata` says of the workspace: its root, its target
//! directory and the root file of each of its crates.

use std::path::PathBuf;
use std::process::Command;

/// The workspace as cargo sees it (with this checkout's configuration).
#[derive(Debug)]
pub struct Workspace {
    /// The folder of the workspace's `Cargo.toml`.
    pub root: PathBuf,
    /// Where cargo builds (`CARGO_TARGET_DIR` or the configured one).
    pub target: PathBuf,
    /// The root source file of every target (lib, bin, test, bench,
    /// example) of every member: one crate each.
    pub crate_roots: Vec<PathBuf>,
}

impl Workspace {
    /// Asks cargo; an error names what failed.
    pub fn load() -> Result<Self, String> {
        let output = Command::new("cargo")
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .map_err(|error| format!("cannot run cargo metadata: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
            .map_err(|error| format!("cargo metadata printed no JSON: {error}"))?;
        let path = |key: &str| {
            metadata[key]
                .as_str()
                .map(PathBuf::from)
                .ok_or_else(|| format!("cargo metadata has no {key}"))
        };
        let crate_roots = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|package| package["targets"].as_array().into_iter().flatten())
            .filter(|target| {
                // Build scripts are crates of their own but import nothing
                // of the workspace.
                target["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().all(|kind| kind != "custom-build"))
            })
            .filter_map(|target| target["src_path"].as_str().map(PathBuf::from))
            .collect();
        Ok(Self {
            root: path("workspace_root")?,
            target: path("target_directory")?,
            crate_roots,
        })
    }
}
