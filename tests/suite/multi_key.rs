//! Several keys at once (`LockManager::acquire_all`, `with_locks`) against a
//! real redis-server: all or nothing, in one canonical order, so opposite
//! orders never deadlock.
//!
//! Each test starts its own server on a free 127.0.0.1 port. Every loop is
//! bounded in count and time.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};
use leasehold_testkit::{poll_until, RedisServer, RespValue};
use support::{connect, is_free, lock_value, long, renewed, within, RENEWED_TTL};

const ACCOUNTS: usize = 5;
const START_BALANCE: i64 = 1_000;

/// Accounts whose updates race unless their locks are held: each transfer
/// reads both balances, yields, and writes them back, and marks the accounts
/// busy meanwhile so that an overlap is seen.
#[derive(Default)]
struct Bank {
    balances: Mutex<[i64; ACCOUNTS]>,
    busy: [AtomicBool; ACCOUNTS],
}

impl Bank {
    async fn transfer(&self, from: usize, to: usize, amount: i64) {
        for account in [from, to] {
            assert!(
                !self.busy[account].swap(true, Ordering::SeqCst),
                "account {account} is in two transfers at once"
            );
        }
        let (from_balance, to_balance) = {
            let balances = self.balances.lock().unwrap();
            (balances[from], balances[to])
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        {
            let mut balances = self.balances.lock().unwrap();
            balances[from] = from_balance - amount;
            balances[to] = to_balance + amount;
        }
        for account in [from, to] {
            self.busy[account].store(false, Ordering::SeqCst);
        }
    }
}

fn account(index: usize) -> String {
    format!("account:{index}")
}

/// 100 concurrent transfers among 5 accounts over 3 managers, half of them
/// naming their keys in the opposite order: none deadlocks or times out,
/// none overlaps another on an account, and the total is conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transfers_in_both_orders_conserve_the_total() {
    let server = RedisServer::start();
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(connect(&server.url()).await);
    }
    let bank = Arc::new(Bank::default());
    *bank.balances.lock().unwrap() = [START_BALANCE; ACCOUNTS];
    let mut transfers = Vec::new();
    for n in 0..100usize {
        let locks = managers[n % managers.len()].clone();
        let bank = Arc::clone(&bank);
        let from = n % ACCOUNTS;
        let to = (n * 7 + 1) % ACCOUNTS;
        let to = if to == from { (to + 1) % ACCOUNTS } else { to };
        let keys = if n % 2 == 0 {
            [account(from), account(to)]
        } else {
            [account(to), account(from)]
        };
        transfers.push(tokio::spawn(async move {
            let options = long().wait(Duration::from_secs(30));
            let amount = i64::try_from(n % 13).unwrap();
            locks
                .with_locks(keys, options, bank.transfer(from, to, amount))
                .await
        }));
    }
    for transfer in transfers {
        tokio::time::timeout(Duration::from_secs(60), transfer)
            .await
            .expect("a transfer hung")
            .unwrap()
            .expect("every transfer gets both locks");
    }
    let total: i64 = bank.balances.lock().unwrap().iter().sum();
    assert_eq!(total, START_BALANCE * i64::try_from(ACCOUNTS).unwrap());
    for index in 0..ACCOUNTS {
        assert!(is_free(&managers[0], &account(index)).await);
    }
}

/// A key named twice is taken once (no self-deadlock), and every key held
/// re-enters inside the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_collapse_and_the_body_re_enters_each_key() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let inner = locks.clone();
    let reentered = within(locks.with_locks(["a", "b", "a"], long(), async move {
        let a = inner.acquire("a", LockOptions::new()).await.unwrap();
        let b = inner.acquire("b", LockOptions::new()).await.unwrap();
        a.is_reentered() && b.is_reentered()
    }))
    .await
    .unwrap();
    assert!(reentered);
    assert!(is_free(&locks, "a").await && is_free(&locks, "b").await);
}

