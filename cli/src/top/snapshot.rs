//! What `dlock top` shows at one moment, and the holders that changed or
//! vanished since the moment before.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use leasehold::{Holder, LockError, LockManager};

use crate::format;
use crate::locks::{self, HeldInfo, Kind};

/// Most locks inspected per refresh; the others are counted only.
const MOST_INSPECTED: usize = 1_000;
/// Most changes kept for display, newest first.
const MOST_CHANGES: usize = 50;
/// A lease with at most this much left at the last refresh (once the time
/// since is taken off) counts as having run out, not as freed early.
const EXPIRY_SLACK: Duration = Duration::from_millis(250);

/// Everything one frame shows.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The deployment and namespace.
    pub title: String,
    /// The glob the keys were listed with.
    pub pattern: String,
    /// When the snapshot was taken.
    pub taken_at: SystemTime,
    /// The held locks, sorted by key.
    pub locks: Vec<HeldLock>,
    /// Held locks listed but not inspected (past the first 1 000).
    pub not_inspected: usize,
    /// Changes seen between refreshes, newest first.
    pub changes: Vec<Change>,
    /// Why the last refresh failed, if it did (the rest is then older).
    pub problem: Option<String>,
}

/// One held lock of any kind; of several holders (a read/write lock's
/// writer and readers, a semaphore's permits), the writer, else the one
/// whose lease ends first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The key, without namespace.
    pub key: String,
    /// Which of the key's locks.
    pub kind: Kind,
    /// Its holder, if named.
    pub holder: Option<Holder>,
    /// How long it has been held, by the holder's clock against ours.
    pub held_for: Option<Duration>,
    /// Lease left in the backend.
    pub remaining: Option<Duration>,
    /// Waiters queued in the backend (a read/write lock's: its waiting
    /// writers; a semaphore's are not recorded there: 0).
    pub waiters: usize,
    /// Whether its holder released it within its `hold_at_least`: the lease
    /// ends with the hold, as planned.
    pub released: bool,
}

impl HeldLock {
    /// The lock `info` describes, seen at `now`.
    fn new(info: &HeldInfo, now: SystemTime) -> Self {
        let (holder, remaining) = info.shown();
        HeldLock {
            key: info.key().to_owned(),
            kind: info.kind(),
            holder: holder.cloned(),
            held_for: holder.map(|holder| format::since(holder.acquired_at, now)),
            remaining,
            waiters: info.waiters().unwrap_or(0),
            released: info.released(),
        }
    }

    /// The key as the tables show it: with its kind unless a plain lock,
    /// e.g. `doc (rw)`.
    pub fn shown_key(&self) -> String {
        match self.kind {
            Kind::Lock => self.key.clone(),
            kind => format!("{} ({})", self.key, kind.name()),
        }
    }
}

/// A lock whose holder changed or vanished between two refreshes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// When it was noticed.
    pub seen_at: SystemTime,
    /// The key, without namespace.
    pub key: String,
    /// Who held it before.
    pub before: Option<Holder>,
    /// What happened.
    pub kind: ChangeKind,
}

/// What happened to a lock between two refreshes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    /// Another holder has it, though the previous lease had time left: a
    /// hand-over on release, or an eviction.
    HolderChanged {
        /// The new holder, if named.
        after: Option<Holder>,
    },
    /// Nobody holds it, though the lease had time left: released, or
    /// released by force.
    FreedEarly,
    /// The lease ran out: the holder stopped renewing (crashed, paused or
    /// cut off), and the lock is free or taken by another.
    Expired,
    /// The holder had released it within its `hold_at_least`, and the hold
    /// ended as planned: not a lost holder.
    HoldEnded,
}

/// Takes snapshots one after another and remembers the changes between them.
#[derive(Debug)]
pub struct Collector {
    /// See [`Snapshot::title`].
    title: String,
    /// See [`Snapshot::pattern`].
    pattern: String,
    /// The last snapshot's locks and when it was started.
    previous: Option<(Instant, Vec<HeldLock>)>,
    /// Changes seen so far, newest first, at most [`MOST_CHANGES`].
    changes: VecDeque<Change>,
}

