//! Compile-time behaviour of `#[transactional]` and of `#[distributed_lock]`
//! stacked with it: what they accept (`tests/ui/pass/sqlx`) and the errors
//! they report (`tests/ui/fail/sqlx`, checked against the `.stderr` next to
//! each case). These cases need the `sqlx` feature (on by default); the lint
//! against open transactions without sqlx types is checked by `lock_ui.rs`.
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! -p distributed-lock-ui-tests` and review the diff.
//!
//! The snapshots were written with rustc 1.95.0, the toolchain of the
//! project's machines and CI; another compiler may word messages differently.
#![cfg(feature = "sqlx")]

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/sqlx/*.rs");
    cases.compile_fail("tests/ui/fail/sqlx/*.rs");
}