/// A key that cannot be had gives back the keys taken before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_key_gives_back_the_keys_taken_before_it() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let other = connect(&server.url()).await;
    let held = other.acquire("b", long()).await.unwrap();

    let result = within(locks.acquire_all(["c", "a", "b"], LockOptions::new())).await;
    assert!(
        matches!(result, Err(LockError::Busy { ref key, .. }) if key == "b"),
        "{result:?}"
    );
    assert!(is_free(&other, "a").await, "`a` was given back");
    assert!(is_free(&other, "c").await, "`c` was never taken");
    held.release().await.unwrap();
    let empty: [&str; 0] = [];
    assert!(matches!(
        locks.acquire_all(empty, long()).await,
        Err(LockError::InvalidOptions(_))
    ));
}

/// A set asked for with `hold_at_least` that fails on a busy key gives back
/// the keys it took at once: the hold is for a set that ran, not for a
/// partial acquisition. Once the set is held, releasing it keeps every key
/// for the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_set_with_hold_at_least_gives_back_its_keys_at_once() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let other = connect(&server.url()).await;
    let held = other.acquire("b", long()).await.unwrap();
    let holding = long().hold_at_least(Duration::from_secs(20));

    let failed = within(locks.acquire_all(["a", "b"], holding.clone())).await;
    assert!(
        matches!(failed, Err(LockError::Busy { ref key, .. }) if key == "b"),
        "{failed:?}"
    );
    assert!(is_free(&other, "a").await, "`a` kept for the hold");
    let skipped = within(locks.try_acquire_all(["a", "b"], holding.clone())).await;
    assert!(matches!(skipped, Ok(None)), "{skipped:?}");
    assert!(is_free(&other, "a").await, "`a` kept for the hold");

    held.release().await.unwrap();
    let both = within(locks.try_acquire_all(["a", "b"], holding))
        .await
        .unwrap()
        .expect("both keys are free");
    both.release().await.unwrap();
    assert!(
        !is_free(&other, "a").await && !is_free(&other, "b").await,
        "a set that was held keeps its keys for the hold"
    );
}

/// `try_acquire_all` and `try_with_locks` make one attempt per key: a busy
/// key skips the call (`Ok(None)`, the body does not run) and gives back the
/// keys taken before it; free keys are all taken and the body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_attempt_per_key_skips_when_any_key_is_busy() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let other = connect(&server.url()).await;
    let held = other.acquire("c", long()).await.unwrap();
    let ran = AtomicBool::new(false);
    let skipped = within(locks.try_with_locks(["c", "a"], long(), async {
        ran.store(true, Ordering::SeqCst);
    }))
    .await;
    assert!(matches!(skipped, Ok(None)), "{skipped:?}");
    assert!(!ran.load(Ordering::SeqCst), "the body ran without `c`");
    assert!(is_free(&other, "a").await, "`a` was given back");

    held.release().await.unwrap();
    let ran = within(locks.try_with_locks(["c", "a"], long(), async {
        assert!(!is_free(&other, "a").await && !is_free(&other, "c").await);
        7
    }))
    .await;
    assert!(matches!(ran, Ok(Some(7))), "{ran:?}");
    assert!(is_free(&other, "a").await && is_free(&other, "c").await);
}

/// Each key has its own fencing token; a key not held has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_has_its_own_fencing_token() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let earlier = locks.acquire("b", long()).await.unwrap();
    let before = earlier.fencing_token().await.unwrap();
    earlier.release().await.unwrap();

    let both = within(locks.acquire_all(["b", "a"], long())).await.unwrap();
    assert_eq!(both.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert!(both.fencing_token("b").await.unwrap() > before);
    both.fencing_token("a").await.unwrap();
    assert!(matches!(
        both.fencing_token("c").await,
        Err(LockError::NotHeld { .. })
    ));
    both.release().await.unwrap();
    assert!(is_free(&locks, "a").await && is_free(&locks, "b").await);
}

/// The remaining TTLs of `lock:a` and `lock:b`, read in one atomic script.
fn remaining_ttls(server: &RedisServer) -> (i64, i64) {
    let reply = server
        .command(&[
            "EVAL",
            "return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}",
            "2",
            "lock:a",
            "lock:b",
        ])
        .expect("PTTL of both keys");
    match reply {
        RespValue::Array(ttls) => match ttls.as_slice() {
            [a, b] => (a.as_integer().unwrap(), b.as_integer().unwrap()),
            other => panic!("two TTLs expected, got {other:?}"),
        },
        other => panic!("two TTLs expected, got {other:?}"),
    }
}

