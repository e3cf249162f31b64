//! Compile-time behaviour of `#[distributed_lock]`: what it accepts
//! (`tests/ui/pass`) and the errors it reports (`tests/ui/fail`, checked
//! against the `.stderr` next to each case).
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! -p distributed-lock-ui-tests` and review the diff: each error must point at
//! the user's code.
//!
//! The snapshots were written with rustc 1.95.0, the toolchain of the
//! project's machines and CI; another compiler may word messages differently.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
