//! Cancellation safety at every `.await`: each public future is dropped after
//! its k-th poll, for k = 1, 2, … until it completes by itself, with every
//! command delayed by a fault-injection proxy so that each await point is
//! really pending. After each drop no lock may be left behind, and no two
//! bodies may ever run under the same key at once.
//!
//! Runs on one Redis 7.0 server (and one of Valkey 9.1 and of Redis 8.6,
//! whose releases and renewals are their own commands), on Redlock over
//! three, on a Redis Cluster of three primaries (each announcing its proxy's
//! port, so the cluster client too goes through the proxies) and in memory.
//!
//! The shared-lock kinds get the same treatment on every backend that has
//! them (one server, Cluster, memory): semaphore acquisitions (free and
//! behind full permits), releases and `with_permit`; read and write
//! acquisitions (a reader behind a writer, a writer behind a reader, which
//! leaves an intent), releases, `with_read` and `with_write`. After each
//! drop no permit, read or write lease, or writer's intent may be left: in
//! Redis (`lock-sem:`, `lock-rw:`, `lock-read:`, `lock-intent:`, nor a
//! subscriber of their release channels), and as
//! another manager sees it (it takes every permit, the write lease and a
//! read lease at once). Redlock refuses these kinds, with an error, not a
//! panic, and writes nothing.

use crate::support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager, LockOptions, Semaphore};
use leasehold_testkit::{Engine, FaultProxy, RedisCluster, RedisServer, RespValue};
use support::{
    connect, drop_after_polls, is_held, lock_value, long, poll_async, proxied_cluster, within,
    PROMPTLY,
};

/// Latency the proxy adds to every chunk, in each direction.
const LATENCY: Duration = Duration::from_millis(15);
/// Most polls any of the futures needs; a future still pending after this
/// many is a hang, not a cancellation point.
const MAX_POLLS: usize = 40;
const KEY: &str = "cancel:1";
/// The semaphore of the semaphore futures.
const SEM_KEY: &str = "cancel:sem";
/// Its permits: every one is taken by the holders a waiter queues behind.
const SEM_PERMITS: u32 = 2;
/// The read/write lock of the read/write futures.
const RW_KEY: &str = "cancel:rw";
/// How long a holder that a waiter queues behind keeps its lease.
const HOLDER_LEAVES_AFTER: Duration = Duration::from_millis(30);

/// What a cancelled future may leave behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The lock on [`KEY`], or a waiter's place in its queue.
    Lock,
    /// A permit of the semaphore on [`SEM_KEY`].
    Permit,
    /// A read or write lease of the read/write lock on [`RW_KEY`], or a
    /// writer's intent.
    ReadWrite,
}

impl Kind {
    /// The names this kind keeps in Redis (default namespace, before any
    /// hash tag), see `runtime/src/keys.rs`.
    fn internal_keys(self) -> Vec<String> {
        match self {
            Kind::Lock => vec![format!("lock:{KEY}"), format!("lock-queue:{KEY}")],
            Kind::Permit => vec![format!("lock-sem:{SEM_KEY}")],
            Kind::ReadWrite => ["rw", "read", "intent"]
                .iter()
                .map(|name| format!("lock-{name}:{RW_KEY}"))
                .collect(),
        }
    }
}

/// One backend seen through delaying proxies, plus a direct view of its keys.
struct Setup {
    delayed: LockManager,
    /// Another manager on the same backend (for one server, connected
    /// directly), to see from outside what the delayed one left.
    probe: LockManager,
    /// Servers, to check from outside whether a lock key exists.
    servers: Vec<RedisServer>,
    _proxies: Vec<FaultProxy>,
    /// For the in-memory backend, the only way to look at its table.
    memory: Option<LockManager>,
    /// For the cluster backend, its nodes.
    cluster: Option<RedisCluster>,
}

impl Setup {
    async fn redis(nodes: usize) -> Setup {
        Setup::servers(nodes, Engine::Redis).await
    }

