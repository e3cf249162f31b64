//! Read/write locks (`LockManager::acquire_read` / `acquire_write`,
//! `#[distributed_lock(mode = "read" | "write")]`) beyond what
//! `conformance_shared.rs` runs on every backend: 200 tasks over three
//! managers never overlapping a writer, a waiting writer not starved by
//! readers that keep arriving, a reader's member removed behind its back, a
//! SIGKILLed reader process, cancellation at every `.await`, Redlock's
//! refusal, and the attribute.
//!
//! The names follow the default namespace: the read/write lock on `k` keeps
//! its writer in `lock-rw:k`, its readers in the sorted set `lock-read:k`
//! and its waiting writers in `lock-intent:k`. Every loop is bounded in
//! count and time.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, fencing_token, LockError, LockManager, LockOptions};
use leasehold_testkit::{poll_until, RedisServer, RespValue};
use support::{
    connect, drop_after_polls, join_within, long, poll_async, redlock, waiting, within, Harness,
    Visit, VisitLog, PROMPTLY,
};

/// `tasks` tasks spread over `managers`, every fifth a writer, each visit
/// the read/write lock `catalog` once (waiting up to 60 s): all done within
/// 90 s, no write overlapping any other visit, and some reads shared.
async fn writers_never_overlap_anyone(managers: &[LockManager], tasks: usize) {
    let log = Arc::new(VisitLog::default());
    let handles = (0..tasks)
        .map(|task| {
            let locks = managers[task % managers.len()].clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let options = waiting(Duration::from_secs(60));
                if task % 5 == 0 {
                    let guard = locks
                        .rwlock("catalog")
                        .acquire_write(options)
                        .await
                        .unwrap();
                    log.visit(Visit::Write).await;
                    guard.release().await.expect("still our write lease");
                } else {
                    let guard = locks.rwlock("catalog").acquire_read(options).await.unwrap();
                    log.visit(Visit::Read).await;
                    guard.release().await.expect("still our read lease");
                }
            })
        })
        .collect();
    join_within(handles, Duration::from_secs(90), "every task's visit").await;
    assert_eq!(log.count(Visit::Read) + log.count(Visit::Write), tasks);
    assert!(log.check() > 0, "no two reads ever shared the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_tasks_over_three_managers_never_overlap_a_writer() {
    let server = RedisServer::start();
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(connect(&server.url()).await);
    }
    writers_never_overlap_anyone(&managers, 200).await;
}

/// Which side of a read/write lock a task takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

/// Holds the `side` lease of `key` through `locks` for 60 ms, waiting up to
/// `wait` for it; returns how long it waited.
async fn visit(
    locks: &LockManager,
    key: &str,
    side: Side,
    wait: Duration,
    hold: Duration,
) -> Duration {
    let started = Instant::now();
    let rwlock = locks.rwlock(key);
    let options = waiting(wait);
    let release = match side {
        Side::Read => {
            let guard = rwlock.acquire_read(options).await;
            let guard = guard.unwrap_or_else(|err| panic!("{side:?} not starved: {err:?}"));
            let waited = started.elapsed();
            tokio::time::sleep(hold).await;
            guard.release().await.map(|()| waited)
        }
        Side::Write => {
            let guard = rwlock.acquire_write(options).await;
            let guard = guard.unwrap_or_else(|err| panic!("{side:?} not starved: {err:?}"));
            let waited = started.elapsed();
            tokio::time::sleep(hold).await;
            guard.release().await.map(|()| waited)
        }
    };
    release.unwrap()
}