impl Collector {
    /// A collector of the locks matching `pattern` on the deployment `title` names.
    pub fn new(title: &str, pattern: &str) -> Self {
        Collector {
            title: title.to_owned(),
            pattern: pattern.to_owned(),
            previous: None,
            changes: VecDeque::new(),
        }
    }

    /// Lists and inspects the matching locks, and notes what changed since
    /// the last call.
    pub async fn collect(&mut self, manager: &LockManager) -> Result<Snapshot, LockError> {
        let started = Instant::now();
        let (infos, not_inspected) =
            locks::held_all(manager, &self.pattern, MOST_INSPECTED).await?;
        let now = SystemTime::now();
        let locks: Vec<HeldLock> = infos.iter().map(|info| HeldLock::new(info, now)).collect();
        if let Some((then, before)) = &self.previous {
            let cut_after = (not_inspected > 0)
                .then(|| locks.last().map(|lock| lock.key.as_str()))
                .flatten();
            for change in changes(before, &locks, started - *then, now, cut_after) {
                self.changes.push_front(change);
            }
            self.changes.truncate(MOST_CHANGES);
        }
        self.previous = Some((started, locks.clone()));
        Ok(Snapshot {
            title: self.title.clone(),
            pattern: self.pattern.clone(),
            taken_at: now,
            locks,
            not_inspected,
            changes: self.changes.iter().cloned().collect(),
            problem: None,
        })
    }
}

