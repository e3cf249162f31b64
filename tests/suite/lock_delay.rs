//! The lock-delay of a server that came back without its data: a lease it
//! granted before may still be held, so it grants nothing (to any manager,
//! also one started after the restart) until that lease has ended, and a
//! waiter gets the lock then. (Promoted replicas: `failover.rs` and
//! `sentinel.rs`.)
//!
//! Each test starts its own `redis-server` on a free 127.0.0.1 port. Every
//! loop is bounded in count and time.

use crate::support;

use std::time::{Duration, Instant};

use leasehold::{LockError, LockOptions};
use leasehold_testkit::RedisServer;
use support::{answered, connect, granted_after_the_first_lease, DELAY_WAIT, NO_HANG};

const KEY: &str = "order-42";

/// The holder's lease: renewed every 2 s, so a renewal reaches the
/// restarted server well before the lease could end.
fn renewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(6))
}

/// A server restarted empty under a renewed lease: the holder's next
/// renewal finds its lease gone from a server that holds no marker of the
/// identity it granted under, which starts the delay and fails, so the
/// holder learns it lost the lease; until the delay ends (the ttl, from
/// that renewal on, so after the lease's last possible end), no manager is
/// granted the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_grants_no_lock_while_a_lease_it_lost_may_be_valid() {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let guard = holder.acquire(KEY, renewed()).await.unwrap();

    let first_lease_ends = guard.valid_until().expect("held");
    server.restart_empty();
    tokio::time::timeout(NO_HANG, guard.lost())
        .await
        .expect("the holder learns it lost the lease");

    let other = connect(&server.url()).await;
    let rival = tokio::time::timeout(NO_HANG, other.try_acquire(KEY, renewed()))
        .await
        .expect("answered");
    match rival {
        Ok(None) => {}
        Ok(Some(_)) => panic!("the restarted server granted the lock during its lock-delay"),
        Err(err) => panic!("the restarted server did not answer: {err:?}"),
    }

    let _waiter = granted_after_the_first_lease(
        first_lease_ends,
        other.acquire(KEY, renewed().wait(DELAY_WAIT)),
    )
    .await;
}

/// The same for a permit: the holder's renewal of its permit starts the
/// delay; a manager started after the restart gets no permit of the
/// 1-permit semaphore while the first may be valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_grants_no_permit_while_one_it_lost_may_be_valid() {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let permit = holder.semaphore(KEY, 1).acquire(renewed()).await.unwrap();

    let first_lease_ends = permit.valid_until().expect("held");
    server.restart_empty();
    tokio::time::timeout(NO_HANG, permit.lost())
        .await
        .expect("the holder learns it lost the permit");

    let other = connect(&server.url()).await;
    let rival = tokio::time::timeout(NO_HANG, other.semaphore(KEY, 1).try_acquire(renewed()))
        .await
        .expect("answered");
    assert!(
        matches!(rival, Ok(None)),
        "the restarted server granted a permit during its lock-delay: {rival:?}"
    );
    let writer = tokio::time::timeout(NO_HANG, other.rwlock(KEY).try_acquire_write(renewed()))
        .await
        .expect("answered");
    assert!(
        matches!(writer, Ok(None)),
        "the restarted server granted a write lease during its lock-delay: {writer:?}"
    );

    let wait = Duration::from_secs(30);
    let waiter = tokio::time::timeout(
        wait + NO_HANG,
        other.semaphore(KEY, 1).acquire(renewed().wait(wait)),
    )
    .await
    .expect("the waiter returns within its wait")
    .expect("the waiter gets the permit once the lock-delay ended");
    assert!(
        Instant::now() >= first_lease_ends,
        "the waiter got a permit while the first may have been valid"
    );
    assert!(!waiter.is_lost());
}

/// A lease that is not renewed, short so that waiting out a lock-delay as
/// long stays quick: nothing tells the restarted server of it but the
/// managers that knew the server before.
fn unrenewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(3)).renew(false)
}

/// A server restarted empty under a lease nobody renews: a manager that was
/// connected before the restart (it saw the old process's `run_id`) finds no
/// marker on a server of another process, which starts the delay at once;
/// it gets the lock only after the first lease has ended, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_grants_no_lock_to_a_manager_that_knew_it_before() {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let rival = connect(&server.url()).await;
    let guard = holder.acquire(KEY, unrenewed()).await.unwrap();
    let first_lease_ends = guard.valid_until().expect("held");

    server.restart_empty();
    let granted = answered("the restarted server", || {
        rival.try_acquire(KEY, unrenewed())
    })
    .await;
    assert!(
        granted.is_none(),
        "the restarted server granted the lock again to a manager that knew it before"
    );

    let _waiter = granted_after_the_first_lease(
        first_lease_ends,
        rival.acquire(KEY, unrenewed().wait(DELAY_WAIT)),
    )
    .await;
}

