//! `#[distributed_lock]` wherever a team writes it (issue 30, item 8): on a
//! method of an `#[async_trait]` impl, inside a `macro_rules!` that passes
//! the parameter's name, over a body that starts with `use` and `const`
//! under `clippy::items_after_statements`, and returning a `Result` alias
//! whose name does not end in `Result`. In memory: these are about the
//! expansion, not the backend.

use std::sync::Arc;

use async_trait::async_trait;
use leasehold::{distributed_lock, held_locks, LockError, LockManager, LockOptions};
use tokio::sync::Notify;

/// Whether `key` can be taken by someone else right now (taken and given
/// back at once).
async fn is_free(locks: &LockManager, key: &str) -> bool {
    match locks.try_acquire(key, LockOptions::new()).await.unwrap() {
        Some(guard) => {
            guard.release().await.unwrap();
            true
        }
        None => false,
    }
}

#[async_trait]
trait Payments: Send + Sync {
    async fn pay(&self, order: u64) -> Result<u64, LockError>;
}

/// Pauses inside `pay` until resumed, so the test can look at the lock.
struct Cards {
    locks: LockManager,
    entered: Notify,
    resume: Notify,
}

#[async_trait]
impl Payments for Cards {
    #[distributed_lock(key = "order:{order}", manager = self.locks)]
    async fn pay(&self, order: u64) -> Result<u64, LockError> {
        self.entered.notify_one();
        self.resume.notified().await;
        Ok(order)
    }
}

#[tokio::test]
async fn async_trait_method_holds_its_lock_while_its_boxed_future_runs() {
    let locks = LockManager::in_memory();
    let cards = Arc::new(Cards {
        locks: locks.clone(),
        entered: Notify::new(),
        resume: Notify::new(),
    });
    let service: Arc<dyn Payments> = cards.clone();

    // Building the future takes no lock: it is taken inside the future.
    let built = service.pay(7);
    assert!(is_free(&locks, "order:7").await, "locked before it ran");
    drop(built);

    let running = tokio::spawn(async move { service.pay(7).await });
    cards.entered.notified().await;
    assert!(
        !is_free(&locks, "order:7").await,
        "not held during the body"
    );
    cards.resume.notify_one();
    assert_eq!(running.await.unwrap().unwrap(), 7);
    assert!(
        is_free(&locks, "order:7").await,
        "still held after the body"
    );
}

/// Declares a locked getter whose parameter name the caller chooses: the
/// placeholder must resolve to that parameter, though the attribute is
/// written inside the macro.
macro_rules! locked_getter {
    ($name:ident, $param:ident) => {
        #[distributed_lock(key = "item:{id}", manager = locks)]
        async fn $name(locks: &LockManager, $param: u64) -> Result<Vec<String>, LockError> {
            let _ = $param;
            Ok(held_locks())
        }
    };
}

locked_getter!(item_keys, id);

#[tokio::test]
async fn placeholder_names_a_parameter_a_macro_rules_passed() {
    let locks = LockManager::in_memory();
    assert_eq!(item_keys(&locks, 5).await.unwrap(), ["item:5"]);
}

#[derive(Debug, thiserror::Error)]
enum ConfigError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot format the name")]
    Format,
}

/// A `Result` alias whose name does not end in `Result`.
type Fallible<T> = Result<T, ConfigError>;

/// `use` and `const` first, as many bodies start: the lint sees only these
/// statements, not the ones the expansion adds before them.
#[deny(clippy::items_after_statements)]
#[distributed_lock(key = "config:{name}", manager = locks)]
async fn configured(locks: &LockManager, name: &str) -> Fallible<String> {
    use std::fmt::Write as _;
    const PREFIX: &str = "cfg-";
    let mut out = String::new();
    write!(out, "{PREFIX}{name}").map_err(|_| ConfigError::Format)?;
    assert_eq!(held_locks(), [format!("config:{name}")]);
    Ok(out)
}

#[tokio::test]
async fn body_opening_with_items_and_a_fallible_alias_run_under_the_lock() {
    let locks = LockManager::in_memory();
    assert_eq!(configured(&locks, "db").await.unwrap(), "cfg-db");
}
