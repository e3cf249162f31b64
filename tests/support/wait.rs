//! Bounded waiting: every wait of a test ends, by success or by a failed
//! assertion, within a known time.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::LockError;

/// How soon a lock must be free after its holder went away, and the bound on
/// anything that must happen at once.
pub const PROMPTLY: Duration = Duration::from_secs(2);

/// Upper bound for anything that must finish (or fail) rather than hang.
pub const NO_HANG: Duration = Duration::from_secs(10);

/// Pause between two looks at a condition in the bounded polling loops.
const POLL: Duration = Duration::from_millis(10);

/// Awaits `condition()` every 10 ms until it yields `true`, at most for
/// `timeout` (and so a bounded number of times). Returns whether it did.
pub async fn poll_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    let max_polls = timeout.as_millis() / POLL.as_millis() + 1;
    for _ in 0..max_polls {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    false
}

/// Awaits `step`, failing the test if it takes over [`NO_HANG`]: bounds a
/// step that would otherwise hang the test on a bug.
#[track_caller]
pub fn within<T>(step: impl Future<Output = T>) -> impl Future<Output = T> {
    let caller = std::panic::Location::caller();
    async move {
        tokio::time::timeout(NO_HANG, step)
            .await
            .unwrap_or_else(|_| panic!("step at {caller} took over {NO_HANG:?}"))
    }
}

/// The answer of `attempt` (`what`, for the failure message) once the
/// server answers: retried every 100 ms, within [`NO_HANG`], while it
/// fails with a connection error (a manager reconnecting after a restart,
/// a cluster client finding the promoted primary).
pub async fn answered<T, F, Fut>(what: &str, mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    let deadline = Instant::now() + NO_HANG;
    for _ in 0..NO_HANG.as_millis() / 100 + 1 {
        match within(attempt()).await {
            Ok(answer) => return answer,
            Err(LockError::Connection { .. }) if Instant::now() < deadline => {}
            Err(other) => panic!("{what}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: no answer within {NO_HANG:?}");
}

/// Awaits every spawned task, failing the test if they are not all done
/// within `limit`.
pub async fn join_within(tasks: Vec<tokio::task::JoinHandle<()>>, limit: Duration, what: &str) {
    let all = async {
        for task in tasks {
            task.await.expect("spawned task");
        }
    };
    tokio::time::timeout(limit, all)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"));
}
