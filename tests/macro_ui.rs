//! Compile-time behaviour of `#[distributed_lock]`: what it accepts
//! (`tests/ui/pass`) and the errors it reports (`tests/ui/fail`, checked
//! against the `.stderr` next to each case).
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! --test macro_ui` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