    /// `nodes` servers of `engine` (several: Redlock), each behind a
    /// delaying proxy.
    async fn servers(nodes: usize, engine: Engine) -> Setup {
        let servers: Vec<RedisServer> = (0..nodes)
            .map(|_| RedisServer::builder().engine(engine).start())
            .collect();
        let proxies: Vec<FaultProxy> = servers
            .iter()
            .map(|server| FaultProxy::start(server.addr()))
            .collect();
        for proxy in &proxies {
            proxy.delay(LATENCY);
        }
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let builder = LockManager::builder().response_timeout(Duration::from_secs(2));
        let delayed = if nodes == 1 {
            builder.connect(&urls[0]).await
        } else {
            builder.redlock(&urls).await
        }
        .expect("connect through the proxies");
        let probe = if nodes == 1 {
            connect(&servers[0].url()).await
        } else {
            delayed.clone()
        };
        Setup {
            delayed,
            probe,
            servers,
            _proxies: proxies,
            memory: None,
            cluster: None,
        }
    }

    /// A cluster of 3 primaries, each behind a delaying proxy (see
    /// [`proxied_cluster`]).
    async fn cluster() -> Setup {
        let (cluster, proxies) = proxied_cluster().await;
        for proxy in &proxies {
            proxy.delay(LATENCY);
        }
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let manager = || async {
            LockManager::builder()
                .response_timeout(Duration::from_secs(2))
                .cluster(&urls)
                .await
                .expect("connect through the proxies")
        };
        // The nodes announce their proxies: the probe goes through them too.
        let (delayed, probe) = (manager().await, manager().await);
        Setup {
            delayed,
            probe,
            servers: Vec::new(),
            _proxies: proxies,
            memory: None,
            cluster: Some(cluster),
        }
    }

    fn memory() -> Setup {
        let manager = LockManager::in_memory();
        Setup {
            delayed: manager.clone(),
            probe: manager.clone(),
            servers: Vec::new(),
            _proxies: Vec::new(),
            memory: Some(manager),
            cluster: None,
        }
    }

    /// Whether the lock on `KEY`, or a waiter's place in its queue, exists
    /// anywhere, looked at from outside.
    async fn lock_exists(&self) -> bool {
        if let Some(memory) = &self.memory {
            return is_held(memory, KEY).await;
        }
        self.redis_holds(Kind::Lock)
    }

    /// Whether any Redis server (or cluster node) of this set-up holds one
    /// of `kind`'s names; `false` in memory, which has none to look at.
    fn redis_holds(&self, kind: Kind) -> bool {
        let names = kind.internal_keys();
        if let Some(cluster) = &self.cluster {
            // The names start with the key's hash tag: match what follows it.
            return cluster.primaries().iter().any(|node| {
                names.iter().any(|name| {
                    let pattern = format!("*{name}");
                    match node.command(&["KEYS", &pattern]) {
                        Ok(RespValue::Array(keys)) => !keys.is_empty(),
                        other => panic!("KEYS {pattern} replied {other:?}"),
                    }
                })
            });
        }
        self.servers.iter().any(|server| {
            kind == Kind::Lock && lock_value(server, KEY) != RespValue::Nil
                || names.iter().any(|name| {
                    server
                        .command(&["EXISTS", name])
                        .expect("EXISTS")
                        .as_integer()
                        == Some(1)
                })
        })
    }

    /// Whether any Redis server (or cluster node) of this set-up has a
    /// subscriber for one of `kind`'s release channels (sharded ones on a
    /// cluster): a waiter that left keeps none.
    fn redis_has_subscribers(&self, kind: Kind) -> bool {
        let names = kind.internal_keys();
        let any_channel = |node: &RedisServer, subcommand: &str, pattern: &str| match node
            .command(&["PUBSUB", subcommand, pattern])
        {
            Ok(RespValue::Array(channels)) => !channels.is_empty(),
            other => panic!("PUBSUB {subcommand} {pattern} replied {other:?}"),
        };
        if let Some(cluster) = &self.cluster {
            return cluster.primaries().iter().any(|node| {
                names
                    .iter()
                    .any(|name| any_channel(node, "SHARDCHANNELS", &format!("*{name}")))
            });
        }
        self.servers.iter().any(|server| {
            names
                .iter()
                .any(|name| any_channel(server, "CHANNELS", name))
        })
    }

