//! Who was inside a lock at once, seen from inside it: a count of the holders
//! of a semaphore's permits ([`Occupancy`]), and a log of the reads and
//! writes made under a read/write lock ([`VisitLog`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many holders are inside at once, and the most there ever were.
#[derive(Debug, Default)]
pub struct Occupancy {
    inside: AtomicUsize,
    most: AtomicUsize,
    /// How many a visitor waits to see inside before it leaves.
    fill: usize,
}

/// The longest a visitor waits for the others to come in.
const FILL_WAIT: Duration = Duration::from_secs(1);

impl Occupancy {
    /// Visits that each stay until `fill` visitors are inside at once (or
    /// a second passed): when that many may be inside together, they
    /// are, however slowly a loaded machine lets the next one in, so a test
    /// can ask that the lock was full without depending on timing.
    pub fn filling(fill: usize) -> Self {
        Occupancy {
            fill,
            ..Occupancy::default()
        }
    }

    /// Enters, stays 20 ms (yielding to the others) and until the visitors
    /// it waits for are inside (see [`filling`](Self::filling)), leaves.
    pub async fn visit(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let deadline = Instant::now() + FILL_WAIT;
        while self.inside.load(Ordering::SeqCst) < self.fill && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// The most holders that were ever inside at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// Which lease a logged visit held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Read,
    Write,
}

/// Visits made under a read/write lock: kind, and start and end taken inside
/// it.
#[derive(Debug, Default)]
pub struct VisitLog(Mutex<Vec<(Visit, Instant, Instant)>>);

impl VisitLog {
    /// Stays inside 3 ms (yielding to the others), and records the visit.
    pub async fn visit(&self, kind: Visit) {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.0.lock().unwrap().push((kind, start, Instant::now()));
    }

    /// How many visits of `kind` were logged.
    pub fn count(&self, kind: Visit) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(logged, ..)| *logged == kind)
            .count()
    }

    /// Panics if a write visit overlaps any other visit; returns the largest
    /// number of visits that overlapped one visit (above 0: readers shared).
    pub fn check(&self) -> usize {
        let visits = self.0.lock().unwrap();
        let mut most_shared = 0;
        for (i, (kind, start, end)) in visits.iter().enumerate() {
            let overlapping: Vec<&(Visit, Instant, Instant)> = visits
                .iter()
                .enumerate()
                .filter(|(j, (_, other_start, other_end))| {
                    *j != i && other_start < end && start < other_end
                })
                .map(|(_, visit)| visit)
                .collect();
            if *kind == Visit::Write {
                assert!(overlapping.is_empty(), "a write overlapped {overlapping:?}");
            }
            most_shared = most_shared.max(overlapping.len());
        }
        most_shared
    }
}
