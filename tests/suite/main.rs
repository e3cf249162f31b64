//! The integration suite, in one binary as cargo's own `tests/testsuite` is:
//! one link instead of one per file, and
//! the tests of every file run concurrently, sharing one Sentinel topology and
//! one Redis Cluster while they overlap (see `support::sentinel` and
//! `support::cluster`). Each file is a module named after the behaviour it
//! covers, so `cargo test --test suite conformance::memory::` runs one
//! file's in-memory cases.
//!
//! Two tests keep binaries of their own because they change process-wide
//! state: `macro_install.rs` (the default manager) and `metrics.rs` (the
//! metrics recorder).

/// The suite's helpers: the `leasehold-test-support` crate, and the
/// `#[transactional]` tests' own (`sql`), which need a database.
mod support {
    pub use leasehold_test_support::*;

    leasehold_test_support::server_tests! {
        #[cfg(any(feature = "sqlite", feature = "postgres"))]
        pub use crate::sql::*;
    }
}

mod cancellation;
mod conformance;
mod conformance_mutex;
mod conformance_shared;
mod operations;
mod shutdown;

// The modules without in-memory cases, which the in-memory loop
// (`cargo xtask quick`) leaves out.
leasehold_test_support::server_tests! {
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    mod sql;
    mod acl;
    mod auth;
    mod batch_renewal;
    mod check;
    mod cluster;
    mod cluster_batches;
    mod cluster_lock_delay;
    mod computed_settings;
    mod empty_key;
    mod failover;
    mod fault_proxy;
    mod fencing;
    mod future_size;
    mod handoff;
    mod leader;
    mod lock_delay;
    mod lock_delay_sessions;
    mod macro_expansion;
    mod macro_runtime;
    mod macro_shapes;
    mod multi_key;
    mod native;
    mod one_holder;
    mod partition;
    mod partition_shared;
    mod redis_backend;
    mod redlock;
    mod rwlock;
    mod scheduled;
    mod semaphore;
    mod sentinel;
    #[cfg(feature = "serde")]
    mod settings_file;
    mod skipping;
    mod tls;
    mod transactional;
    mod transactional_order;
    mod transactional_postgres;
    mod transactional_sqlite_default;
    mod waiting;
}