    /// Whether the probe manager takes every permit of the semaphore at once
    /// (giving them back): nobody else holds one.
    async fn probe_takes_every_permit(&self) -> bool {
        let semaphore = self.probe.semaphore(SEM_KEY, SEM_PERMITS);
        let mut taken = Vec::new();
        for _ in 0..SEM_PERMITS {
            match semaphore.try_acquire(long()).await {
                Ok(Some(permit)) => taken.push(permit),
                Ok(None) => break,
                Err(err) => panic!("probe of semaphore `{SEM_KEY}` failed: {err}"),
            }
        }
        let all = taken.len() == SEM_PERMITS as usize;
        for permit in taken {
            permit
                .release()
                .await
                .expect("the probe releases its permit");
        }
        all
    }

    /// Whether the probe manager takes the write lease at once (no reader
    /// and no writer hold the lock), then a read lease (no writer's intent
    /// holds readers back), giving each back.
    async fn probe_takes_write_then_read(&self) -> bool {
        let probe = &self.probe;
        let fail = |err: LockError| -> ! { panic!("probe of `{RW_KEY}` failed: {err}") };
        let Some(writer) = probe
            .rwlock(RW_KEY)
            .try_acquire_write(long())
            .await
            .unwrap_or_else(|err| fail(err))
        else {
            return false;
        };
        writer
            .release()
            .await
            .expect("the probe releases its write lease");
        let Some(reader) = probe
            .rwlock(RW_KEY)
            .try_acquire_read(long())
            .await
            .unwrap_or_else(|err| fail(err))
        else {
            return false;
        };
        reader
            .release()
            .await
            .expect("the probe releases its read lease");
        true
    }

    /// Whether nothing of `kind` is left: not in Redis (for the shared kinds
    /// not even a subscriber of their release channels), and not as the
    /// probe manager sees it.
    async fn nothing_left(&self, kind: Kind) -> bool {
        match kind {
            Kind::Lock => !self.lock_exists().await,
            Kind::Permit => {
                !self.redis_holds(kind)
                    && !self.redis_has_subscribers(kind)
                    && self.probe_takes_every_permit().await
            }
            Kind::ReadWrite => {
                !self.redis_holds(kind)
                    && !self.redis_has_subscribers(kind)
                    && self.probe_takes_write_then_read().await
            }
        }
    }

    /// Fails the test unless nothing of `kind` (for a lock: no lock on
    /// `KEY`, and no place in its queue) is left within [`PROMPTLY`].
    async fn assert_nothing_left(&self, kind: Kind, what: &str, polls: usize) {
        // Commands the dropped future had already handed to the connection
        // (an attempt, then its undo) are still on their way through the
        // proxy: let them land before looking, so the next round starts clean.
        tokio::time::sleep(6 * LATENCY).await;
        let freed = poll_async(PROMPTLY, || self.nothing_left(kind)).await;
        assert!(
            freed,
            "{what} dropped after poll {polls} left its {kind:?} behind"
        );
    }
}

/// Counts bodies running under `KEY`; two at once is a double grant.
#[derive(Default)]
struct Occupancy(AtomicUsize);

impl Occupancy {
    /// Occupies `KEY` for `hold`, or until this future is dropped.
    async fn occupy(&self, hold: Duration) {
        self.occupy_up_to(1, hold).await;
    }

    /// Occupies a resource that admits `most` holders at once, for `hold` or
    /// until this future is dropped.
    async fn occupy_up_to(&self, most: usize, hold: Duration) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.0);
        assert!(before < most, "more than {most} holders at once");
        tokio::time::sleep(hold).await;
    }
}

/// Leaves the occupancy when the body ends, also by cancellation.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[distributed_lock(key = "cancel:{id}", ttl = "30s", wait = "5s", manager = manager)]
async fn annotated(manager: &LockManager, id: u32, occupancy: &Occupancy) -> Result<(), LockError> {
    occupancy.occupy(Duration::from_millis(20)).await;
    let _ = id;
    Ok(())
}