/// What happened to the plain locks of `before` by `after`, `elapsed`
/// later, noticed at `now`. Keys past `cut_after` (when the listing was cut)
/// are not compared. Read/write locks and semaphores are not: their shown
/// holder changes whenever another lease becomes the first to end.
fn changes(
    before: &[HeldLock],
    after: &[HeldLock],
    elapsed: Duration,
    now: SystemTime,
    cut_after: Option<&str>,
) -> Vec<Change> {
    let plain = |lock: &&HeldLock| lock.kind == Kind::Lock;
    before
        .iter()
        .filter(plain)
        .filter(|lock| cut_after.is_none_or(|last| lock.key.as_str() <= last))
        .filter_map(|old| {
            let new = after.iter().filter(plain).find(|new| new.key == old.key);
            // Two unnamed holders cannot be told apart: they count as one.
            if new.is_some_and(|new| new.holder == old.holder) {
                return None;
            }
            let had_time_left = old
                .remaining
                .is_some_and(|left| left.saturating_sub(elapsed) > EXPIRY_SLACK);
            let kind = match new {
                _ if old.released => ChangeKind::HoldEnded,
                _ if !had_time_left => ChangeKind::Expired,
                Some(new) => ChangeKind::HolderChanged {
                    after: new.holder.clone(),
                },
                None => ChangeKind::FreedEarly,
            };
            Some(Change {
                seen_at: now,
                key: old.key.clone(),
                before: old.holder.clone(),
                kind,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(manager: &str, acquired_secs: u64) -> Holder {
        let mut holder = test_holder();
        holder.manager = manager.to_owned();
        holder.acquired_at = SystemTime::UNIX_EPOCH + Duration::from_secs(acquired_secs);
        holder
    }

    /// A holder on `web-7`, pid 4242, with a 30 s ttl.
    fn test_holder() -> Holder {
        let token = format!("{}|0|30000|4242|web-7||", "0".repeat(32));
        Holder::from_token(&token).expect("a well-formed owner token")
    }

    fn lock(key: &str, holder: Holder, remaining_ms: u64) -> HeldLock {
        HeldLock {
            key: key.to_owned(),
            kind: Kind::Lock,
            holder: Some(holder),
            held_for: None,
            remaining: Some(Duration::from_millis(remaining_ms)),
            waiters: 0,
            released: false,
        }
    }

    #[test]
    fn a_new_holder_while_the_lease_had_time_left_is_a_change_of_holder() {
        let before = [lock("a", holder("orders-api", 1), 20_000)];
        let after = [lock("a", holder("billing", 2), 30_000)];
        let seen = changes(
            &before,
            &after,
            Duration::from_secs(1),
            SystemTime::now(),
            None,
        );
        assert_eq!(seen.len(), 1);
        assert!(matches!(
            &seen[0].kind,
            ChangeKind::HolderChanged { after: Some(new) } if new.manager == "billing"
        ));
    }

    #[test]
    fn a_lock_gone_early_is_freed_and_one_gone_at_its_ttl_expired() {
        let before = [
            lock("early", holder("a", 1), 20_000),
            lock("ran-out", holder("b", 1), 900),
            lock("kept", holder("c", 1), 20_000),
        ];
        let after = [lock("kept", holder("c", 1), 19_000)];
        let seen = changes(
            &before,
            &after,
            Duration::from_secs(1),
            SystemTime::now(),
            None,
        );
        let kinds: Vec<(&str, &ChangeKind)> = seen
            .iter()
            .map(|change| (change.key.as_str(), &change.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("early", &ChangeKind::FreedEarly),
                ("ran-out", &ChangeKind::Expired)
            ]
        );
    }

    /// Issue 42: the designed end of a `hold_at_least` is an expiry, and was
    /// reported as a lost holder. Against a real server: a job released
    /// within its hold, and a holder cut off from the server (it stops
    /// renewing); only the second is a lost holder.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_down_that_ends_as_planned_is_not_a_lost_holder() {
        let server = leasehold_testkit::RedisServer::start();
        let proxy = leasehold_testkit::FaultProxy::start(server.addr());
        let manager = LockManager::builder()
            .name("jobs")
            .connect(&server.url())
            .await
            .expect("connect");
        let cut_off = LockManager::builder()
            .name("cut-off")
            .connect(&proxy.url())
            .await
            .expect("connect through the proxy");
        let job = leasehold::LockOptions::new().hold_at_least(Duration::from_secs(4));
        let report = manager.acquire("job:report", job).await.expect("free");
        report.release().await.expect("released within its hold");
        let stranded = leasehold::LockOptions::new().ttl(Duration::from_secs(2));
        let _stranded = cut_off
            .acquire("job:stranded", stranded)
            .await
            .expect("free");

        let mut collector = Collector::new("test", "job:*");
        let first = collector.collect(&manager).await.expect("first snapshot");
        let shown: Vec<&str> = first.locks.iter().map(|lock| lock.key.as_str()).collect();
        assert_eq!(
            shown,
            ["job:report", "job:stranded"],
            "both seen held first"
        );
        assert!(first.locks[0].released && !first.locks[1].released);
        proxy.cut();
        let mut gone = false;
        for _ in 0..400 {
            if manager.list("job:*").await.expect("list").is_empty() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "the hold-down and the stranded lease never ended");
        let second = collector.collect(&manager).await.expect("second snapshot");
        let kinds: Vec<(&str, &ChangeKind)> = second
            .changes
            .iter()
            .map(|change| (change.key.as_str(), &change.kind))
            .collect();
        assert!(
            kinds.contains(&("job:stranded", &ChangeKind::Expired)),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&("job:report", &ChangeKind::HoldEnded)),
            "a hold-down that ended as planned is not a lost holder: {kinds:?}"
        );
    }

    #[test]
    fn keys_past_a_cut_listing_are_not_reported_gone() {
        let before = [lock("z", holder("a", 1), 20_000)];
        let after = [lock("m", holder("b", 1), 20_000)];
        assert!(changes(
            &before,
            &after,
            Duration::ZERO,
            SystemTime::now(),
            Some("m")
        )
        .is_empty());
    }

    #[test]
    fn shared_kinds_are_not_compared() {
        let shared = |kind, manager| HeldLock {
            kind,
            ..lock("doc", holder(manager, 1), 20_000)
        };
        let before = [shared(Kind::Rw, "reader-a"), shared(Kind::Semaphore, "a")];
        let after = [shared(Kind::Rw, "reader-b")];
        assert!(changes(
            &before,
            &after,
            Duration::from_secs(1),
            SystemTime::now(),
            None
        )
        .is_empty());
    }
}
