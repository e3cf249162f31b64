//! Compile-time behaviour of `#[distributed_lock]` and `#[transactional]`:
//! what they accept (`tests/ui/pass`) and the errors they report
//! (`tests/ui/fail`, checked against the `.stderr` next to each case). The
//! cases under `sqlx/` need the `sqlx` feature (on by default); the lint
//! against open transactions without sqlx types is checked without it. One
//! test, so that trybuild builds every case in one project, once.
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! -p leasehold-ui-tests` and review the diff: each error must point at
//! the user's code.
//!
//! The snapshots were written with rustc 1.95.0, the toolchain that
//! `rust-toolchain.toml` pins; another compiler may word messages differently.

#[test]
fn ui() {
    // The cases are compiled by plain rustc, as users' code is: the
    // workspace's `.cargo/config.toml` (which trybuild's project, under
    // `target/`, also finds) has clippy compile its crates, and clippy prints
    // type paths in full, unlike the snapshots. An empty value turns it off.
    std::env::set_var("RUSTC_WORKSPACE_WRAPPER", "");
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
    #[cfg(feature = "sqlx")]
    {
        cases.pass("tests/ui/pass/sqlx/*.rs");
        cases.compile_fail("tests/ui/fail/sqlx/*.rs");
    }
}