/// Drops every public future after each of its polls, in turn.
async fn every_future_at_every_await(setup: Setup) {
    let locks = &setup.delayed;
    let occupancy = Arc::new(Occupancy::default());
    let mut covered = Vec::new();

    let polls = cancel_at_each_poll(&setup, "try_acquire", || async {
        if let Ok(Some(guard)) = locks.try_acquire(KEY, long()).await {
            guard.release().await.expect("release");
        }
    })
    .await;
    covered.push(("try_acquire", polls));

    let polls = cancel_at_each_poll(&setup, "acquire behind a holder", || {
        acquire_behind_a_holder(locks, long())
    })
    .await;
    covered.push(("acquire behind a holder", polls));

    let polls = cancel_at_each_poll(&setup, "fenced try_acquire", || async {
        if let Ok(Some(guard)) = locks.try_acquire(KEY, long().fenced(true)).await {
            guard.release().await.expect("release");
        }
    })
    .await;
    covered.push(("fenced try_acquire", polls));

    let polls = cancel_at_each_poll(&setup, "fenced acquire behind a holder", || {
        acquire_behind_a_holder(locks, long().fenced(true))
    })
    .await;
    covered.push(("fenced acquire behind a holder", polls));

    let polls = cancel_at_each_poll(&setup, "acquire_all", || async {
        if let Ok(both) = locks.acquire_all(["cancel:0", KEY], long()).await {
            both.release().await.expect("release");
        }
    })
    .await;
    covered.push(("acquire_all", polls));

    let polls = cancel_at_each_poll(&setup, "try_acquire_all", || async {
        if let Ok(Some(both)) = locks.try_acquire_all(["cancel:0", KEY], long()).await {
            both.release().await.expect("release");
        }
    })
    .await;
    covered.push(("try_acquire_all", polls));

    let polls = cancel_at_each_poll(&setup, "release", || async {
        let guard = locks
            .try_acquire(KEY, long())
            .await
            .expect("acquire")
            .expect("free");
        guard.release().await.expect("release");
    })
    .await;
    covered.push(("release (with its acquire)", polls));

    let polls = cancel_at_each_poll(&setup, "with_lock", || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            let body = occupancy.occupy(Duration::from_millis(20));
            locks
                .with_lock(KEY, long().wait(Duration::from_secs(5)), body)
                .await
                .expect("with_lock");
        }
    })
    .await;
    covered.push(("with_lock", polls));

    let polls = cancel_at_each_poll(&setup, "annotated call", || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            annotated(locks, 1, &occupancy).await.expect("annotated");
        }
    })
    .await;
    covered.push(("annotated call", polls));

    for (what, polls) in covered {
        assert!(
            polls >= 1,
            "{what} completed on its first poll: nothing was cancelled"
        );
    }
}

/// Takes `KEY`, releases it 30 ms later from a task, and meanwhile waits for
/// it with `options` (up to 5 s), releasing it once granted.
async fn acquire_behind_a_holder(locks: &LockManager, options: LockOptions) {
    let holder = locks
        .try_acquire(KEY, long())
        .await
        .expect("holder")
        .expect("the key is free between rounds");
    let release_soon = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        holder.release().await.expect("holder releases");
    });
    let waiting = options.wait(Duration::from_secs(5));
    let inner = drop_after_polls(locks.acquire(KEY, waiting), usize::MAX);
    if let Some(Ok(guard)) = inner.await {
        guard.release().await.expect("release");
    }
    release_soon.await.expect("release task");
}

/// One public future cancelled at each of its `.await` points in turn.
struct Covered {
    what: &'static str,
    /// How many cancellation points it had.
    polls: usize,
    /// Whether it waits even in memory, where taking a free lease completes
    /// on the first poll: behind a holder, or running a body that sleeps.
    waits: bool,
}

impl Covered {
    /// Fails the test for a future that completed on its first poll (so
    /// nothing was cancelled) where it must have been pending: everywhere
    /// for one that waits, and on Redis, behind its delaying proxies, for
    /// every future.
    #[track_caller]
    fn assert_cancelled(covered: &[Covered], setup: &Setup) {
        for Covered { what, polls, waits } in covered {
            if *waits || setup.memory.is_none() {
                assert!(
                    *polls >= 1,
                    "{what} completed on its first poll: nothing was cancelled"
                );
            }
        }
    }
}

