//! The Redlock backend: one lock across N independent Redis masters (no
//! replication between them, no failover), held while a majority holds it.
//!
//! # Acquire
//! The acquire script goes to every node at once, each answer bounded by the
//! *node timeout*, min(response timeout, ttl / 10): long enough for a healthy
//! node, short enough that a dead one costs a small part of the lease. The
//! round waits for every node (or its timeout) rather than stopping at the
//! first quorum, so the lock lands on every reachable node and survives the
//! loss of any minority while it is held; it stops early only once a quorum
//! refused. A node that times out may still apply the SET later; it carries
//! our token, and renewal and release cover it. The clock starts before the
//! first send. The lease is valid until start + ttl − margin, where the
//! lease's safety margin (6 % of the ttl + 2 ms, see `lease.rs`) allows for
//! the nodes' clocks running at slightly different rates and for the body to
//! stop in time; the acquisition succeeds only if that is still in the
//! future once the quorum answered.
//!
//! When it fails, the lock is released on *all* nodes, also on those that did
//! not answer (their SET may have landed), and the attempt reports `Busy`: the
//! manager's wait loop retries within `wait`, woken by a release on any node.
//! The retry comes after the longest remaining TTL seen when no node granted
//! (another owner holds it), or after a random 5–50 ms when some did (a split
//! vote: contenders must not retry in lockstep). When fewer than a quorum of
//! nodes answered at all, the attempt fails with `LockError::Connection`,
//! naming the unreachable nodes.
//!
//! # Fencing tokens
//! Issued on request, to a holder only. `fence.lua` goes to every node at
//! once and issues that node's next token where the lock is ours there. The
//! lock's token T is the maximum over a quorum of such nodes, and
//! `fence_floor.lua` raises every node's counter to at least T; the token is
//! handed out only once a quorum of those writes was acknowledged *by nodes
//! where the lock is ours*. Any later holder's quorum shares a node with that
//! set, on which its own token comes after the write: it is at least T + 1.
//! That costs two round trips, once per lease, and only when the holder asks
//! for its token. A node restarted empty or from a stale snapshot forgets or
//! rewinds its counters; `fence.lua`'s clock floor (every token is at least
//! the node's time in µs) then keeps tokens rising, as for a single server,
//! as long as the nodes' clocks differ by less than the counters' retention
//! (max(2 × ttl, 10 min)).
//!
//! # Renewal and release
//! Both go to all nodes at once and wait for every answer (renewal within the
//! node timeout, release within the response timeout). A renewal keeps the
//! lease iff a quorum renewed; a minority answering "not ours" is fine. The
//! lease is lost once more than N − quorum nodes say "not ours"; with fewer
//! answers than that the renewal counts as failed and the watchdog retries
//! until the lease runs out. A release reports the lock as ours iff a quorum
//! deleted it.
//!
//! # Number of nodes
//! Any odd N ≥ 1 (3 or 5 in practice). An even N is refused with
//! `InvalidOptions`: N = 2k needs k + 1 nodes for a quorum and so survives
//! k − 1 failures, no more than 2k − 1 nodes would, while adding one more
//! node that can fail. The manager starts when a quorum of nodes is reachable;
//! the others are connected when they come back.
//!
//! # Delayed restart
//! A node that loses its data in a crash (no persistence, or no fsync of the
//! last writes) must stay down for at least the longest ttl in use before it
//! rejoins empty. While it is down, every lock whose quorum needed it cannot
//! be renewed by a quorum, so it expires, and its holder's watchdog reports it
//! lost, before the node comes back. Restarted at once, the node forgets locks
//! that are still held, and a second client can assemble a quorum with it:
//! two holders at once. With `appendfsync always` no delay is needed.
//!
//! # Waiting
//! One set of local wait queues is fed by release messages from every node,
//! so a release seen on any node wakes a waiter; a release publishes on each
//! node that held the lock, so one release wakes at most N local waiters.
//! A waiter subscribes on a quorum of nodes before it retries.
//!
//! # Replicated acquire
//! `LockOptions::min_replicas` is refused with `InvalidOptions`: Redlock nodes
//! are independent masters that must not fail over, and the quorum, not
//! replication, is what keeps a lock through the loss of a node.
//!
//! # Semaphores and read/write locks
//! Refused with `InvalidOptions`: each node counts its own holders, and
//! permits granted by quorums do not bound the holders at N. With N = 2 on
//! three nodes, A can win nodes 1 and 2, B nodes 2 and 3, C nodes 1 and 3:
//! no node holds more than two permits, yet three holders have a quorum.
//! Read/write locks are refused too: a reader and a writer could not both
//! win a quorum (majorities overlap), but the waiting writers' intents that
//! keep writers from starving would have to agree across nodes, and a node
//! lost with its readers would let a writer in under live readers once a
//! quorum no longer sees them; nothing here handles either.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionManager;
use redis::RedisError;

