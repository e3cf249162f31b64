//! Operators' view of locks, against real servers (one server, Redlock over
//! three, a Redis Cluster) and in memory: `inspect` names the holder
//! (manager name, host, pid, label, acquisition time, ttl) and the queued
//! waiters, `list` finds held locks by glob with `SCAN`, and `force_release`
//! frees a lock whoever holds it, cancels the evicted holder's body, hands
//! the lock to a waiter and raises the fencing counter above the evicted
//! holder's token. `Semaphore::inspect` and `inspect_rw` name each permit's,
//! reader's and writer's holder; `list_all` finds held locks of every kind;
//! `Semaphore::force_release` and `force_release_rw` evict every holder, who
//! learns it at its next renewal, and let another manager in at once, the
//! latter raising the writers' fencing counter (Redlock, which refuses those
//! kinds, refuses their inspection and forced release too, and lists plain
//! locks only).
//!
//! Every loop and wait is bounded.

use crate::support;

use std::time::{Duration, SystemTime};

use leasehold::admin::LockKind;
use leasehold::{distributed_lock, Holder, LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use support::{cluster_namespace, long, poll_async, shared_cluster, within, NO_HANG, PROMPTLY};

/// Two managers on one backend, named so that `inspect` can tell them apart.
struct Pair {
    holder: LockManager,
    operator: LockManager,
    /// Whether waiters queue in the backend (single server, Cluster).
    queues: bool,
    _server: Vec<RedisServer>,
    _cluster: Option<std::sync::Arc<leasehold_testkit::RedisCluster>>,
}

impl Pair {
    async fn redis() -> Pair {
        let server = RedisServer::start();
        let named = |name: &'static str| {
            let url = server.url();
            async move {
                LockManager::builder()
                    .name(name)
                    .connect(&url)
                    .await
                    .expect("connect")
            }
        };
        Pair {
            holder: named("orders-api").await,
            operator: named("operator").await,
            queues: true,
            _server: vec![server],
            _cluster: None,
        }
    }

    async fn redlock() -> Pair {
        let nodes = RedisServer::start_independent(3);
        let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
        let named = |name: &'static str| {
            let urls = urls.clone();
            async move {
                LockManager::builder()
                    .name(name)
                    .redlock(urls)
                    .await
                    .expect("connect")
            }
        };
        Pair {
            holder: named("orders-api").await,
            operator: named("operator").await,
            queues: false,
            _server: nodes,
            _cluster: None,
        }
    }

    async fn cluster() -> Pair {
        let cluster = shared_cluster();
        let namespace = cluster_namespace();
        let named = |name: &'static str| {
            let (urls, namespace) = (cluster.seed_urls(), namespace.clone());
            async move {
                LockManager::builder()
                    .name(name)
                    .namespace(namespace)
                    .cluster(urls)
                    .await
                    .expect("connect")
            }
        };
        Pair {
            holder: named("orders-api").await,
            operator: named("operator").await,
            queues: true,
            _server: Vec::new(),
            _cluster: Some(cluster),
        }
    }

    fn memory() -> Pair {
        let manager = LockManager::builder().name("orders-api").in_memory();
        Pair {
            holder: manager.clone(),
            operator: manager,
            queues: false,
            _server: Vec::new(),
            _cluster: None,
        }
    }
}

macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Pair::redis().await).await;
                }
            )*
        }
        mod redlock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Pair::redlock().await).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Pair::cluster().await).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Pair::memory()).await;
                }
            )*
        }
    };
}

on_every_backend!(
    inspect_names_the_holder_and_its_lease,
    inspect_shows_queued_waiters_where_the_backend_queues_them,
    list_finds_held_locks_by_glob_and_nothing_else,
    force_release_evicts_fences_off_and_hands_over,
    the_attribute_labels_its_locks_with_the_functions_path,
    semaphore_inspect_names_each_permits_holder,
    inspect_rw_shows_the_writer_the_readers_and_waiting_writers,
    list_all_names_each_held_lock_with_its_kind,
    semaphore_force_release_evicts_every_permit_holder,
    force_release_rw_evicts_the_writer_and_fences_it_off,
    force_release_rw_evicts_every_reader_and_lets_a_waiting_writer_in,
);

