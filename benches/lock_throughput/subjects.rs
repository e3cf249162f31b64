//! The subjects: the lock clients under measurement (one column of a table
//! each), how one acquire–hold–release cycle runs through each, and the
//! connections they share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, LockError, LockGuard, LockManager, LockOptions};

use crate::limits::{TTL, WAIT};
use crate::peers::{DistLock, Rslock, RslockHeld};
use crate::raw::{Raw, RawLock};
use crate::redis_stats::Admin;

/// Key prefix of our managers.
const NAMESPACE: &str = "ours:";

/// What a workload is measured through: one column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// `acquire` (ttl 10 s, wait 10 s) and `release` on the one server.
    Ours,
    /// As `Ours`, on a manager without the lock-delay
    /// (`risk_two_holders_after_failover`): what the delay's check costs.
    OursWithoutDelay,
    /// As `Ours` with `LockOptions::fenced(true)`, and the guard's fencing
    /// token read once per cycle, as code that writes to fenced storage does:
    /// the token comes with the lock.
    OursFenced,
    /// As `Ours`, and the guard's fencing token asked for once per cycle
    /// without `fenced`: issued on that request.
    OursTokenOnRequest,
    /// The hand-written baseline on the one server.
    Raw,
    /// As `Ours`, on a Redlock manager over the 3 Redlock servers.
    OursRedlock,
    /// As `Ours`, on a Redis Cluster of 3 primaries (keys spread over them).
    OursCluster,
    /// [`Annotated::cycle`]: the attribute around an empty body.
    Macro,
    /// `with_lock` around an empty body, with the attribute's options.
    WithLock,
    /// `acquire` and `release` with the attribute's options.
    AcquireRelease,
    /// The rslock crate's own cycle on the one server (see [`crate::peers`]).
    Rslock,
    /// The distributed-lock-redis crate's own cycle on the one server.
    DistLock,
}

impl Subject {
    /// Column header; also how a worker process is told its subject.
    pub fn label(self) -> &'static str {
        match self {
            Subject::Ours => "ours",
            Subject::OursWithoutDelay => "ours without lock-delay",
            Subject::OursFenced => "ours fenced",
            Subject::OursTokenOnRequest => "ours+token on request",
            Subject::Raw => "raw",
            Subject::OursRedlock => "ours on Redlock",
            Subject::OursCluster => "ours on Cluster",
            Subject::Macro => "macro",
            Subject::WithLock => "with_lock",
            Subject::AcquireRelease => "acquire+release",
            Subject::Rslock => "rslock",
            Subject::DistLock => "distributed-lock-redis",
        }
    }

    /// The subject a worker process runs: `ours` or `raw`.
    pub fn for_worker(label: &str) -> Option<Subject> {
        [Subject::Ours, Subject::Raw]
            .into_iter()
            .find(|subject| subject.label() == label)
    }
}

/// One subject ready to run: its client, the servers its runs are counted
/// on, and the URL its worker processes connect to.
#[derive(Clone)]
pub struct Side {
    pub subject: Subject,
    pub client: Client,
    pub servers: Admin,
    pub url: String,
}

/// Everything the subjects need, connected once.
pub struct Setup {
    /// Manager on the one server; the attribute's client too.
    single: LockManager,
    /// The same without the lock-delay.
    undelayed: LockManager,
    redlock: LockManager,
    raw: Raw,
    rslock: Rslock,
    distlock: DistLock,
    url: String,
    /// Counters of the one server.
    pub server: Admin,
    /// Counters of the Redlock servers, summed.
    nodes: Admin,
    /// Ours on the cluster, and the counters of its primaries, summed.
    cluster: Option<(LockManager, Admin)>,
}

impl Setup {
    /// Connects every subject to `url`, ours on Redlock to `node_urls`, and
    /// ours on Cluster to the primaries at `cluster_urls` if there are any.
    pub async fn connect(url: &str, node_urls: &[String], cluster_urls: &[String]) -> Setup {
        let cluster = if cluster_urls.is_empty() {
            None
        } else {
            let manager = LockManager::builder()
                .namespace(NAMESPACE)
                .cluster(cluster_urls)
                .await
                .expect("ours on Cluster: cannot connect");
            Some((manager, Admin::connect(cluster_urls).await))
        };
        Setup {
            cluster,
            single: ours_manager(url).await,
            undelayed: LockManager::builder()
                .namespace(NAMESPACE)
                .risk_two_holders_after_failover()
                .connect(url)
                .await
                .expect("ours without lock-delay: cannot connect"),
            redlock: LockManager::builder()
                .namespace(NAMESPACE)
                .redlock(node_urls)
                .await
                .expect("ours on Redlock: cannot connect"),
            raw: Raw::connect(url).await,
            rslock: Rslock::connect(url),
            distlock: DistLock::connect(url).await,
            url: url.to_owned(),
            server: Admin::connect(&[url.to_owned()]).await,
            nodes: Admin::connect(node_urls).await,
        }
    }