use super::redis::admin;
use super::redis::commands::{acquire, fence_retention_ms, issue_fence, release, renew};
use super::redis::connection::{lock_error, manager_config, open_manager, RedisConfig};
use super::redis::lock_delay::NodeCheck;
use super::redis::native::Native;
use super::redis::notify::Notifications;
use super::redis::probe::{probe, settle, Needs, Via};
use super::redis::renew_batch::renew_each;
use super::redis::scripts::{self, run_script};
use super::redis::tls::TlsConfig;
use super::redis::topology::Topology;
use super::state::{Evicted, State};
use super::step::Renewal;
use super::step::{Attempt, Claim, Taking};
use crate::backend::wait_queue::WaitTicket;
use crate::check::{CheckReport, NodeRole};
use crate::keys::LockKey;
use crate::token::OwnerToken;
use crate::validity;
use crate::{redact_url, LockError};

/// Shortest ttl a Redlock lease may have: below it the safety margin and two
/// round trips leave next to no validity.
const MIN_TTL: Duration = Duration::from_millis(10);

/// Redlock keeps its own rule for a node that lost its data (it must stay
/// down for a ttl, see the README): its nodes run no lock-delay check.
const NO_LOCK_DELAY: u64 = 0;
/// Shortest and longest pause before retrying after a split vote, in ms.
const JITTER_MS: (u64, u64) = (5, 50);

/// Locks held by a quorum of independent Redis masters.
pub(crate) struct RedlockBackend {
    nodes: Vec<Node>,
    quorum: usize,
    response_timeout: Duration,
    notifications: Notifications,
}

/// One master.
struct Node {
    /// The URL without its password, for error messages.
    url: String,
    commands: ConnectionManager,
}

/// The answers to one acquisition round, as they arrive.
#[derive(Default)]
struct Round {
    /// Nodes that granted.
    granted: usize,
    /// Remaining TTLs reported by nodes held by another owner.
    busy: Vec<Option<Duration>>,
    /// Nodes that failed or did not answer in time.
    failed: Vec<(usize, LockError)>,
}

/// The answers to a release or renewal sent to every node.
#[derive(Default)]
struct Tally {
    /// Nodes where the lock was ours (and is now released or renewed).
    ours: usize,
    /// Nodes where it was not ours.
    not_ours: usize,
    /// Nodes that failed or did not answer in time.
    failed: Vec<(usize, LockError)>,
}

impl RedlockBackend {
    /// Checks every node at once without taking a lock (see `probe`), using
    /// the names of `key`, which no lock uses. A node that fails stays in
    /// the report while a quorum answers; fewer fail with `Connection`.
    pub(crate) async fn check(&self, key: &LockKey) -> Result<CheckReport, LockError> {
        let n = self.nodes.len();
        let mut report = CheckReport::new(format!("Redlock over {n} nodes"));
        let needs = Needs {
            key,
            cluster: false,
            sentinel: false,
            native: Native::default(),
            lock_delay: None,
        };
        let probes = futures_util::future::join_all(self.nodes.iter().map(|node| {
            let mut via = Via::Server(node.commands.clone());
            let needs = &needs;
            async move {
                probe(
                    &mut via,
                    node.url.clone(),
                    NodeRole::RedlockNode,
                    needs,
                    None,
                )
                .await
            }
        }))
        .await;
        for probed in probes {
            settle(&mut report, probed, false)?;
        }
        let answered = report
            .nodes
            .iter()
            .filter(|node| node.failure.is_none())
            .count();
        if answered < self.quorum {
            return Err(LockError::connection(format!(
                "only {answered} of {n} Redlock nodes answered, a quorum needs {}",
                self.quorum
            )));
        }
        Ok(report)
    }