/// A manager that keeps the lock-delay after a server's start.
async fn waiting_after_start(url: &str) -> leasehold::LockManager {
    leasehold::LockManager::builder()
        .lock_delay_after_server_start()
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {url}: {err}"))
}

/// A server restarted empty under a lease nobody renews, then asked first
/// by a manager started after the restart (it saw only the new process):
/// nothing tells the server it lost data, but with
/// `lock_delay_after_server_start` a server up for less than the delay
/// grants nothing until it has been up that long, so the lock is granted
/// again only after the first lease has ended. (Without it the new manager
/// is granted at once: the documented window.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_grants_no_lock_to_a_manager_started_after_it_when_asked_to_wait_after_start(
) {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let guard = holder.acquire(KEY, unrenewed()).await.unwrap();
    let first_lease_ends = guard.valid_until().expect("held");

    server.restart_empty();
    let newcomer = waiting_after_start(&server.url()).await;
    let granted = answered("the restarted server", || {
        newcomer.try_acquire(KEY, unrenewed())
    })
    .await;
    assert!(
        granted.is_none(),
        "a server up for less than the delay granted the lock to a manager started after its restart"
    );

    let _waiter = granted_after_the_first_lease(
        first_lease_ends,
        newcomer.acquire(KEY, unrenewed().wait(DELAY_WAIT)),
    )
    .await;
}

/// `lock_delay_after_server_start` holds up only a server up for less than
/// the delay: one up longer grants at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_up_longer_than_the_delay_grants_at_once_when_asked_to_wait_after_start() {
    let server = RedisServer::start();
    let delay = Duration::from_secs(1);
    // `uptime_in_seconds` counts whole seconds: past the delay by one more.
    tokio::time::sleep(delay + Duration::from_millis(1_100)).await;
    let manager = leasehold::LockManager::builder()
        .lock_delay(delay)
        .lock_delay_after_server_start()
        .connect(&server.url())
        .await
        .unwrap();
    let granted = answered("the restarted server", || {
        manager.try_acquire(KEY, unrenewed())
    })
    .await;
    assert!(
        granted.is_some(),
        "a server up longer than the delay held up a grant"
    );
}

/// A lease long enough that the lock-delay it sets outlasts the test: no
/// attempt below can reach its end, however slow the machine.
fn outlasting() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(60)).renew(false)
}

/// Whether `err` names the lock-delay, with a time left in (0, 60 s].
fn names_the_lock_delay(err: &LockError) -> bool {
    let left = match err {
        LockError::Busy { lock_delay, .. } | LockError::Timeout { lock_delay, .. } => *lock_delay,
        _ => None,
    };
    left.is_some_and(|left| left > Duration::ZERO && left <= Duration::from_secs(60))
        && err.to_string().contains("lock-delay")
}

/// A server in its lock-delay refuses every kind; the error of one attempt
/// (`Busy`) and of a wait shorter than the delay (`Timeout`) says so, and
/// how long the delay has left, rather than blaming another holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_the_lock_delay_ends_in_an_error_naming_it() {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let rival = connect(&server.url()).await;
    let _guard = holder.acquire(KEY, outlasting()).await.unwrap();

    server.restart_empty();
    let granted = answered("the restarted server", || {
        rival.try_acquire(KEY, outlasting())
    })
    .await;
    assert!(granted.is_none(), "granted during the lock-delay");

    let attempts = [
        ("one attempt", rival.acquire(KEY, outlasting()).await.err()),
        (
            "a fenced attempt",
            rival.acquire(KEY, outlasting().fenced(true)).await.err(),
        ),
        (
            "a short wait",
            rival
                .acquire(KEY, outlasting().wait(Duration::from_millis(300)))
                .await
                .err(),
        ),
        (
            "a permit",
            rival.semaphore(KEY, 1).acquire(outlasting()).await.err(),
        ),
        (
            "a write lease",
            rival.rwlock(KEY).acquire_write(outlasting()).await.err(),
        ),
    ];
    for (what, err) in attempts {
        let err = err.unwrap_or_else(|| panic!("{what}: granted during the lock-delay"));
        assert!(names_the_lock_delay(&err), "{what}: {err:?} / {err}");
    }
    let waited = rival
        .acquire(KEY, outlasting().wait(Duration::from_millis(300)))
        .await
        .err();
    assert!(
        matches!(waited, Some(LockError::Timeout { .. })),
        "a wait ends in Timeout: {waited:?}"
    );
}