/// Drops every public future of a counting semaphore after each of its
/// polls, in turn: taking a permit of a free semaphore and releasing it
/// (the release is dropped too), waiting behind full permits, and
/// `with_permit`. Nothing may be left after any drop.
async fn semaphore_futures_at_every_await(setup: &Setup) -> Vec<Covered> {
    let semaphore = &setup.delayed.semaphore(SEM_KEY, SEM_PERMITS);
    let occupancy = Arc::new(Occupancy::default());
    let mut covered = Vec::new();

    let what = "semaphore acquire, then release";
    let polls = cancel_kind_at_each_poll(setup, Kind::Permit, what, || async {
        let permit = semaphore.acquire(long()).await.expect("a free permit");
        permit.release().await.expect("release");
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: false,
    });

    let what = "semaphore acquire behind full permits";
    let polls = cancel_kind_at_each_poll(setup, Kind::Permit, what, || {
        permit_behind_full_permits(semaphore)
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });

    let what = "with_permit";
    let polls = cancel_kind_at_each_poll(setup, Kind::Permit, what, || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            let body = occupancy.occupy_up_to(SEM_PERMITS as usize, Duration::from_millis(20));
            semaphore
                .with_permit(long().wait(Duration::from_secs(5)), body)
                .await
                .expect("with_permit");
        }
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });
    covered
}

/// Takes every permit of `semaphore`, gives them back [`HOLDER_LEAVES_AFTER`]
/// later from a task, and meanwhile waits (up to 5 s) for a permit,
/// releasing it once granted.
async fn permit_behind_full_permits(semaphore: &Semaphore) {
    let mut holders = Vec::new();
    for _ in 0..SEM_PERMITS {
        let holder = semaphore
            .try_acquire(long())
            .await
            .expect("holder")
            .expect("the permits are free between rounds");
        holders.push(holder);
    }
    let release_soon = tokio::spawn(async move {
        tokio::time::sleep(HOLDER_LEAVES_AFTER).await;
        for holder in holders {
            holder.release().await.expect("holder releases");
        }
    });
    let permit = semaphore
        .acquire(long().wait(Duration::from_secs(5)))
        .await
        .expect("a permit once the holders left");
    permit.release().await.expect("release");
    release_soon.await.expect("release task");
}

/// Drops every public future of a read/write lock after each of its polls,
/// in turn: read and write acquisitions of a free lock with their releases
/// (dropped too), a reader waiting behind a writer, a writer waiting behind
/// a reader (whose intent must go with it), fenced or not, and `with_read`
/// and `with_write`. Nothing may be left after any drop.
async fn rwlock_futures_at_every_await(setup: &Setup) -> Vec<Covered> {
    let locks = &setup.delayed;
    let occupancy = Arc::new(Occupancy::default());
    let mut covered = Vec::new();
    let waiting = || long().wait(Duration::from_secs(5));

    let what = "acquire_read, then release";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || async {
        let reader = locks
            .rwlock(RW_KEY)
            .acquire_read(long())
            .await
            .expect("a free lock");
        reader.release().await.expect("release");
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: false,
    });

    let what = "acquire_write, then release";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || async {
        let writer = locks
            .rwlock(RW_KEY)
            .acquire_write(long())
            .await
            .expect("a free lock");
        writer.release().await.expect("release");
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: false,
    });

    let what = "acquire_read behind a writer";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || {
        reader_behind_a_writer(locks)
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });

    let what = "acquire_write behind a reader";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || {
        writer_behind_a_reader(locks, waiting())
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });

    let what = "fenced acquire_write behind a reader";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || {
        writer_behind_a_reader(locks, waiting().fenced(true))
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });

    let what = "with_read";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            let body = occupancy.occupy(Duration::from_millis(20));
            locks
                .rwlock(RW_KEY)
                .with_read(waiting(), body)
                .await
                .expect("with_read");
        }
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });

    let what = "with_write";
    let polls = cancel_kind_at_each_poll(setup, Kind::ReadWrite, what, || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            let body = occupancy.occupy(Duration::from_millis(20));
            locks
                .rwlock(RW_KEY)
                .with_write(waiting(), body)
                .await
                .expect("with_write");
        }
    })
    .await;
    covered.push(Covered {
        what,
        polls,
        waits: true,
    });
    covered
}