    /// Connects to every node at once. Fails with `InvalidUrl` for a bad URL,
    /// `InvalidOptions` for no URL, an even number of them or one server
    /// listed twice, and `Connection` when fewer than a quorum can be reached;
    /// unreachable nodes of a reachable quorum are connected on first use.
    pub(crate) async fn connect(
        urls: Vec<String>,
        config: RedisConfig,
        tls: &TlsConfig,
    ) -> Result<Self, LockError> {
        let n = urls.len();
        if n == 0 {
            return Err(LockError::InvalidOptions(
                "Redlock needs at least one Redis URL (3 or 5 independent masters in practice)"
                    .into(),
            ));
        }
        let quorum = n / 2 + 1;
        if n % 2 != 1 {
            return Err(LockError::InvalidOptions(format!(
                "Redlock needs an odd number of nodes, got {n}: a quorum of {n} is {quorum}, so it survives {} failures, no more than {} nodes would; add or remove one node",
                n - quorum,
                n - 1
            )));
        }
        let clients = urls
            .iter()
            .map(|url| tls.open_client(url))
            .collect::<Result<Vec<_>, _>>()?;
        let mut servers = HashSet::new();
        let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
        for (url, client) in urls.iter().zip(&clients) {
            let info = client.get_connection_info();
            if !servers.insert(format!("{}/{}", info.addr(), info.redis_settings().db())) {
                return Err(LockError::InvalidOptions(format!(
                    "Redlock node `{url}` is listed twice: each node must be a different server, or one server counts twice towards the quorum"
                )));
            }
        }
        let topologies: Vec<Topology> = clients
            .iter()
            .map(|client| Topology::Server(Box::new(client.clone())))
            .collect();
        let (connected, notifications) = tokio::join!(
            futures_util::future::join_all(clients.iter().map(|client| open_manager(
                client,
                config,
                manager_config(config)
            ))),
            Notifications::open(&topologies, config),
        );
        let mut nodes = Vec::with_capacity(n);
        let mut unreachable = Vec::new();
        for ((url, client), connected) in urls.into_iter().zip(clients).zip(connected) {
            let commands = match connected {
                Ok(commands) => commands,
                Err(err @ LockError::Auth { .. }) => return Err(err),
                Err(err) => {
                    unreachable.push(format!("{url}: {err}"));
                    ConnectionManager::new_lazy_with_config(client, manager_config(config))
                        .map_err(lock_error)?
                }
            };
            nodes.push(Node { url, commands });
        }
        if n - unreachable.len() < quorum {
            return Err(LockError::connection(format!(
                "only {} of {n} Redlock nodes reachable, a quorum needs {quorum} ({})",
                n - unreachable.len(),
                unreachable.join("; ")
            )));
        }
        if !unreachable.is_empty() {
            tracing::warn!(unreachable = %unreachable.join("; "), "Redlock starting without some nodes; they are connected when they come back");
        }
        Ok(RedlockBackend {
            nodes,
            quorum,
            response_timeout: config.response_timeout,
            notifications,
        })
    }

