//! Compile-time tests of `#[distributed_lock]` and `#[transactional]`: the
//! cases that must compile are this crate's examples (`examples/`), the
//! errors are checked with trybuild from `tests/`. This library is empty:
//! the crate exists so that `cargo test -p leasehold-ui-tests` builds only
//! `leasehold` (and sqlx for the `#[transactional]` cases), not the root
//! crate's heavy dev-dependencies.