/// Whether `pair`'s backend refuses semaphores and read/write locks
/// (Redlock); if so, checks that it refuses their inspection the same way.
async fn refuses_shared_locks(pair: &Pair) -> bool {
    let refused =
        |result: Result<_, LockError>| matches!(result, Err(LockError::InvalidOptions(_)));
    let semaphore = pair.holder.semaphore("probe", 1);
    match within(semaphore.try_acquire(long())).await {
        Err(LockError::InvalidOptions(_)) => {}
        taken => {
            // Given back before the caller lists what is held.
            let permit = taken.unwrap().expect("the probe permit is free");
            within(permit.release()).await.unwrap();
            return false;
        }
    }
    assert!(refused(within(semaphore.inspect()).await.map(|_| ())));
    assert!(refused(
        within(pair.operator.rwlock("probe").inspect())
            .await
            .map(|_| ())
    ));
    assert!(refused(within(semaphore.force_release()).await.map(|_| ())));
    assert!(refused(
        within(pair.operator.rwlock("probe").force_release())
            .await
            .map(|_| ())
    ));
    true
}

/// The labels of the named holders of `leases`, sorted.
fn labels(leases: &[leasehold::admin::LeaseInfo]) -> Vec<String> {
    let mut labels: Vec<String> = leases
        .iter()
        .filter_map(|lease| lease.holder.as_ref()?.label.clone())
        .collect();
    labels.sort();
    labels
}

async fn semaphore_inspect_names_each_permits_holder(pair: Pair) {
    if refuses_shared_locks(&pair).await {
        return;
    }
    let ttl = Duration::from_secs(20);
    let payments = pair.holder.semaphore("api:payments", 3);
    let operator_view = pair.operator.semaphore("api:payments", 3);
    let empty = within(operator_view.inspect()).await.unwrap();
    assert_eq!((empty.held, empty.holders.len()), (0, 0));

    let options = |label: &str| LockOptions::new().ttl(ttl).label(label);
    let first = within(payments.acquire(options("pay::a"))).await.unwrap();
    let second = within(payments.acquire(options("pay::b"))).await.unwrap();
    let info = within(operator_view.inspect()).await.unwrap();
    assert_eq!(info.key, "api:payments");
    assert_eq!(info.held, 2);
    assert_eq!(labels(&info.holders), ["pay::a", "pay::b"]);
    for lease in &info.holders {
        let holder = lease
            .holder
            .as_ref()
            .expect("each permit's holder is named");
        assert_eq!(
            (holder.manager.as_str(), holder.pid),
            ("orders-api", std::process::id())
        );
        assert!(
            lease.remaining <= ttl && lease.remaining > ttl - NO_HANG,
            "{:?}",
            lease.remaining
        );
    }
    within(first.release()).await.unwrap();
    let info = within(operator_view.inspect()).await.unwrap();
    assert_eq!(
        (info.held, labels(&info.holders)),
        (1, vec!["pay::b".to_owned()])
    );
    within(second.release()).await.unwrap();
    let info = within(operator_view.inspect()).await.unwrap();
    assert_eq!((info.held, info.holders.len()), (0, 0));
}