    /// One round on all nodes; see the module documentation. Only locks:
    /// every other kind is refused, as [`Kind::on_redlock`](crate::kinds::kind::Kind::on_redlock) says why.
    /// Redlock keeps no waiter queue: a release wakes waiters, so
    /// `taking.place` asks for nothing here.
    pub(crate) async fn take(
        &self,
        claim: Claim<'_>,
        taking: Taking,
    ) -> Result<Attempt, LockError> {
        let Claim { key, token, .. } = claim;
        key.kind.on_redlock(key.user())?;
        if taking.replicas.is_some() {
            return Err(LockError::InvalidOptions(
                "min_replicas is for one master with replicas; Redlock nodes are independent masters, and its quorum keeps a lock through the loss of a node".into(),
            ));
        }
        let ttl = claim.ttl();
        if ttl < MIN_TTL {
            return Err(LockError::InvalidOptions(format!(
                "Redlock needs a ttl of at least {MIN_TTL:?}, got {ttl:?}: the safety margin and the round trips would leave next to no validity"
            )));
        }
        let timeout = self.node_timeout(ttl);
        let started = Instant::now();
        let (n, quorum) = (self.nodes.len(), self.quorum);
        let mut round = Round::default();
        self.on_every_node(
            timeout,
            |mut node| async move { acquire(&mut node, claim, Duration::ZERO, 0, NodeCheck::OFF).await },
            |index, reply| {
                match reply {
                    Ok(Attempt::Granted { .. }) => round.granted += 1,
                    Ok(Attempt::Busy { remaining }) => round.busy.push(remaining),
                    // Its nodes keep no lock-delay (`NodeCheck::OFF`).
                    Ok(Attempt::Delayed { left }) => round.busy.push(Some(left)),
                    Err(err) => round.failed.push((index, err)),
                }
                round.busy.len() > n - quorum
            },
        )
        .await;
        if round.granted >= quorum {
            let elapsed = started.elapsed();
            if elapsed < validity::validity(ttl) {
                return Ok(Attempt::GRANTED);
            }
            tracing::debug!(key = %key.user(), ?elapsed, "Redlock quorum granted, but too late; releasing");
        }
        self.release_everywhere(key, token, timeout).await;
        let answered = round.granted + round.busy.len();
        if answered < quorum {
            return Err(self.unreachable(
                &format!("only {answered} of {n} Redlock nodes answered the acquisition, a quorum needs {quorum}"),
                round.failed,
            ));
        }
        let longest = round.busy.iter().flatten().max().copied();
        let remaining = match longest {
            Some(longest) if round.granted == 0 => longest,
            _ => jitter(),
        };
        tracing::debug!(key = %key.user(), granted = round.granted, busy = round.busy.len(), failed = round.failed.len(), "Redlock round without quorum");
        Ok(Attempt::Busy {
            remaining: Some(remaining),
        })
    }

    /// Releases on every node; ours iff a quorum deleted it.
    pub(crate) async fn release(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        _after_wait: bool,
    ) -> Result<bool, LockError> {
        let tally = self
            .release_everywhere(key, token, self.response_timeout)
            .await;
        if tally.ours >= self.quorum {
            Ok(true)
        } else if tally.ours + tally.failed.len() >= self.quorum {
            Err(self.unreachable(
                &format!(
                    "release deleted the lock on {} of {} Redlock nodes, a quorum needs {}; it expires after its TTL on the others",
                    tally.ours,
                    self.nodes.len(),
                    self.quorum
                ),
                tally.failed,
            ))
        } else {
            Ok(false)
        }
    }

    /// Keeps the lock for what is left of its `hold_at_least`
    /// (`claim.ttl_ms`): a renewal, as Redlock keeps no record of a lock.
    pub(crate) async fn hold_down(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        self.renew(claim).await
    }

    /// Renews on every node; held iff a quorum renewed.
    pub(crate) async fn renew(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        let mut tally = Tally::default();
        self.on_every_node(
            self.node_timeout(claim.ttl()),
            |mut node| async move { renew(&mut node, claim, NO_LOCK_DELAY).await },
            |index, reply| {
                tally.record(index, reply);
                false
            },
        )
        .await;
        if tally.ours >= self.quorum {
            Ok(true)
        } else if tally.not_ours > self.nodes.len() - self.quorum {
            Ok(false)
        } else {
            Err(self.unreachable(
                &format!(
                    "renewal reached {} of {} Redlock nodes, a quorum needs {}",
                    tally.ours,
                    self.nodes.len(),
                    self.quorum
                ),
                tally.failed,
            ))
        }
    }

