//! Fencing tokens protect storage from a holder whose lease ran out while it
//! was paused: the store keeps the highest token it has seen and rejects
//! writes that carry a lower one.

use std::sync::Mutex;
use std::time::Duration;

use distributed_lock::{fencing_token, LockError, LockManager, LockOptions};
use distributed_lock_testkit::RedisServer;

/// A store that accepts a write only with a token at least as high as every
/// token it has accepted before (what `UPDATE … WHERE fence <= $token` does).
#[derive(Default)]
struct FencedStore {
    state: Mutex<(u64, Vec<&'static str>)>,
}

#[derive(Debug, PartialEq)]
struct StaleWrite {
    token: u64,
    highest: u64,
}

impl FencedStore {
    fn write(&self, token: u64, value: &'static str) -> Result<(), StaleWrite> {
        let mut state = self.state.lock().unwrap();
        if token < state.0 {
            return Err(StaleWrite {
                token,
                highest: state.0,
            });
        }
        state.0 = token;
        state.1.push(value);
        Ok(())
    }

    fn values(&self) -> Vec<&'static str> {
        self.state.lock().unwrap().1.clone()
    }
}

/// Retries (bounded: 10 s) until the manager talks to the restarted server again.
async fn acquire_after_restart(locks: &LockManager, key: &str) -> distributed_lock::LockGuard {
    for _ in 0..100 {
        match locks.acquire(key, LockOptions::new()).await {
            Ok(guard) => return guard,
            Err(LockError::Connection(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(other) => panic!("unexpected error after restart: {other}"),
        }
    }
    panic!("no acquisition within 10 s of the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_whose_lease_was_taken_over_cannot_write() {
    let server = RedisServer::start();
    let a = LockManager::connect(&server.url()).await.unwrap();
    let b = LockManager::connect(&server.url()).await.unwrap();
    let store = FencedStore::default();

    let stale = a
        .acquire(
            "doc:1",
            LockOptions::new()
                .ttl(Duration::from_millis(200))
                .renew(false),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // a GC pause, a stalled VM…

    let fresh = b.acquire("doc:1", LockOptions::new()).await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    store
        .write(fresh.fencing_token(), "written by the new holder")
        .unwrap();

    assert!(
        stale.is_lost(),
        "the paused holder can know its lease is gone"
    );
    let rejected = store.write(stale.fencing_token(), "written by the stale holder");
    assert_eq!(
        rejected,
        Err(StaleWrite {
            token: stale.fencing_token(),
            highest: fresh.fencing_token()
        })
    );
    assert_eq!(store.values(), vec!["written by the new holder"]);
    assert!(matches!(
        stale.release().await,
        Err(LockError::LeaseLost { .. })
    ));
    fresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_writes_with_the_token_of_its_own_lock_scope() {
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.unwrap();
    let store = FencedStore::default();
    for value in ["first", "second", "third"] {
        locks
            .with_lock("doc:2", LockOptions::new(), async {
                let token = fencing_token().expect("inside a lock scope");
                store.write(token, value)
            })
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(store.values(), vec!["first", "second", "third"]);
    assert_eq!(fencing_token(), None, "no token outside a lock scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_accepts_new_holder_after_lock_server_restarts_empty() {
    let mut server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.unwrap();
    let store = FencedStore::default();
    let ttl = Duration::from_millis(200);

    let before = locks
        .acquire("doc:3", LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    store
        .write(before.fencing_token(), "before the restart")
        .unwrap();
    before.release().await.unwrap();

    server.kill();
    tokio::time::sleep(ttl + Duration::from_millis(50)).await; // the delayed-restart rule
    server.restart_empty();

    let after = acquire_after_restart(&locks, "doc:3").await;
    store
        .write(after.fencing_token(), "after the restart")
        .expect("a restarted server without persistence still issues higher tokens");
    assert_eq!(
        store.values(),
        vec!["before the restart", "after the restart"]
    );
    after.release().await.unwrap();
}