    /// `subject`'s client on its servers.
    pub fn side(&self, subject: Subject) -> Side {
        // What `#[distributed_lock(ttl = "10s")]` passes: the defaults but the ttl.
        let attribute = LockOptions::new().ttl(TTL);
        let (client, servers) = match subject {
            Subject::Ours => (Client::ours(&self.single, ours_options()), &self.server),
            Subject::OursWithoutDelay => {
                (Client::ours(&self.undelayed, ours_options()), &self.server)
            }
            Subject::OursFenced => (
                Client::Ours {
                    manager: self.single.clone(),
                    options: ours_options().fenced(true),
                    fence: true,
                },
                &self.server,
            ),
            Subject::OursTokenOnRequest => (
                Client::Ours {
                    manager: self.single.clone(),
                    options: ours_options(),
                    fence: true,
                },
                &self.server,
            ),
            Subject::Raw => (Client::Raw(self.raw.clone()), &self.server),
            Subject::OursRedlock => (Client::ours(&self.redlock, ours_options()), &self.nodes),
            Subject::OursCluster => {
                let (manager, primaries) = self
                    .cluster
                    .as_ref()
                    .expect("ours on Cluster runs only when its table is selected");
                (Client::ours(manager, ours_options()), primaries)
            }
            Subject::Macro => (
                Client::Macro(Annotated {
                    locks: self.single.clone(),
                }),
                &self.server,
            ),
            Subject::WithLock => (
                Client::WithLock {
                    manager: self.single.clone(),
                    options: attribute,
                },
                &self.server,
            ),
            Subject::AcquireRelease => (Client::ours(&self.single, attribute), &self.server),
            Subject::Rslock => (Client::Rslock(self.rslock.clone()), &self.server),
            Subject::DistLock => (Client::DistLock(self.distlock.clone()), &self.server),
        };
        Side {
            subject,
            client,
            servers: servers.clone(),
            url: self.url.clone(),
        }
    }
}

/// Our manager on one server.
async fn ours_manager(url: &str) -> LockManager {
    LockManager::builder()
        .namespace(NAMESPACE)
        .connect(url)
        .await
        .expect("ours: cannot connect")
}

/// Options of ours: ttl 10 s, wait 10 s, the rest default.
fn ours_options() -> LockOptions {
    LockOptions::new().ttl(TTL).wait(WAIT)
}

/// The lock client under measurement.
#[derive(Clone)]
pub enum Client {
    /// `acquire` with these options, the fencing token if `fence`, then
    /// `release`.
    Ours {
        manager: LockManager,
        options: LockOptions,
        fence: bool,
    },
    Raw(Raw),
    Rslock(Rslock),
    DistLock(DistLock),
    /// The attribute; its key is built from the key index, so only for U1's
    /// keys (`bench:u:{i}`).
    Macro(Annotated),
    /// `with_lock` around an empty body.
    WithLock {
        manager: LockManager,
        options: LockOptions,
    },
}

/// U1 through the attribute, as an application would write it.
#[derive(Clone)]
pub struct Annotated {
    locks: LockManager,
}

impl Annotated {
    /// Locks `bench:u:{i}` around an empty body.
    #[distributed_lock(key = "bench:u:{i}", ttl = "10s", manager = self.locks)]
    async fn cycle(&self, i: u64) -> Result<(), LockError> {
        Ok(())
    }
}

/// A lock held by one of the clients.
enum Held {
    Ours(LockGuard),
    Raw(RawLock),
    Rslock(RslockHeld),
    DistLock(distributed_lock_redis::RedisLockHandle),
}

impl Client {
    /// A fresh client of `subject` (ours or raw) on the server at `url`, as a
    /// worker process makes it.
    pub async fn connect(subject: Subject, url: &str) -> Client {
        match subject {
            Subject::Ours => Client::ours(&ours_manager(url).await, ours_options()),
            Subject::Raw => Client::Raw(Raw::connect(url).await),
            other => panic!("{} does not run in worker processes", other.label()),
        }
    }