    /// Issues a token on every node where the lock is ours and, with a quorum
    /// of them, writes their maximum back; see the module documentation.
    /// `Ok(None)`: the lock is no longer ours on a quorum.
    pub(crate) async fn fence(&self, claim: Claim<'_>) -> Result<Option<u64>, LockError> {
        let Claim { key, ttl_ms, .. } = claim;
        let timeout = self.node_timeout(claim.ttl());
        let n = self.nodes.len();
        let (mut ours, mut not_ours, mut failed) = (Vec::new(), 0, Vec::new());
        self.on_every_node(
            timeout,
            |mut node| async move { issue_fence(&mut node, claim).await },
            |index, reply| {
                match reply {
                    Ok(Some(fence)) => ours.push((index, fence)),
                    Ok(None) => not_ours += 1,
                    Err(err) => failed.push((index, err)),
                }
                false
            },
        )
        .await;
        if not_ours > n - self.quorum {
            return Ok(None);
        }
        if ours.len() < self.quorum {
            return Err(self.unreachable(
                &format!(
                    "a fencing token was issued on {} of {n} Redlock nodes, a quorum needs {}",
                    ours.len(),
                    self.quorum
                ),
                failed,
            ));
        }
        let fence = ours.iter().map(|&(_, fence)| fence).max().unwrap_or(0);
        let holders: Vec<usize> = ours.iter().map(|&(index, _)| index).collect();
        let written = self
            .write_fence(key, fence, ttl_ms, &holders, timeout)
            .await;
        if written < self.quorum {
            return Err(LockError::connection(format!(
                "the fencing token reached {written} of {n} Redlock nodes, a quorum needs {}",
                self.quorum
            )));
        }
        Ok(Some(fence))
    }

    /// The lock as a quorum of nodes sees it: the holder whose token a
    /// quorum holds (none otherwise), the least time it has left on those
    /// nodes, and the highest fencing counter of any node. Fails unless a
    /// quorum answered. Every kind but locks is refused, as
    /// [`Kind::on_redlock`](crate::kinds::kind::Kind::on_redlock) says why.
    pub(crate) async fn inspect(&self, key: &LockKey) -> Result<State, LockError> {
        key.kind.on_redlock(key.user())?;
        let states = self
            .answers_of_a_quorum("the inspection", |mut node| async move {
                admin::inspect_lock(&mut node, key).await
            })
            .await?;
        let holder = self.quorum_holder(states.iter().map(|state| state.holder.as_ref()));
        let remaining = holder.as_ref().and_then(|token| {
            states
                .iter()
                .filter(|state| state.holder.as_ref() == Some(token))
                .filter_map(|state| state.remaining)
                .min()
        });
        Ok(State {
            holder,
            remaining,
            fence: states.iter().filter_map(|state| state.fence).max(),
            ..State::default()
        })
    }

    /// Frees the lock on every node whoever holds it and raises every
    /// node's fencing counter; fails unless a quorum did. The evicted holder
    /// is the one a quorum of nodes named; the counter the highest. Every
    /// kind but locks is refused, as for [`inspect`](Self::inspect).
    pub(crate) async fn force(&self, key: &LockKey) -> Result<Evicted, LockError> {
        key.kind.on_redlock(key.user())?;
        let evictions = self
            .answers_of_a_quorum("the forced release", |mut node| async move {
                admin::force_lock(&mut node, key, false).await
            })
            .await?;
        let holder = self.quorum_holder(evictions.iter().map(|evicted| evicted.holder.as_ref()));
        let fence = evictions
            .iter()
            .map(|evicted| evicted.fence)
            .max()
            .unwrap_or(0);
        Ok(Evicted {
            holder,
            fence,
            ..Evicted::default()
        })
    }

    /// The answers to `op` of every node that answered within the response
    /// timeout; fails unless a quorum did (`what` names the step).
    async fn answers_of_a_quorum<T, F>(
        &self,
        what: &str,
        op: impl Fn(ConnectionManager) -> F,
    ) -> Result<Vec<T>, LockError>
    where
        F: Future<Output = Result<T, RedisError>>,
    {
        let (mut answers, mut failed) = (Vec::new(), Vec::new());
        self.on_every_node(self.response_timeout, op, |index, reply| {
            match reply {
                Ok(answer) => answers.push(answer),
                Err(err) => failed.push((index, err)),
            }
            false
        })
        .await;
        if answers.len() < self.quorum {
            return Err(self.unreachable(&format!("too few Redlock nodes answered {what}"), failed));
        }
        Ok(answers)
    }

