//! The `conformance!` macro: behaviour written once as `async fn NAME(h:
//! Harness)` and instantiated on every backend, as `redis::NAME` (a real
//! `redis-server` 7.0 of the test's own), `valkey::NAME` (the same on a
//! `valkey-server` 9.1), `redis8::NAME` (on a `redis-server` 8.6),
//! `sentinel::NAME` (the primary of the shared Sentinel topology),
//! `cluster::NAME` (the shared Redis Cluster) and `memory::NAME`
//! (`LockManager::in_memory()`); see [`Harness`](super::Harness).
//! `redis_acl::NAME` and `cluster_acl::NAME` run it again on one server and
//! on the shared cluster as a user granted only the guide's least-privilege
//! ACL (see `acl`).
//!
//! `on_every_engine!` instantiates `async fn NAME(engine: Engine)` once per
//! server program, and `tests_on!` is the one module of tests both are made
//! of.
//!
//! Invoke them in the test file that defines the behaviours, next to them:
//! `support::conformance!(first_behaviour, second_behaviour);`.

/// A module `MODULE` of one multi-threaded tokio test per `NAME`, each
/// running `super::NAME(ARGUMENT).await`: `tests_on!(MODULE, ARGUMENT,
/// [NAME, ...])`. The argument is evaluated inside each test (it may
/// `.await`). Built for the in-memory loop (`--cfg leasehold_memory_only`),
/// only a module named `memory` is made.
#[cfg(not(leasehold_memory_only))]
#[macro_export]
macro_rules! tests_on {
    ($module:ident, $argument:expr, [$($name:ident),* $(,)?]) => {
        $crate::test_module!($module, $argument, [$($name),*]);
    };
}

/// A module `MODULE` of one multi-threaded tokio test per `NAME`, each
/// running `super::NAME(ARGUMENT).await`: `tests_on!(MODULE, ARGUMENT,
/// [NAME, ...])`. The argument is evaluated inside each test (it may
/// `.await`). Built for the in-memory loop (`--cfg leasehold_memory_only`),
/// only a module named `memory` is made.
#[cfg(leasehold_memory_only)]
#[macro_export]
macro_rules! tests_on {
    (memory, $argument:expr, [$($name:ident),* $(,)?]) => {
        $crate::test_module!(memory, $argument, [$($name),*]);
    };
    // Still named (type-checked, never built into a test), so that what
    // only these cases use is not dead code in this build.
    ($module:ident, $argument:expr, [$($name:ident),* $(,)?]) => {
        mod $module {
            #[allow(dead_code)]
            async fn unbuilt() {
                $(super::$name($argument).await;)*
            }
        }
    };
}

/// The module [`tests_on!`] makes.
#[doc(hidden)]
#[macro_export]
macro_rules! test_module {
    ($module:ident, $argument:expr, [$($name:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($argument).await;
                }
            )*
        }
    };
}

/// The suite's modules that have no in-memory case: as they are, or left
/// out of the in-memory loop's build (`--cfg leasehold_memory_only`), so
/// that an edit of the runtime rebuilds a small suite there.
#[cfg(not(leasehold_memory_only))]
#[macro_export]
macro_rules! server_tests {
    ($($item:item)*) => { $($item)* };
}

/// The suite's modules that have no in-memory case: as they are, or left
/// out of the in-memory loop's build (`--cfg leasehold_memory_only`), so
/// that an edit of the runtime rebuilds a small suite there.
#[cfg(leasehold_memory_only)]
#[macro_export]
macro_rules! server_tests {
    ($($item:item)*) => {};
}

/// Instantiates each behaviour once per backend, as `redis::NAME`,
/// `valkey::NAME`, `redis8::NAME`, `sentinel::NAME`, `cluster::NAME` and
/// `memory::NAME`, and as the least-privilege user, as `redis_acl::NAME`
/// and `cluster_acl::NAME`. Each `NAME` must be an `async fn NAME(h:
/// Harness)` in the module that invokes the macro.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        $crate::tests_on!(
            redis,
            $crate::Harness::redis().await,
            [$($name),*]
        );
        $crate::tests_on!(
            valkey,
            $crate::Harness::on_engine(leasehold_testkit::Engine::Valkey).await,
            [$($name),*]
        );
        $crate::tests_on!(
            redis8,
            $crate::Harness::on_engine(leasehold_testkit::Engine::Redis8).await,
            [$($name),*]
        );
        $crate::tests_on!(
            sentinel,
            $crate::Harness::sentinel().await,
            [$($name),*]
        );
        $crate::tests_on!(
            cluster,
            $crate::Harness::cluster().await,
            [$($name),*]
        );
        $crate::tests_on!(
            redis_acl,
            $crate::Harness::redis_acl().await,
            [$($name),*]
        );
        $crate::tests_on!(
            cluster_acl,
            $crate::Harness::cluster_acl().await,
            [$($name),*]
        );
        $crate::tests_on!(memory, $crate::Harness::memory(), [$($name),*]);
    };
}

/// Instantiates each `async fn NAME(engine: Engine)` of the invoking module
/// once per server program, as `redis::NAME` on Redis 7.0, `valkey::NAME`
/// on Valkey 9.1 and `redis8::NAME` on Redis 8.6: for behaviour the servers
/// reach by different commands (scripts on Redis 7.0, `DELIFEQ` on Valkey,
/// `DELEX … IFEQ` on Redis 8, `SET … IFEQ` on both) that needs a server of
/// its own per test rather than a [`Harness`](super::Harness).
#[macro_export]
macro_rules! on_every_engine {
    ($($name:ident),+ $(,)?) => {
        $crate::tests_on!(redis, leasehold_testkit::Engine::Redis, [$($name),+]);
        $crate::tests_on!(valkey, leasehold_testkit::Engine::Valkey, [$($name),+]);
        $crate::tests_on!(redis8, leasehold_testkit::Engine::Redis8, [$($name),+]);
    };
}