    fn ours(manager: &LockManager, options: LockOptions) -> Client {
        Client::Ours {
            manager: manager.clone(),
            options,
            fence: false,
        }
    }

    /// One cycle on `key`, which is `keys[index]` of the plan: acquire, hold
    /// for `hold`, release. Returns when the lock was held, or `None` for the
    /// clients that take and release it around an empty body in one call
    /// (they only run with `hold` zero).
    pub async fn cycle(
        &mut self,
        key: &str,
        index: usize,
        hold: Duration,
        releases: &ReleaseMark,
    ) -> Option<Acquired> {
        match self {
            Client::Macro(annotated) => {
                assert!(hold.is_zero(), "the annotated body cannot hold the lock");
                annotated
                    .cycle(index as u64)
                    .await
                    .unwrap_or_else(|err| panic!("macro: `bench:u:{index}`: {err}"));
                None
            }
            Client::WithLock { manager, options } => {
                assert!(hold.is_zero(), "the with_lock body cannot hold the lock");
                manager
                    .with_lock(key, options.clone(), async {})
                    .await
                    .unwrap_or_else(|err| panic!("with_lock `{key}`: {err}"));
                None
            }
            Client::Ours { .. } | Client::Raw(_) | Client::Rslock(_) | Client::DistLock(_) => {
                let held = self.acquire(key).await;
                let at = Instant::now();
                let handoff = releases.since_last(at);
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                let released = Instant::now();
                releases.mark();
                self.release(held).await;
                Some(Acquired {
                    at,
                    handoff,
                    released,
                })
            }
        }
    }

    async fn acquire(&mut self, key: &str) -> Held {
        match self {
            Client::Ours {
                manager,
                options,
                fence,
            } => {
                let guard = manager
                    .acquire(key, options.clone())
                    .await
                    .unwrap_or_else(|err| panic!("ours: acquire `{key}`: {err}"));
                if *fence {
                    guard
                        .fencing_token()
                        .await
                        .unwrap_or_else(|err| panic!("ours: fencing token of `{key}`: {err}"));
                }
                Held::Ours(guard)
            }
            Client::Raw(raw) => Held::Raw(raw.acquire(key).await),
            Client::Rslock(rslock) => Held::Rslock(rslock.acquire(key).await),
            Client::DistLock(distlock) => Held::DistLock(distlock.acquire(key).await),
            Client::Macro(_) | Client::WithLock { .. } => {
                unreachable!("these clients lock around a body")
            }
        }
    }

    async fn release(&mut self, held: Held) {
        match (self, held) {
            (Client::Ours { .. }, Held::Ours(guard)) => guard
                .release()
                .await
                .unwrap_or_else(|err| panic!("ours: release: {err}")),
            (Client::Raw(raw), Held::Raw(lock)) => raw.release(lock).await,
            (Client::Rslock(rslock), Held::Rslock(lock)) => rslock.release(lock).await,
            (Client::DistLock(distlock), Held::DistLock(handle)) => distlock.release(handle).await,
            _ => unreachable!("a lock is released by the client that took it"),
        }
    }
}

/// When one cycle held the lock, how long after the last release of the
/// workload was sent (the hand-off, on one key), and when its own release
/// was sent.
#[derive(Debug, Clone, Copy)]
pub struct Acquired {
    pub at: Instant,
    pub handoff: Option<Duration>,
    pub released: Instant,
}

/// When the last release of a run was sent, shared by its tasks: on one
/// key, the next holder's acquisition minus this is the hand-off latency
/// (release sent, next body starts).
#[derive(Debug)]
pub struct ReleaseMark {
    origin: Instant,
    /// Nanoseconds from `origin` to the last release sent; 0 for none yet.
    last_ns: AtomicU64,
}

impl ReleaseMark {
    /// No release sent yet.
    pub fn new() -> Self {
        ReleaseMark {
            origin: Instant::now(),
            last_ns: AtomicU64::new(0),
        }
    }

    /// A release is being sent now.
    fn mark(&self) {
        let ns = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_ns.store(ns.max(1), Ordering::Relaxed);
    }

    /// How long before `at` the last release was sent, if one was.
    fn since_last(&self, at: Instant) -> Option<Duration> {
        let ns = self.last_ns.load(Ordering::Relaxed);
        (ns > 0).then(|| at.saturating_duration_since(self.origin + Duration::from_nanos(ns)))
    }
}