    /// The holder that a quorum of the nodes' answers name, if any.
    fn quorum_holder<'a>(
        &self,
        holders: impl Iterator<Item = Option<&'a String>> + Clone,
    ) -> Option<String> {
        holders
            .clone()
            .flatten()
            .find(|token| {
                let named = holders.clone().filter(|holder| *holder == Some(*token));
                named.count() >= self.quorum
            })
            .cloned()
    }

    /// The keys matching `pattern` on any node that answers; fails unless a
    /// quorum answered. A node's whole scan (many round trips) is bounded
    /// by 100 response timeouts.
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        let mut found = Vec::new();
        let mut answered = 0;
        let mut failed = Vec::new();
        self.on_every_node(
            self.response_timeout.saturating_mul(100),
            |node| async move {
                admin::scan(pattern, |command| {
                    let mut node = node.clone();
                    async move { command.query_async(&mut node).await }
                })
                .await
            },
            |index, reply| {
                match reply {
                    Ok(keys) => {
                        answered += 1;
                        found.extend(keys);
                    }
                    Err(err) => failed.push((index, err)),
                }
                false
            },
        )
        .await;
        if answered < self.quorum {
            return Err(self.unreachable("too few Redlock nodes answered the scan", failed));
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.notifications.local_waiters(key.lock())
    }

    /// Joins the local waiters of `key` and subscribes on a quorum of nodes.
    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        self.notifications.watch(key.lock(), self.quorum).await
    }

    /// Longest wait for one node's answer.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        (ttl / 10).min(self.response_timeout)
    }

    /// Raises the fencing counter to `fence` on every node and refreshes its
    /// expiry for a lease of `ttl_ms`; returns how many of the `holders`
    /// (nodes where the lock is ours) acknowledged, stopping once a quorum did.
    async fn write_fence(
        &self,
        key: &LockKey,
        fence: u64,
        ttl_ms: u64,
        holders: &[usize],
        timeout: Duration,
    ) -> usize {
        let mut acknowledged = 0;
        self.on_every_node(
            timeout,
            |mut node| async move {
                let retention_ms = fence_retention_ms(ttl_ms);
                let raised: Result<i64, RedisError> = run_script!(
                    scripts::FENCE_FLOOR,
                    &mut node,
                    keys[key.fence()],
                    args[fence, retention_ms]
                );
                raised
            },
            |index, reply| {
                if reply.is_ok() && holders.contains(&index) {
                    acknowledged += 1;
                }
                acknowledged >= self.quorum
            },
        )
        .await;
        acknowledged
    }

    /// Releases on every node and waits for every answer (or `timeout`).
    async fn release_everywhere(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        timeout: Duration,
    ) -> Tally {
        let mut tally = Tally::default();
        self.on_every_node(
            timeout,
            |mut node| async move {
                release(
                    &mut node,
                    key,
                    token,
                    (Duration::ZERO, NO_LOCK_DELAY),
                    false,
                )
                .await
            },
            |index, reply| {
                tally.record(index, reply);
                false
            },
        )
        .await;
        tally
    }

    /// Sends `op` to every node at once, each answer bounded by `timeout`, and
    /// hands the answers to `settle` as they arrive, until `settle` returns
    /// true (decided: nodes that have not answered are abandoned) or every
    /// node answered.
    async fn on_every_node<T, F>(
        &self,
        timeout: Duration,
        op: impl Fn(ConnectionManager) -> F,
        mut settle: impl FnMut(usize, Result<T, LockError>) -> bool,
    ) where
        F: Future<Output = Result<T, RedisError>>,
    {
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let reply = op(node.commands.clone());
                async move {
                    let reply = match tokio::time::timeout(timeout, reply).await {
                        Ok(reply) => reply.map_err(lock_error),
                        Err(_) => Err(LockError::connection(format!(
                            "no answer within {timeout:?}"
                        ))),
                    };
                    (index, reply)
                }
            })
            .collect();
        while let Some((index, reply)) = pending.next().await {
            if settle(index, reply) {
                return;
            }
        }
    }

    /// The error for an operation that fewer than a quorum of nodes answered:
    /// `Connection` unless every failure was an error reply of a server.
    ///
    /// A node that refused the credentials (its password changed) makes it
    /// `Auth`, naming that node: retrying will not help.
    fn unreachable(&self, what: &str, failed: Vec<(usize, LockError)>) -> LockError {
        if let Some((index, LockError::Auth { detail, source })) = failed
            .iter()
            .find(|(_, err)| matches!(err, LockError::Auth { .. }))
        {
            return LockError::Auth {
                detail: format!("Redlock node {}: {detail}", self.nodes[*index].url),
                source: source.clone(),
            };
        }
        let connection = failed
            .iter()
            .any(|(_, err)| matches!(err, LockError::Connection { .. }));
        let details: Vec<String> = failed
            .into_iter()
            .map(|(index, err)| format!("{}: {err}", self.nodes[index].url))
            .collect();
        let message = format!("{what} ({})", details.join("; "));
        if connection || details.is_empty() {
            LockError::connection(message)
        } else {
            LockError::server(message)
        }
    }

    /// Renews a batch of leases on every node at once, one script call per
    /// node, each answer bounded by the node timeout of the shortest ttl
    /// among them (see `batch`). A lease is renewed iff a quorum of nodes
    /// renewed it, refused once more than N − quorum refused it, and
    /// unknown otherwise; fewer than a quorum of nodes answering fails the
    /// whole batch.
    pub(crate) async fn renew_batch(
        &self,
        claims: &[Claim<'_>],
    ) -> Result<Vec<Renewal>, LockError> {
        let ttl = claims.iter().map(Claim::ttl).min().unwrap_or_default();
        let (n, quorum) = (self.nodes.len(), self.quorum);
        let mut tallies: Vec<Tally> = claims.iter().map(|_| Tally::default()).collect();
        let mut failed = Vec::new();
        self.on_every_node(
            self.node_timeout(ttl),
            |mut node| async move { renew_each(&mut node, claims, NO_LOCK_DELAY).await },
            |index, reply| {
                match reply {
                    Ok(renewed) => {
                        for (tally, renewed) in tallies.iter_mut().zip(renewed) {
                            tally.record(index, Ok(renewed));
                        }
                    }
                    Err(err) => failed.push((index, err)),
                }
                false
            },
        )
        .await;
        if failed.len() > n - quorum {
            return Err(self.unreachable(
                &format!(
                    "a batch of renewals reached {} of {n} Redlock nodes, a quorum needs {quorum}",
                    n - failed.len()
                ),
                failed,
            ));
        }
        Ok(tallies
            .iter()
            .map(|tally| {
                if tally.ours >= quorum {
                    Renewal::Renewed
                } else if tally.not_ours > n - quorum {
                    Renewal::Refused
                } else {
                    Renewal::Unknown
                }
            })
            .collect())
    }
}

impl Tally {
    fn record(&mut self, index: usize, reply: Result<bool, LockError>) {
        match reply {
            Ok(true) => self.ours += 1,
            Ok(false) => self.not_ours += 1,
            Err(err) => self.failed.push((index, err)),
        }
    }
}

/// A random pause in `JITTER_MS`, so contenders of a split vote do not retry in lockstep.
/// From the system's generator, not the thread's: a split vote is rare, and
/// this works in a thread being torn down too (see `token`); the clock's
/// nanoseconds if the system cannot answer.
fn jitter() -> Duration {
    let (low, high) = JITTER_MS;
    let random = rand::TryRng::try_next_u64(&mut rand::rngs::SysRng).unwrap_or_else(|_| {
        u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos(),
        )
    });
    Duration::from_millis(low + random % (high - low + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let pause = jitter();
            assert!((5..=50).contains(&pause.as_millis()), "{pause:?}");
        }
    }
}