/// Takes the write lease of [`RW_KEY`], gives it back
/// [`HOLDER_LEAVES_AFTER`] later from a task, and meanwhile waits (up to
/// 5 s) for a read lease, releasing it once granted.
async fn reader_behind_a_writer(locks: &LockManager) {
    let writer = locks
        .rwlock(RW_KEY)
        .try_acquire_write(long())
        .await
        .expect("writer")
        .expect("the lock is free between rounds");
    let release_soon = tokio::spawn(async move {
        tokio::time::sleep(HOLDER_LEAVES_AFTER).await;
        writer.release().await.expect("writer releases");
    });
    let reader = locks
        .rwlock(RW_KEY)
        .acquire_read(long().wait(Duration::from_secs(5)))
        .await
        .expect("a read lease once the writer left");
    reader.release().await.expect("release");
    release_soon.await.expect("release task");
}

/// Takes a read lease of [`RW_KEY`], gives it back [`HOLDER_LEAVES_AFTER`]
/// later from a task, and meanwhile waits for the write lease with
/// `options` (its first attempt leaves an intent), releasing it once
/// granted.
async fn writer_behind_a_reader(locks: &LockManager, options: LockOptions) {
    let reader = locks
        .rwlock(RW_KEY)
        .try_acquire_read(long())
        .await
        .expect("reader")
        .expect("the lock is free between rounds");
    let release_soon = tokio::spawn(async move {
        tokio::time::sleep(HOLDER_LEAVES_AFTER).await;
        reader.release().await.expect("reader releases");
    });
    let writer = locks
        .rwlock(RW_KEY)
        .acquire_write(options)
        .await
        .expect("the write lease once the reader left");
    writer.release().await.expect("release");
    release_soon.await.expect("release task");
}

/// Runs `make()` dropped after poll 1, 2, … until one run completes by
/// itself; after each, checks that no lock is left. Returns how many
/// cancellation points it found.
async fn cancel_at_each_poll<F, Fut>(setup: &Setup, what: &str, make: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    cancel_kind_at_each_poll(setup, Kind::Lock, what, make).await
}

/// [`cancel_at_each_poll`] for a future of `kind`: after each drop, nothing
/// of that kind may be left.
async fn cancel_kind_at_each_poll<F, Fut>(setup: &Setup, kind: Kind, what: &str, make: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    for polls in 1..=MAX_POLLS {
        let completed = drop_after_polls(make(), polls).await.is_some();
        setup.assert_nothing_left(kind, what, polls).await;
        if completed {
            return polls - 1;
        }
    }
    panic!("{what} was still pending after {MAX_POLLS} polls");
}

// Each sweep on each backend that has its kind, as `BACKEND::SWEEP`. Valkey
// 9.1 and Redis 8.6 release a plain lock with their own commands (`DELIFEQ`,
// `DELEX … IFEQ`) and renew with `SET … IFEQ`: those native steps get the
// lock sweep too.
support::tests_on!(
    redis,
    super::Setup::redis(1).await,
    [
        leaves_no_lock_when_any_future_is_dropped_at_any_await,
        leaves_no_permit_when_any_semaphore_future_is_dropped_at_any_await,
        leaves_no_lease_or_intent_when_any_rwlock_future_is_dropped_at_any_await,
    ]
);
support::tests_on!(
    valkey,
    super::Setup::servers(1, super::Engine::Valkey).await,
    [leaves_no_lock_when_any_future_is_dropped_at_any_await]
);
support::tests_on!(
    redis8,
    super::Setup::servers(1, super::Engine::Redis8).await,
    [leaves_no_lock_when_any_future_is_dropped_at_any_await]
);
support::tests_on!(
    redlock,
    super::Setup::redis(3).await,
    [
        leaves_no_lock_when_any_future_is_dropped_at_any_await,
        refuses_permits_and_rw_locks_without_leaving_anything,
    ]
);
support::tests_on!(
    cluster,
    super::Setup::cluster().await,
    [
        leaves_no_lock_when_any_future_is_dropped_at_any_await,
        leaves_no_permit_when_any_semaphore_future_is_dropped_at_any_await,
        leaves_no_lease_or_intent_when_any_rwlock_future_is_dropped_at_any_await,
    ]
);
support::tests_on!(
    memory,
    super::Setup::memory(),
    [
        leaves_no_lock_when_with_lock_is_dropped_at_any_await,
        leaves_no_permit_when_any_semaphore_future_is_dropped_at_any_await,
        leaves_no_lease_or_intent_when_any_rwlock_future_is_dropped_at_any_await,
    ]
);