/// Tasks of side `arriving` keep coming through `crowd`, each holding 60 ms,
/// a new one every 10 ms (so that side always holds the lock or waits for
/// it): a task of the other side that starts waiting among them through
/// `newcomer` gets in within 2 s, while they still arrive. Readers wait for
/// at most the writer holding the lock and the next (the readers' turn);
/// a writer for the readers inside to drain (its intent).
async fn waiting_side_is_not_starved(crowd: &LockManager, newcomer: &LockManager, arriving: Side) {
    let key = format!("starve-{arriving:?}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arrivals = {
        let (crowd, stop, key) = (crowd.clone(), Arc::clone(&stop), key.clone());
        tokio::spawn(async move {
            let mut visits = Vec::new();
            for _ in 0..1000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let (crowd, key) = (crowd.clone(), key.clone());
                visits.push(tokio::spawn(async move {
                    let hold = Duration::from_millis(60);
                    visit(&crowd, &key, arriving, Duration::from_secs(60), hold).await;
                }));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            visits
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = match arriving {
        Side::Read => Side::Write,
        Side::Write => Side::Read,
    };
    let waited = visit(
        newcomer,
        &key,
        other,
        Duration::from_secs(5),
        Duration::ZERO,
    )
    .await;
    assert!(
        !arrivals.is_finished(),
        "{arriving:?} tasks stopped arriving"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        waited < Duration::from_secs(2),
        "the {other:?} task waited {waited:?} among arriving {arriving:?} tasks"
    );
    let visits = within(arrivals).await.unwrap();
    join_within(visits, Duration::from_secs(60), "the arriving tasks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_writer_completes_while_readers_keep_arriving() {
    let harness = Harness::redis().await;
    waiting_side_is_not_starved(&harness.a, &harness.b, Side::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_waiting_writer_completes_while_readers_keep_arriving() {
    let harness = Harness::memory();
    waiting_side_is_not_starved(&harness.a, &harness.b, Side::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_reader_completes_while_writers_keep_arriving() {
    let harness = Harness::redis().await;
    waiting_side_is_not_starved(&harness.a, &harness.b, Side::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_waiting_reader_completes_while_writers_keep_arriving() {
    let harness = Harness::memory();
    waiting_side_is_not_starved(&harness.a, &harness.b, Side::Write).await;
}

/// A read lease whose member is removed behind its back is reported lost by
/// its next renewal, its release says so, and a writer can get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_reader_is_reported_lost() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let options = LockOptions::new().ttl(Duration::from_millis(900));
    let guard = within(locks.rwlock("doc").acquire_read(options))
        .await
        .unwrap();
    let removed = server
        .command(&["ZREM", "lock-read:doc", guard.token()])
        .unwrap();
    assert_eq!(removed.as_integer(), Some(1));
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the loss is reported by the next renewal");
    assert!(guard.is_lost());
    let writer = within(locks.rwlock("doc").try_acquire_write(long()))
        .await
        .unwrap();
    assert!(writer.is_some(), "the removed reader still blocks writers");
    assert!(matches!(
        guard.release().await,
        Err(LockError::LeaseLost { .. })
    ));
}

/// Acquisitions dropped at each of their `.await` points in turn, on a free
/// lock and behind a holder, leave nothing behind: afterwards a writer gets
/// the lock at once (no reader or writer left) and a reader too (no
/// writer's intent left).
async fn cancelled_acquisitions_leave_nothing(locks: &LockManager) {
    let is_free = || async {
        let Some(writer) = locks
            .rwlock("cancel")
            .try_acquire_write(long())
            .await
            .unwrap()
        else {
            return false;
        };
        writer.release().await.unwrap();
        let Some(reader) = locks
            .rwlock("cancel")
            .try_acquire_read(long())
            .await
            .unwrap()
        else {
            return false;
        };
        reader.release().await.unwrap();
        true
    };
    for write in [false, true] {
        let mut completed = false;
        for polls in 1..=30 {
            let released = if write {
                let acquired =
                    drop_after_polls(locks.rwlock("cancel").acquire_write(long()), polls).await;
                match acquired {
                    Some(guard) => Some(guard.unwrap().release().await),
                    None => None,
                }
            } else {
                let acquired =
                    drop_after_polls(locks.rwlock("cancel").acquire_read(long()), polls).await;
                match acquired {
                    Some(guard) => Some(guard.unwrap().release().await),
                    None => None,
                }
            };
            if let Some(released) = released {
                released.expect("still ours");
                completed = true;
                break;
            }
            assert!(
                poll_async(PROMPTLY, is_free).await,
                "a {} acquisition dropped after {polls} polls left something behind",
                if write { "write" } else { "read" }
            );
        }
        assert!(completed, "an acquisition completes within 30 polls");
    }
    // A writer waiting behind a reader, dropped asleep or timed out, leaves
    // no intent: readers get in again.
    let reader = locks.rwlock("cancel").acquire_read(long()).await.unwrap();
    for polls in 1..=4 {
        let rwlock = locks.rwlock("cancel");
        let writer = rwlock.acquire_write(waiting(Duration::from_millis(300)));
        let outcome = within(drop_after_polls(writer, polls)).await;
        assert!(
            matches!(outcome, None | Some(Err(LockError::Timeout { .. }))),
            "a writer behind a reader got {outcome:?}"
        );
        let another = poll_async(PROMPTLY, || async {
            match locks
                .rwlock("cancel")
                .try_acquire_read(long())
                .await
                .unwrap()
            {
                Some(guard) => {
                    guard.release().await.unwrap();
                    true
                }
                None => false,
            }
        })
        .await;
        assert!(
            another,
            "a dropped writer's intent still holds readers back"
        );
    }
    reader.release().await.unwrap();
    assert!(
        poll_async(PROMPTLY, is_free).await,
        "something was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_nothing_behind() {
    let harness = Harness::redis().await;
    cancelled_acquisitions_leave_nothing(&harness.a).await;
    // The namespace's node marker stays on purpose (the lock-delay's), and
    // the notes the sessions of its check left beside it (`lock-node:`
    // then a session's nonce) end by themselves within a second.
    let left = harness.server().command(&["KEYS", "*"]).unwrap();
    let left: Vec<&str> = match &left {
        RespValue::Array(keys) => keys.iter().filter_map(RespValue::as_str).collect(),
        other => panic!("KEYS replied {other:?}"),
    };
    let is_note = |key: &str| {
        key.strip_prefix("lock-node:")
            .is_some_and(|nonce| nonce.len() == 32 && nonce.chars().all(|c| c.is_ascii_hexdigit()))
    };
    let left: Vec<&str> = left.into_iter().filter(|key| !is_note(key)).collect();
    assert_eq!(left, ["lock-node:"], "keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_cancelled_acquisitions_leave_nothing_behind() {
    cancelled_acquisitions_leave_nothing(&LockManager::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_cancelled_acquisitions_leave_nothing_behind() {
    let harness = Harness::cluster().await;
    cancelled_acquisitions_leave_nothing(&harness.a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_read_write_locks() {
    let nodes = [RedisServer::start()];
    let locks = redlock(&nodes).await;
    for result in [
        locks.rwlock("k").try_acquire_read(long()).await.map(drop),
        locks.rwlock("k").try_acquire_write(long()).await.map(drop),
    ] {
        match result {
            Err(LockError::InvalidOptions(message)) => assert!(message.contains("Redlock")),
            other => panic!("expected InvalidOptions, got {other:?}"),
        }
    }
}

/// A catalog read and written through the attribute.
struct Catalog {
    locks: LockManager,
    log: Arc<VisitLog>,
}

impl Catalog {
    #[distributed_lock(key = "catalog:{id}", mode = "read", wait = "30s", manager = self.locks)]
    async fn show(&self, id: u32) -> Result<(), LockError> {
        let _ = id;
        self.log.visit(Visit::Read).await;
        Ok(())
    }

    /// A read that logs nothing, called inside `update`.
    #[distributed_lock(key = "catalog:{id}", mode = "read", manager = self.locks)]
    async fn peek(&self, id: u32) -> Result<bool, LockError> {
        let _ = id;
        Ok(true)
    }

    #[distributed_lock(key = "catalog:{id}", mode = "write", wait = "30s", fenced = true, manager = self.locks)]
    async fn update(&self, id: u32) -> Result<u64, LockError> {
        // A read inside the write re-enters at once.
        assert!(self.peek(id).await?);
        self.log.visit(Visit::Write).await;
        fencing_token().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn annotated_reads_and_writes_never_overlap() {
    let server = RedisServer::start();
    let log = Arc::new(VisitLog::default());
    let mut calls = Vec::new();
    for call in 0..30 {
        let catalog = Catalog {
            locks: connect(&server.url()).await,
            log: Arc::clone(&log),
        };
        calls.push(tokio::spawn(async move {
            if call % 3 == 0 {
                assert!(catalog.update(7).await.expect("the write lock within 30 s") > 0);
            } else {
                catalog.show(7).await.expect("a read lease within 30 s");
            }
        }));
    }
    join_within(calls, Duration::from_secs(60), "the annotated calls").await;
    assert_eq!(log.count(Visit::Write), 10);
    log.check();
}

/// The read lease in the holder process below.
const DYING_TTL: Duration = Duration::from_millis(1500);

/// The holder process of the test below: takes a read lease on `dying` and
/// holds it until it is killed. Run only as a child process.
#[tokio::test]
#[ignore = "a child process of `killed_readers_lease_ends_with_its_ttl`"]
async fn reader_process() {
    let Ok(url) = std::env::var("RWLOCK_CHILD_URL") else {
        return;
    };
    let locks = LockManager::connect(&url).await.expect("connect");
    let _reader = locks
        .rwlock("dying")
        .acquire_read(LockOptions::new().ttl(DYING_TTL))
        .await
        .expect("no writer");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

fn start_reader_process(url: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "rwlock::reader_process", "--ignored", "--quiet"])
        .env("RWLOCK_CHILD_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the reader process")
}

/// A reader killed with SIGKILL blocks writers until its lease ends: not
/// before (its last renewal was at most ttl/3 before the kill), and not much
/// after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_readers_lease_ends_with_its_ttl() {
    let server = RedisServer::start();
    let mut child = start_reader_process(&server.url());
    let held = || {
        server
            .command(&["ZCARD", "lock-read:dying"])
            .is_ok_and(|members| members.as_integer() == Some(1))
    };
    assert!(
        poll_until(Duration::from_secs(20), held),
        "the reader process took its lease"
    );
    // Past its first renewal, so the lease runs a full ttl from a renewal.
    tokio::time::sleep(DYING_TTL / 2).await;
    child.kill().expect("SIGKILL the reader");
    child.wait().expect("reap it");
    let killed = Instant::now();

    let locks = connect(&server.url()).await;
    let writer = within(
        locks
            .rwlock("dying")
            .acquire_write(waiting(Duration::from_secs(10))),
    )
    .await
    .expect("the dead reader's lease ends");
    let waited = killed.elapsed();
    assert!(
        waited >= DYING_TTL * 2 / 3 - Duration::from_millis(50),
        "a writer got in {waited:?} after the kill, while the reader's lease still ran"
    );
    assert!(
        waited < DYING_TTL + Duration::from_secs(1),
        "the dead reader blocked the writer {waited:?}"
    );
    writer.release().await.unwrap();
}