async fn inspect_rw_shows_the_writer_the_readers_and_waiting_writers(pair: Pair) {
    if refuses_shared_locks(&pair).await {
        return;
    }
    let free = within(pair.operator.rwlock("doc").inspect()).await.unwrap();
    assert!(free.writer.is_none() && free.readers.is_empty() && free.writers_waiting == 0);

    let doc = pair.holder.rwlock("doc");
    let read = |label: &str| doc.acquire_read(long().label(label));
    let first = within(read("doc::show")).await.unwrap();
    let second = within(read("doc::print")).await.unwrap();
    let info = within(pair.operator.rwlock("doc").inspect()).await.unwrap();
    assert_eq!(info.reader_count, 2);
    assert_eq!(labels(&info.readers), ["doc::print", "doc::show"]);
    assert!(info.writer.is_none());

    let writer = {
        let operator = pair.operator.clone();
        tokio::spawn(async move {
            let options = long().label("doc::edit").fenced(true).wait(NO_HANG);
            operator.rwlock("doc").acquire_write(options).await
        })
    };
    let waits = poll_async(PROMPTLY, || async {
        let info = pair.operator.rwlock("doc").inspect().await.unwrap();
        info.writers_waiting == 1 && info.local_waiters == 1
    })
    .await;
    assert!(waits, "the waiting writer is not shown");
    within(first.release()).await.unwrap();
    within(second.release()).await.unwrap();
    let writer = within(writer).await.unwrap().unwrap();
    let token = within(writer.fencing_token()).await.unwrap();
    let info = within(pair.operator.rwlock("doc").inspect()).await.unwrap();
    let lease = info.writer.expect("the writer is shown");
    let holder = lease.holder.expect("the writer is named");
    assert_eq!(
        (holder.manager.as_str(), holder.label.as_deref()),
        (pair.operator.name(), Some("doc::edit"))
    );
    assert_eq!((info.reader_count, info.writers_waiting), (0, 0));
    assert_eq!(info.fencing_counter, Some(token));
    within(writer.release()).await.unwrap();
    let released = within(pair.operator.rwlock("doc").inspect()).await.unwrap();
    assert!(released.writer.is_none());
}

async fn inspect_names_the_holder_and_its_lease(pair: Pair) {
    let free = within(pair.operator.inspect("stock:42")).await.unwrap();
    assert!(!free.held && free.holder.is_none() && free.remaining.is_none());

    let ttl = Duration::from_secs(20);
    let before = SystemTime::now() - Duration::from_secs(1);
    let guard = within(pair.holder.acquire(
        "stock:42",
        LockOptions::new().ttl(ttl).label("shop::buy").fenced(true),
    ))
    .await
    .unwrap();
    let token = guard.fencing_token().await.unwrap();
    let info = within(pair.operator.inspect("stock:42")).await.unwrap();
    assert!(info.held);
    let holder = info.holder.expect("the holder is named");
    assert_eq!(holder.manager, "orders-api");
    assert_eq!(holder.pid, std::process::id());
    assert_eq!(holder.label.as_deref(), Some("shop::buy"));
    assert_eq!(holder.ttl, ttl);
    assert!(holder.acquired_at >= before && holder.acquired_at <= SystemTime::now());
    let remaining = info.remaining.expect("a held lock has a ttl");
    assert!(
        remaining <= ttl && remaining > ttl - NO_HANG,
        "{remaining:?}"
    );
    assert_eq!(info.fencing_counter, Some(token));
    assert_eq!(pair.holder.name(), "orders-api");
    within(guard.release()).await.unwrap();
    let released = within(pair.operator.inspect("stock:42")).await.unwrap();
    assert!(!released.held, "inspect still sees a released lock");
}

async fn inspect_shows_queued_waiters_where_the_backend_queues_them(pair: Pair) {
    let guard = within(pair.operator.acquire("job", long())).await.unwrap();
    let waiting = {
        let holder = pair.holder.clone();
        tokio::spawn(async move {
            holder
                .acquire("job", long().wait(NO_HANG).label("worker::run"))
                .await
        })
    };
    let seen = support::poll_async(PROMPTLY, || async {
        let info = pair.operator.inspect("job").await.unwrap();
        if pair.queues {
            info.queued_count == 1
        } else {
            // Waiters wait in their own process only: the holder manager's.
            pair.holder.inspect("job").await.unwrap().local_waiters == 1
        }
    })
    .await;
    assert!(seen, "the waiter does not show");
    if pair.queues {
        let info = within(pair.operator.inspect("job")).await.unwrap();
        let waiter = info.queued.first().expect("the queued waiter is named");
        assert_eq!(waiter.manager, "orders-api");
        assert_eq!(waiter.label.as_deref(), Some("worker::run"));
    }
    within(guard.release()).await.unwrap();
    let taken = within(waiting)
        .await
        .unwrap()
        .expect("the waiter gets the lock");
    within(taken.release()).await.unwrap();
}