async fn leaves_no_lock_when_any_future_is_dropped_at_any_await(setup: Setup) {
    every_future_at_every_await(setup).await;
}

/// In memory, `with_lock` around a body that sleeps, dropped at each poll.
async fn leaves_no_lock_when_with_lock_is_dropped_at_any_await(setup: Setup) {
    let locks = &setup.delayed;
    let polls = cancel_at_each_poll(&setup, "with_lock", || async {
        locks
            .with_lock(KEY, long(), tokio::time::sleep(Duration::from_millis(5)))
            .await
            .expect("with_lock");
    })
    .await;
    assert!(polls >= 1, "the body's sleep is a cancellation point");
}

async fn leaves_no_permit_when_any_semaphore_future_is_dropped_at_any_await(setup: Setup) {
    let covered = semaphore_futures_at_every_await(&setup).await;
    Covered::assert_cancelled(&covered, &setup);
}

async fn leaves_no_lease_or_intent_when_any_rwlock_future_is_dropped_at_any_await(setup: Setup) {
    let covered = rwlock_futures_at_every_await(&setup).await;
    Covered::assert_cancelled(&covered, &setup);
}

/// Redlock has no semaphores or read/write locks: every public future of
/// these kinds returns `InvalidOptions` naming Redlock (no panic, no hang),
/// runs no body, and writes nothing of these kinds to any node.
async fn refuses_permits_and_rw_locks_without_leaving_anything(setup: Setup) {
    let locks = &setup.delayed;
    let semaphore = locks.semaphore(SEM_KEY, SEM_PERMITS);
    let waiting = || long().wait(Duration::from_secs(5));
    let ran = AtomicUsize::new(0);
    let body = || async {
        ran.fetch_add(1, Ordering::SeqCst);
    };
    let refusals = [
        (
            "semaphore try_acquire",
            within(semaphore.try_acquire(long())).await.map(drop),
        ),
        (
            "semaphore acquire",
            within(semaphore.acquire(waiting())).await.map(drop),
        ),
        (
            "with_permit",
            within(semaphore.with_permit(waiting(), body())).await,
        ),
        (
            "try_acquire_read",
            within(locks.rwlock(RW_KEY).try_acquire_read(long()))
                .await
                .map(drop),
        ),
        (
            "acquire_read",
            within(locks.rwlock(RW_KEY).acquire_read(waiting()))
                .await
                .map(drop),
        ),
        (
            "try_acquire_write",
            within(locks.rwlock(RW_KEY).try_acquire_write(long()))
                .await
                .map(drop),
        ),
        (
            "acquire_write",
            within(locks.rwlock(RW_KEY).acquire_write(waiting()))
                .await
                .map(drop),
        ),
        (
            "with_read",
            within(locks.rwlock(RW_KEY).with_read(waiting(), body())).await,
        ),
        (
            "with_write",
            within(locks.rwlock(RW_KEY).with_write(waiting(), body())).await,
        ),
    ];
    for (what, refused) in refusals {
        match refused {
            Err(LockError::InvalidOptions(message)) => {
                assert!(message.contains("Redlock"), "{what}: {message}");
            }
            other => panic!("{what} on Redlock: expected InvalidOptions, got {other:?}"),
        }
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a refused call ran its body");
    // Let anything sent land before looking.
    tokio::time::sleep(6 * LATENCY).await;
    for kind in [Kind::Permit, Kind::ReadWrite] {
        assert!(
            !setup.redis_holds(kind),
            "a refused call left its {kind:?} on a node"
        );
    }
}
