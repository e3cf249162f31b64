//! The `conformance!` macro: behaviour written once as `async fn NAME(h:
//! Harness)` and instantiated on every backend, as `redis::NAME` (a real
//! `redis-server` of the test's own), `valkey::NAME` (the same on a
//! `valkey-server` 9.1), `sentinel::NAME` (the primary of the shared Sentinel
//! topology), `cluster::NAME` (the shared Redis Cluster) and `memory::NAME`
//! (`LockManager::in_memory()`); see [`Harness`](super::Harness).
//! `redis_acl::NAME` and `cluster_acl::NAME` run it again on one server and
//! on the shared cluster as a user granted only the README's least-privilege
//! ACL (see `acl`).
//!
//! Invoke it in the test file that defines the behaviours, next to them:
//! `support::conformance!(first_behaviour, second_behaviour);`.

/// Instantiates each behaviour once per backend, as `redis::NAME`,
/// `valkey::NAME`, `sentinel::NAME`, `cluster::NAME` and `memory::NAME`, and as the
/// least-privilege user, as `redis_acl::NAME` and `cluster_acl::NAME`. Each `NAME` must be
/// an `async fn NAME(h: Harness)` in the module that invokes the macro.
// `metrics.rs`, which includes `support` too, does not use it.
#[allow(unused_macros)]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::redis().await).await;
                }
            )*
        }
        mod valkey {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::valkey().await).await;
                }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::sentinel().await).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::cluster().await).await;
                }
            )*
        }
        mod redis_acl {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::redis_acl().await).await;
                }
            )*
        }
        mod cluster_acl {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::cluster_acl().await).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Harness::memory()).await;
                }
            )*
        }
    };
}

pub(crate) use conformance;

/// Instantiates each `async fn NAME(engine: Engine)` of the invoking module
/// twice, as `redis::NAME` on Redis 7.0 and `valkey::NAME` on Valkey 9.1:
/// for behaviour the two servers reach by different commands (scripts on
/// Redis 7.0, `DELIFEQ` and `SET … IFEQ` on Valkey) that needs a server of
/// its own per test rather than a [`Harness`](super::Harness).
#[allow(unused_macros)]
macro_rules! on_both_engines {
    ($($name:ident),+ $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(leasehold_testkit::Engine::Redis).await;
                }
            )+
        }
        mod valkey {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(leasehold_testkit::Engine::Valkey).await;
                }
            )+
        }
    };
}
pub(crate) use on_both_engines;