async fn list_finds_held_locks_by_glob_and_nothing_else(pair: Pair) {
    let keys = ["stock:1", "stock:2", "order:{7}", "a*b", "stock:{x}y"];
    let mut guards = Vec::new();
    for key in keys {
        guards.push(
            within(pair.holder.acquire(key, long().fenced(true)))
                .await
                .unwrap(),
        );
    }
    let freed = within(pair.holder.acquire("stock:3", long()))
        .await
        .unwrap();
    within(freed.release()).await.unwrap();

    let mut all = keys.map(str::to_owned).to_vec();
    all.sort();
    assert_eq!(within(pair.operator.list("*")).await.unwrap(), all);
    assert_eq!(
        within(pair.operator.list("stock:*")).await.unwrap(),
        ["stock:1", "stock:2", "stock:{x}y"]
    );
    assert_eq!(within(pair.operator.list("a\\*b")).await.unwrap(), ["a*b"]);
    assert_eq!(
        within(pair.operator.list("order:{?}")).await.unwrap(),
        ["order:{7}"]
    );
    assert!(within(pair.operator.list("nothing:*"))
        .await
        .unwrap()
        .is_empty());
    for guard in guards {
        within(guard.release()).await.unwrap();
    }
    assert!(within(pair.operator.list("*")).await.unwrap().is_empty());
}

