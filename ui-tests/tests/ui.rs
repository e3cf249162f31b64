//! Compile-time errors of `#[distributed_lock]` and `#[transactional]`: each
//! case under `tests/ui/fail` must fail to compile with the `.stderr` next to
//! it. The cases under `sqlx/` need the `sqlx` feature (on by default); the
//! lint against open transactions without sqlx types is checked without it.
//! What the attributes accept is in `examples/`, which `cargo test` builds.
//! One test, so that trybuild checks every case in one project, once.
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! -p leasehold-ui-tests` and review the diff: each error must point at
//! the user's code.
//!
//! The snapshots were written with rustc 1.95.0, the toolchain that
//! `rust-toolchain.toml` pins; another compiler may word messages differently.

#[test]
fn ui() {
    // The cases are compiled by plain rustc, as users' code is:
    // `cargo xtask test` has clippy compile the workspace's crates
    // (RUSTC_WORKSPACE_WRAPPER), which trybuild's cargo would inherit, and
    // clippy prints type paths in full, unlike the snapshots. An empty value
    // turns it off.
    std::env::set_var("RUSTC_WORKSPACE_WRAPPER", "");
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    #[cfg(feature = "sqlx")]
    cases.compile_fail("tests/ui/fail/sqlx/*.rs");
}