/// The keys of a set are renewed together, in one cycle: `a` is taken
/// 200 ms before `b` (held by another manager until then), yet after two
/// renewal periods both keys' TTLs are reset at the same moment each cycle,
/// so they stay within 40 ms of each other, where keys renewed on their own
/// schedules would stay about 200 ms apart. Both outlive their ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_set_are_renewed_together() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let other = connect(&server.url()).await;
    let ttl = Duration::from_millis(900);
    let held = other.acquire("b", long()).await.unwrap();
    let release_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.unwrap();
    });
    let options = LockOptions::new().ttl(ttl).wait(Duration::from_secs(5));
    let both = within(locks.acquire_all(["a", "b"], options))
        .await
        .unwrap();
    within(release_later).await.unwrap();

    tokio::time::sleep(ttl).await;
    for _ in 0..5 {
        let (a, b) = remaining_ttls(&server);
        assert!(a > 0 && b > 0, "a key expired: PTTL a {a}, b {b}");
        assert!(
            (a - b).abs() < 40,
            "the keys were renewed apart: PTTL a {a} ms, b {b} ms"
        );
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
    assert!(!both.is_lost());
    both.release().await.unwrap();
    assert!(is_free(&other, "a").await && is_free(&other, "b").await);
}

/// A key of a set renewed together that is taken from it (deleted here) is
/// reported lost at its next renewal, within one ttl, and only that key: the
/// set is lost, the other key is still held and renewed until the release,
/// which reports the lost key and frees the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_taken_from_a_set_renewed_together_is_lost_alone() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let ttl = RENEWED_TTL;
    let both = within(locks.acquire_all(["a", "b"], renewed()))
        .await
        .unwrap();
    server.command(&["DEL", "lock:b"]).unwrap();
    tokio::time::timeout(ttl, both.lost())
        .await
        .expect("the set is lost within one ttl of the key's deletion");
    assert!(both.guard("b").unwrap().is_lost());
    tokio::time::sleep(ttl).await;
    assert!(
        !both.guard("a").unwrap().is_lost(),
        "the key still held was reported lost with the other"
    );
    assert!(lock_value(&server, "a").as_str().is_some());
    let released = both.release().await;
    assert!(
        matches!(released, Err(LockError::LeaseLost { ref key }) if key == "b"),
        "{released:?}"
    );
    assert!(is_free(&locks, "a").await && is_free(&locks, "b").await);
}

/// A key of the set loses its lease while a later key is waited for: the
/// set is not handed out half held; the keys come back and the caller is
/// told which lease was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_whose_first_lease_is_lost_while_waiting_for_a_later_key_is_not_returned() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let rival = connect(&server.url()).await;
    let held = rival.acquire("b", long()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let taking = tokio::spawn({
        let locks = locks.clone();
        let options = LockOptions::new().ttl(ttl).wait(Duration::from_secs(10));
        async move { locks.acquire_all(["a", "b"], options).await }
    });
    assert!(
        poll_until(Duration::from_secs(2), || lock_value(&server, "a")
            .as_str()
            .is_some()),
        "the first key is taken"
    );
    server.command(&["DEL", "lock:a"]).unwrap();
    // The watchdog finds the first key gone within one ttl.
    tokio::time::sleep(ttl * 2).await;
    held.release().await.unwrap();
    let taken = within(taking).await.expect("acquire_all task");
    assert!(
        matches!(taken, Err(LockError::LeaseLost { ref key }) if key == "a"),
        "a set with a lost lease was handed out: {taken:?}"
    );
    assert!(is_free(&locks, "a").await && is_free(&locks, "b").await);
}