async fn force_release_evicts_fences_off_and_hands_over(pair: Pair) {
    let ttl = Duration::from_millis(1500);
    let guard = within(
        pair.holder
            .acquire("stuck", LockOptions::new().ttl(ttl).fenced(true)),
    )
    .await
    .unwrap();
    let evicted_token = guard.fencing_token().await.unwrap();
    let waiting = {
        let operator = pair.operator.clone();
        tokio::spawn(async move { operator.acquire("stuck", long().wait(NO_HANG)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    let forced = within(pair.operator.force_release("stuck")).await.unwrap();
    assert!(forced.was_held);
    assert_eq!(
        forced
            .evicted
            .as_ref()
            .map(|holder| holder.manager.as_str()),
        Some("orders-api")
    );
    assert!(
        forced.fencing_counter > evicted_token,
        "counter {} not above the evicted holder's token {evicted_token}",
        forced.fencing_counter
    );

    let taken = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .expect("the waiter gets the lock at once, not after the evicted holder's ttl")
        .unwrap()
        .expect("the waiter gets the lock");
    let next = taken.fencing_token().await.unwrap();
    assert!(
        next > forced.fencing_counter,
        "{next} after {}",
        forced.fencing_counter
    );

    tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("the evicted holder learns it lost its lease within its ttl");
    assert!(matches!(
        within(guard.release()).await,
        Err(LockError::LeaseLost { .. })
    ));
    within(taken.release()).await.unwrap();

    let nobody = within(pair.operator.force_release("never-held"))
        .await
        .unwrap();
    assert!(!nobody.was_held && nobody.evicted.is_none());
}

#[distributed_lock(key = "report:{day}", ttl = "20s", manager = locks)]
async fn nightly_report(locks: &LockManager, day: u32) -> Result<Option<String>, LockError> {
    let info = locks.inspect(&format!("report:{day}")).await?;
    Ok(info.holder.and_then(|holder| holder.label))
}

async fn the_attribute_labels_its_locks_with_the_functions_path(pair: Pair) {
    let label = within(nightly_report(&pair.holder, 3)).await.unwrap();
    assert_eq!(label.as_deref(), Some("suite::operations::nightly_report"));
}

/// The lease of holders that the tests evict: renewed every 3 s, so the
/// first renewal after an eviction comes within 3 s, while the lease itself
/// would last about 9 s.
const EVICTED_TTL: Duration = Duration::from_secs(9);

/// How soon an evicted holder learns that its lease is lost: by its next
/// renewal, refused, well before its lease could have run out.
const LEARNS_WITHIN: Duration = Duration::from_secs(6);

/// Options of an acquisition that the test will evict, labelled `label`.
fn evictable(label: &str) -> LockOptions {
    LockOptions::new().ttl(EVICTED_TTL).label(label)
}

/// Waits until the evicted holder's `lost` future completes: panics unless
/// it does within [`LEARNS_WITHIN`].
async fn learns_it_lost(lost: impl std::future::Future<Output = ()>, what: &str) {
    tokio::time::timeout(LEARNS_WITHIN, lost)
        .await
        .unwrap_or_else(|_| panic!("{what} did not learn at its next renewal that it was evicted"));
}

/// The labels of `holders`, sorted.
fn holder_labels(holders: &[Holder]) -> Vec<String> {
    let mut labels: Vec<String> = holders
        .iter()
        .filter_map(|holder| holder.label.clone())
        .collect();
    labels.sort();
    labels
}

/// What `list_all(pattern)` returns, as (key, kind) pairs.
async fn listed(manager: &LockManager, pattern: &str) -> Vec<(String, LockKind)> {
    within(manager.list_all(pattern))
        .await
        .unwrap()
        .into_iter()
        .map(|lock| (lock.key, lock.kind))
        .collect()
}

/// `pairs` as owned (key, kind) pairs.
fn kinds(pairs: &[(&str, LockKind)]) -> Vec<(String, LockKind)> {
    pairs
        .iter()
        .map(|(key, kind)| ((*key).to_owned(), *kind))
        .collect()
}

async fn list_all_names_each_held_lock_with_its_kind(pair: Pair) {
    let lock = within(pair.holder.acquire("doc:1", long())).await.unwrap();
    let stock = within(pair.holder.acquire("stock:1", long()))
        .await
        .unwrap();
    if refuses_shared_locks(&pair).await {
        assert_eq!(
            listed(&pair.operator, "*").await,
            kinds(&[("doc:1", LockKind::Lock), ("stock:1", LockKind::Lock)])
        );
        within(lock.release()).await.unwrap();
        within(stock.release()).await.unwrap();
        return;
    }
    let reader = within(pair.holder.rwlock("doc:1").acquire_read(long()))
        .await
        .unwrap();
    let writer = within(pair.holder.rwlock("doc:2").acquire_write(long()))
        .await
        .unwrap();
    let permit = within(pair.holder.semaphore("api:{1}", 2).acquire(long()))
        .await
        .unwrap();
    let freed = within(pair.holder.semaphore("api:2", 1).acquire(long()))
        .await
        .unwrap();
    within(freed.release()).await.unwrap();

    assert_eq!(
        listed(&pair.operator, "*").await,
        kinds(&[
            ("api:{1}", LockKind::Semaphore),
            ("doc:1", LockKind::Lock),
            ("doc:1", LockKind::ReadWrite),
            ("doc:2", LockKind::ReadWrite),
            ("stock:1", LockKind::Lock),
        ])
    );
    assert_eq!(
        listed(&pair.operator, "doc:?").await,
        kinds(&[
            ("doc:1", LockKind::Lock),
            ("doc:1", LockKind::ReadWrite),
            ("doc:2", LockKind::ReadWrite),
        ])
    );
    assert_eq!(
        listed(&pair.operator, "api:{?}").await,
        kinds(&[("api:{1}", LockKind::Semaphore)])
    );
    assert_eq!(
        within(pair.operator.list("*")).await.unwrap(),
        ["doc:1", "stock:1"],
        "`list` still lists plain locks only"
    );
    within(lock.release()).await.unwrap();
    within(stock.release()).await.unwrap();
    within(reader.release()).await.unwrap();
    within(writer.release()).await.unwrap();
    within(permit.release()).await.unwrap();
    assert!(listed(&pair.operator, "*").await.is_empty());
}

async fn semaphore_force_release_evicts_every_permit_holder(pair: Pair) {
    if refuses_shared_locks(&pair).await {
        return;
    }
    let payments = pair.holder.semaphore("api:pay", 2);
    let first = within(payments.acquire(evictable("pay::a"))).await.unwrap();
    let second = within(payments.acquire(evictable("pay::b"))).await.unwrap();
    let operator_view = pair.operator.semaphore("api:pay", 2);
    let waiting = {
        let semaphore = operator_view.clone();
        tokio::spawn(async move { semaphore.acquire(long().wait(NO_HANG)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    let forced = within(operator_view.force_release()).await.unwrap();
    assert_eq!(forced.key, "api:pay");
    assert_eq!(forced.evicted_count, 2);
    assert_eq!(holder_labels(&forced.evicted), ["pay::a", "pay::b"]);
    assert!(forced
        .evicted
        .iter()
        .all(|holder| holder.manager == "orders-api"));

    let taken = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .expect("the waiter gets a permit at once, not after the evicted leases end")
        .unwrap()
        .expect("the waiter gets a permit");
    let another = within(operator_view.try_acquire(long()))
        .await
        .unwrap()
        .expect("both permits are free again");
    for (permit, what) in [(first, "pay::a"), (second, "pay::b")] {
        learns_it_lost(permit.lost(), what).await;
        assert!(matches!(
            within(permit.release()).await,
            Err(LockError::LeaseLost { .. })
        ));
    }
    within(taken.release()).await.unwrap();
    within(another.release()).await.unwrap();

    let nobody = within(operator_view.force_release()).await.unwrap();
    assert!(nobody.evicted.is_empty() && nobody.evicted_count == 0);
}

async fn force_release_rw_evicts_the_writer_and_fences_it_off(pair: Pair) {
    if refuses_shared_locks(&pair).await {
        return;
    }
    let writer = within(
        pair.holder
            .rwlock("ledger")
            .acquire_write(evictable("ledger::post").fenced(true)),
    )
    .await
    .unwrap();
    let evicted_token = within(writer.fencing_token()).await.unwrap();

    let forced = within(pair.operator.rwlock("ledger").force_release())
        .await
        .unwrap();
    assert!(forced.writer_was_held);
    let evicted = forced.evicted_writer.as_ref().expect("the writer is named");
    assert_eq!(
        (evicted.manager.as_str(), evicted.label.as_deref()),
        ("orders-api", Some("ledger::post"))
    );
    assert_eq!(forced.evicted_reader_count, 0);
    assert!(
        forced.fencing_counter > evicted_token,
        "counter {} not above the evicted writer's token {evicted_token}",
        forced.fencing_counter
    );

    let reader = within(pair.operator.rwlock("ledger").try_acquire_read(long()))
        .await
        .unwrap()
        .expect("a reader gets in at once");
    learns_it_lost(writer.lost(), "the evicted writer").await;
    assert!(matches!(
        within(writer.fencing_token()).await,
        Err(LockError::LeaseLost { .. })
    ));
    assert!(matches!(
        within(writer.release()).await,
        Err(LockError::LeaseLost { .. })
    ));
    within(reader.release()).await.unwrap();

    let nobody = within(pair.operator.rwlock("never-held").force_release())
        .await
        .unwrap();
    assert!(!nobody.writer_was_held && nobody.evicted_reader_count == 0);
}

async fn force_release_rw_evicts_every_reader_and_lets_a_waiting_writer_in(pair: Pair) {
    if refuses_shared_locks(&pair).await {
        return;
    }
    let show = within(
        pair.holder
            .rwlock("doc")
            .acquire_read(evictable("doc::show")),
    )
    .await
    .unwrap();
    let print = within(
        pair.holder
            .rwlock("doc")
            .acquire_read(evictable("doc::print")),
    )
    .await
    .unwrap();
    let waiting = {
        let operator = pair.operator.clone();
        tokio::spawn(async move {
            operator
                .rwlock("doc")
                .acquire_write(long().fenced(true).wait(NO_HANG))
                .await
        })
    };
    let waits = poll_async(PROMPTLY, || async {
        pair.operator
            .rwlock("doc")
            .inspect()
            .await
            .unwrap()
            .writers_waiting
            == 1
    })
    .await;
    assert!(waits, "the writer does not wait");

    let forced = within(pair.operator.rwlock("doc").force_release())
        .await
        .unwrap();
    assert!(!forced.writer_was_held && forced.evicted_writer.is_none());
    assert_eq!(forced.evicted_reader_count, 2);
    assert_eq!(
        holder_labels(&forced.evicted_readers),
        ["doc::print", "doc::show"]
    );

    let writer = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .expect("the waiting writer gets the lock at once, not after the readers' leases end")
        .unwrap()
        .expect("the waiting writer gets the lock");
    let token = within(writer.fencing_token()).await.unwrap();
    assert!(
        token > forced.fencing_counter,
        "{token} after {}",
        forced.fencing_counter
    );
    for (reader, what) in [(show, "doc::show"), (print, "doc::print")] {
        learns_it_lost(reader.lost(), what).await;
        assert!(matches!(
            within(reader.release()).await,
            Err(LockError::LeaseLost { .. })
        ));
    }
    within(writer.release()).await.unwrap();
}
