//! Compile-time behaviour of `#[transactional]` and of `#[distributed_lock]`
//! stacked with it: what they accept (`tests/ui/pass/sqlx`) and the errors
//! they report (`tests/ui/fail/sqlx`, checked against the `.stderr` next to
//! each case). These cases need the `sqlx` feature; the lint against open
//! transactions without sqlx types is checked by `tests/macro_ui.rs`.
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! --features sqlx --test transactional_ui` and review the diff.
#![cfg(feature = "sqlx")]

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/sqlx/*.rs");
    cases.compile_fail("tests/ui/fail/sqlx/*.rs");
}