/// The body is cancelled as soon as the lease of any key is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_key_cancels_the_body() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let finished = Arc::new(AtomicBool::new(false));
    let body = {
        let finished = Arc::clone(&finished);
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let fixed = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .renew(false);
    let result = within(locks.with_locks(["x", "y"], fixed, body)).await;
    assert!(
        matches!(result, Err(LockError::LeaseLost { .. })),
        "{result:?}"
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was cancelled");
}

/// Keys held through `acquire_all` are busy for everyone else until released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_held_together_until_released() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let other: LockManager = connect(&server.url()).await;
    let both = within(locks.acquire_all(["p", "q"], long())).await.unwrap();
    assert!(!is_free(&other, "p").await && !is_free(&other, "q").await);
    assert!(!both.is_lost());
    both.release().await.unwrap();
    assert!(is_free(&other, "p").await && is_free(&other, "q").await);
}

/// Two accounts moved between through the attribute.
struct Ledger {
    locks: LockManager,
    bank: Arc<Bank>,
}

impl Ledger {
    #[distributed_lock(keys = ["account:{from}", "account:{to}"], wait = "30s", manager = self.locks)]
    async fn transfer(&self, from: usize, to: usize) -> Result<(), LockError> {
        if from != to {
            self.bank.transfer(from, to, 1).await;
        }
        Ok(())
    }
}

/// The attribute's `keys`: opposite orders at once neither deadlock nor
/// overlap, and `transfer(a, a)` takes its one key once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn annotated_transfers_lock_both_accounts_in_any_order() {
    let server = RedisServer::start();
    let bank = Arc::new(Bank::default());
    let mut calls = Vec::new();
    for n in 0..40usize {
        let ledger = Ledger {
            locks: connect(&server.url()).await,
            bank: Arc::clone(&bank),
        };
        let (from, to) = if n % 2 == 0 { (0, 1) } else { (1, 0) };
        calls.push(tokio::spawn(async move { ledger.transfer(from, to).await }));
    }
    for call in calls {
        within(call).await.unwrap().expect("both accounts locked");
    }
    assert_eq!(bank.balances.lock().unwrap()[..2], [0, 0]);
    let ledger = Ledger {
        locks: connect(&server.url()).await,
        bank: Arc::clone(&bank),
    };
    within(ledger.transfer(2, 2))
        .await
        .expect("one key, taken once");
}

/// Keys the holder process below takes, and the lease it gives them.
const DYING_KEYS: [&str; 3] = ["dying:a", "dying:b", "dying:c"];
const DYING_TTL: Duration = Duration::from_secs(1);

/// The holder process of the test below: takes every key of [`DYING_KEYS`]
/// and holds them until it is killed. Run only as a child process.
#[tokio::test]
#[ignore = "a child process of `killed_holder_of_several_keys_frees_them_all_by_ttl`"]
async fn holder_of_several_keys_process() {
    let Ok(url) = std::env::var("MULTI_KEY_CHILD_URL") else {
        return;
    };
    let locks = LockManager::connect(&url).await.expect("connect");
    let _held = locks
        .acquire_all(DYING_KEYS, LockOptions::new().ttl(DYING_TTL))
        .await
        .expect("the keys are free");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

fn start_holder_process(url: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "multi_key::holder_of_several_keys_process",
            "--ignored",
            "--quiet",
        ])
        .env("MULTI_KEY_CHILD_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holder process")
}

/// A holder of several keys killed with SIGKILL frees every one of them by
/// its TTL (the watchdog that renewed them died with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_of_several_keys_frees_them_all_by_ttl() {
    let server = RedisServer::start();
    let mut child = start_holder_process(&server.url());
    let all_held = || {
        DYING_KEYS
            .iter()
            .all(|key| lock_value(&server, key) != RespValue::Nil)
    };
    assert!(
        poll_until(Duration::from_secs(20), all_held),
        "the holder process took its keys"
    );
    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap it");
    let killed = Instant::now();

    let locks = connect(&server.url()).await;
    let all = within(locks.acquire_all(DYING_KEYS, long().wait(Duration::from_secs(10))))
        .await
        .expect("every key comes free");
    let waited = killed.elapsed();
    assert!(
        waited < DYING_TTL + Duration::from_secs(2),
        "the keys of a dead holder stayed taken {waited:?}"
    );
    all.release().await.unwrap();
}
