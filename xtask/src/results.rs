//! What a job's log says: libtest's result line of each test (with its
//! time under `--report-time`), the `test result:` counts, and the
//! warnings and errors of the workspace's own code in cargo's JSON lines.

use std::path::Path;

/// One test's line: `test NAME ... ok <0.5s>`.
#[derive(Debug)]
pub struct TestResult {
    /// The test's path, e.g. `conformance::memory::waiter_is_woken`.
    pub name: String,
    /// Whether libtest printed `FAILED`.
    pub failed: bool,
    /// Its time in seconds, 0 when libtest printed none.
    pub seconds: f64,
}

/// Everything read from one log.
#[derive(Debug, Default)]
pub struct LogResults {
    /// Each test's line.
    pub tests: Vec<TestResult>,
    /// The sum of the `test result:` lines' passed counts.
    pub passed: u64,
    /// The sum of their failed counts.
    pub failed: u64,
    /// The rendered warnings and errors of the workspace's code.
    pub warnings: Vec<String>,
}

/// Reads `log`; an unreadable log reads as empty (its job's exit code
/// still counts).
pub fn read(log: &Path) -> LogResults {
    let bytes = std::fs::read(log).unwrap_or_default();
    let mut results = LogResults::default();
    for line in String::from_utf8_lossy(&bytes).lines() {
        if let Some(rendered) = workspace_diagnostic(line) {
            results.warnings.push(rendered);
        } else if let Some(test) = test_line(line) {
            results.tests.push(test);
        } else if let Some((passed, failed)) = summary_line(line) {
            results.passed += passed;
            results.failed += failed;
        }
    }
    results
}

/// The rendered warning or error of the workspace's own code in a JSON
/// line of cargo (`--message-format=json`), else `None`.
pub fn workspace_diagnostic(line: &str) -> Option<String> {
    if !line.starts_with('{') {
        return None;
    }
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    let ours = message["package_id"].as_str()?.starts_with("path+file://");
    let level = message["message"]["level"].as_str()?;
    (message["reason"] == "compiler-message" && ours && matches!(level, "warning" | "error")).then(
        || {
            message["message"]["rendered"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        },
    )
}

/// `test NAME ... ok`, `test NAME - should panic ... FAILED <1.2s>`.
fn test_line(line: &str) -> Option<TestResult> {
    let rest = line.strip_prefix("test ")?;
    let (head, tail) = rest.split_once(" ... ")?;
    let name = head.split(' ').next()?;
    let (outcome, time) = match tail.split_once(' ') {
        Some((outcome, time)) => (outcome, Some(time)),
        None => (tail, None),
    };
    if !matches!(outcome, "ok" | "FAILED" | "ignored") {
        return None;
    }
    let seconds = match time {
        Some(time) => time.strip_prefix('<')?.strip_suffix("s>")?.parse().ok()?,
        None => 0.0,
    };
    Some(TestResult {
        name: name.to_owned(),
        failed: outcome == "FAILED",
        seconds,
    })
}

/// `test result: ok. 12 passed; 1 failed; ...`: the passed and failed counts.
fn summary_line(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let (_, counts) = rest.split_once(". ")?;
    let mut parts = counts.split("; ");
    let passed = parts.next()?.strip_suffix(" passed")?.parse().ok()?;
    let failed = parts.next()?.strip_suffix(" failed")?.parse().ok()?;
    Some((passed, failed))
}

#[cfg(test)]
mod tests {
    use super::{summary_line, test_line};

    #[test]
    fn reads_libtest_lines() {
        let test = test_line("test a::b ... FAILED <1.25s>").unwrap();
        assert_eq!(
            (test.name.as_str(), test.failed, test.seconds),
            ("a::b", true, 1.25)
        );
        let test = test_line("test src/lib.rs - f (line 3) ... ok").unwrap();
        assert_eq!((test.name.as_str(), test.failed), ("src/lib.rs", false));
        assert!(test_line("test a ... running for over 60 seconds").is_none());
        assert_eq!(
            summary_line("test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"),
            Some((3, 2))
        );
    }
}
