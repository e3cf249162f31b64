//! Waiting for a busy lock when things go wrong: many keys subscribing at
//! once, a Redis restart or a cut under the notification connection, an
//! outage, and waiters cancelled halfway through subscribing. (The hand-off to
//! queued waiters has its own file, `handoff.rs`.)
//!
//! Each test starts its own `redis-server` on a free 127.0.0.1 port. Every
//! loop is bounded in count and time.

use crate::support;

use std::time::Duration;

use leasehold::LockError;
use leasehold_testkit::{FaultProxy, RedisServer};
use support::{
    assert_subscribed_soon, drop_after_polls, join_within, keys_besides_fences, long, poll_async,
    reconnect, subscribed_channels, waiting, Harness, PROMPTLY,
};
use tokio::time::{sleep, timeout};

/// How long the waiters of these tests wait: far less than the 30 s TTL of
/// the holders, far more than [`PROMPTLY`], so a waiter that was not woken
/// times out visibly.
const WAIT: Duration = Duration::from_secs(10);

/// `h.b` holds `k` with a 30 s lease, `h.a` waits for it; once the waiter is
/// subscribed, `meddle` runs and the waiter must subscribe again; then the
/// release must reach the waiter promptly, not its 30 s TTL.
async fn assert_release_reaches_a_waiter(h: &Harness, meddle: impl FnOnce()) {
    let holder = h.b.acquire("k", long()).await.unwrap();
    let waiter = tokio::spawn({
        let a = h.a.clone();
        async move { a.acquire("k", waiting(WAIT)).await }
    });
    assert_subscribed_soon(h.server(), "lock:k").await;
    meddle();
    assert_subscribed_soon(h.server(), "lock:k").await;
    holder.release().await.unwrap();
    let waiter = timeout(PROMPTLY, waiter)
        .await
        .expect("the release reaches the waiter, which does not sleep until the 30 s TTL")
        .unwrap()
        .expect("the waiter gets the lock");
    waiter.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_many_keys_subscribing_at_once_are_all_woken_by_their_releases() {
    const KEYS: usize = 40;
    let h = Harness::redis().await;
    let mut holders = Vec::new();
    for key in 0..KEYS {
        holders.push(h.b.acquire(&format!("many-{key}"), long()).await.unwrap());
    }
    let waiters: Vec<_> = (0..KEYS)
        .map(|key| {
            let a = h.a.clone();
            tokio::spawn(async move {
                let guard = a
                    .acquire(&format!("many-{key}"), waiting(WAIT))
                    .await
                    .expect("every waiter gets its lock once it is released");
                guard.release().await.unwrap();
            })
        })
        .collect();
    let all_subscribed = poll_async(PROMPTLY, || async {
        subscribed_channels(h.server(), "lock:many-*").len() == KEYS
    })
    .await;
    assert!(
        all_subscribed,
        "only {:?} of {KEYS} channels subscribed",
        subscribed_channels(h.server(), "lock:many-*").len()
    );
    for holder in holders {
        holder.release().await.unwrap();
    }
    join_within(waiters, PROMPTLY, "40 waiters woken by their releases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_a_release_after_redis_restarted() {
    let mut h = Harness::redis_without_lock_delay().await;
    // Subscribe and unsubscribe once, so the notification connection is in use.
    let holder = h.b.acquire("k", long()).await.unwrap();
    let before = tokio::spawn({
        let a = h.a.clone();
        async move { a.acquire("k", waiting(WAIT)).await }
    });
    assert_subscribed_soon(h.server(), "lock:k").await;
    holder.release().await.unwrap();
    let before = timeout(PROMPTLY, before).await.unwrap().unwrap().unwrap();
    before.release().await.unwrap();

    // Down for longer than the client library's own reconnection attempts.
    h.server_mut().kill();
    sleep(Duration::from_millis(1500)).await;
    h.server_mut().restart_empty();
    reconnect(&h.a).await;
    reconnect(&h.b).await;

    assert_release_reaches_a_waiter(&h, || {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_notification_connection_was_cut_is_still_woken_by_the_release() {
    let h = Harness::redis().await;
    assert_release_reaches_a_waiter(&h, || {
        h.server()
            .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_returns_by_its_deadline_while_redis_is_down() {
    let mut h = Harness::redis().await;
    let _holder = h.b.acquire("k", long()).await.unwrap();
    let wait = Duration::from_secs(2);
    let waiter = tokio::spawn({
        let a = h.a.clone();
        async move { a.acquire("k", waiting(wait)).await }
    });
    assert_subscribed_soon(h.server(), "lock:k").await;
    h.server_mut().kill();
    let result = timeout(wait + Duration::from_secs(3), waiter)
        .await
        .expect("a waiter returns by its deadline (plus one command's timeout) while Redis is down")
        .unwrap();
    assert!(
        result.is_err(),
        "a waiter got a lock from a dead server: {result:?}"
    );
}

/// A waiter whose attempt meets a connection error while its wait has time
/// left (here a cut link; a failover or a restart looks the same to it)
/// tries again with a fresh owner token once the link is back, and gets in
/// when the holder leaves: every kind. Before, it failed at once with
/// `Connection`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_every_kind_ride_out_a_cut_link() {
    let server = RedisServer::start();
    let link = FaultProxy::start(server.addr());
    let holder = support::connect(&server.url()).await;
    let other = support::connect(&link.url()).await;
    let waiting = support::EveryKindWaiting::start(&holder, &other, ["sem", "doc", "plain"]).await;
    let channels = ["lock-sem:sem", "lock-rw:doc", "lock:plain"];
    for channel in channels {
        assert_subscribed_soon(&server, channel).await;
    }
    // Longer than a queued waiter's place refresh (1 s): the lock waiter and
    // the reader each meet the cut at least once.
    let _link = tokio::task::spawn_blocking(move || {
        link.cut();
        std::thread::sleep(Duration::from_millis(2_500));
        link.restore();
        link
    })
    .await
    .unwrap();
    for channel in channels {
        assert_subscribed_soon(&server, channel).await;
    }
    waiting
        .release_and_assert_woken_within(Duration::from_secs(3))
        .await;
    // The tokens given up on during the cut gave back their places.
    let clean = poll_async(PROMPTLY, || async {
        keys_besides_fences(&server, "*").is_empty()
    })
    .await;
    let left = keys_besides_fences(&server, "*");
    assert!(clean, "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_cancelled_at_any_point_leaves_no_subscription_behind() {
    // More polls than an acquisition takes to fall asleep; the sweep ends at
    // the first one it survives (it then times out by itself).
    const MAX_POINTS: usize = 30;
    let h = Harness::redis().await;
    let key = |point: usize| format!("cancel-{point}");
    let mut holders = Vec::new();
    let mut cancelled_at = Vec::new();
    for point in 1..=MAX_POINTS {
        let key = key(point);
        holders.push(h.b.acquire(&key, long()).await.unwrap());
        let acquire = h.a.acquire(&key, waiting(Duration::from_millis(300)));
        match drop_after_polls(acquire, point).await {
            None => cancelled_at.push(point),
            Some(Err(LockError::Timeout { .. })) => break,
            Some(other) => panic!("an acquisition of a held lock gave {other:?}"),
        }
    }
    assert!(
        cancelled_at.len() >= 2 && cancelled_at.len() < MAX_POINTS,
        "cancelled after {cancelled_at:?} polls: the sweep did not reach the waiting state"
    );
    let none_left = poll_async(PROMPTLY, || async {
        subscribed_channels(h.server(), "lock:cancel-*").is_empty()
    })
    .await;
    assert!(
        none_left,
        "subscriptions left behind by cancelled waiters: {:?}",
        subscribed_channels(h.server(), "lock:cancel-*")
    );

    // The bookkeeping is not stale either: new waiters are woken as usual.
    let waiters: Vec<_> = cancelled_at
        .iter()
        .map(|&point| {
            let (a, key) = (h.a.clone(), key(point));
            tokio::spawn(async move {
                let guard = a.acquire(&key, waiting(WAIT)).await.unwrap();
                guard.release().await.unwrap();
            })
        })
        .collect();
    let all_subscribed = poll_async(PROMPTLY, || async {
        subscribed_channels(h.server(), "lock:cancel-*").len() == cancelled_at.len()
    })
    .await;
    assert!(all_subscribed, "new waiters did not all subscribe");
    for holder in holders {
        holder.release().await.unwrap();
    }
    join_within(waiters, PROMPTLY, "waiters after the cancelled ones").await;
}
