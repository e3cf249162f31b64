//! What [`LockManager::check`](crate::LockManager::check) reports: each
//! node asked (round trip, server and version, the native commands locks
//! will use, or why it failed) and the risks to the lock's guarantees that
//! the servers' settings show. A start-up and readiness probe: it takes no
//! lock.

use std::fmt;
use std::time::Duration;

use crate::LockError;

/// What a manager found when it checked its servers: every node it asked
/// and every risk their settings carry. `Display` prints it for an operator
/// (`dlock doctor` does); the fields are for programs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckReport {
    /// The deployment checked, in words: `one server`, `Redis Cluster`,
    /// `Sentinel service `name``, `Redlock over 3 nodes` or `in memory`.
    pub deployment: String,
    /// Every node asked, in order: the primaries, then the Sentinels.
    pub nodes: Vec<NodeReport>,
    /// What can weaken the lock's guarantees on these servers.
    pub risks: Vec<Risk>,
}

/// One node asked by [`LockManager::check`](crate::LockManager::check).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeReport {
    /// `host:port`, never a password.
    pub address: String,
    /// What the node is to the manager.
    pub role: NodeRole,
    /// One `PING`'s round trip; `None` when it failed.
    pub round_trip: Option<Duration>,
    /// The server's name and version as it reports them (`redis 7.0.15`,
    /// `valkey 9.1.2`); `None` when it did not say.
    pub server: Option<String>,
    /// The server's own commands that locks use on it instead of a script
    /// (`DELIFEQ`, `DELEX IFEQ`, `SET IFEQ`); empty when the scripts serve.
    pub native: Vec<&'static str>,
    /// Where a primary stands in its lock-delay (see
    /// [`LockManagerBuilder::lock_delay`](crate::LockManagerBuilder::lock_delay));
    /// `None` when it grants as usual, or the manager keeps no delay. A
    /// cluster primary keeps it per slot: the longest delay running in a
    /// slot it serves, else `Pending` when one is still to start in one.
    pub lock_delay: Option<LockDelayState>,
    /// Why the node could not be checked; the manager works without it
    /// (a Sentinel, or a Redlock node beyond the quorum).
    pub failure: Option<LockError>,
}

/// A primary that grants nothing for now, or will not at its next grant,
/// because it was promoted or restarted since it last granted a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockDelayState {
    /// In its lock-delay: it grants no lock, permit or write lease for
    /// `left` more, counted from the check.
    Running {
        /// What was left of the delay when the node was checked.
        left: Duration,
    },
    /// Promoted or restarted since its last grant: its lock-delay starts at
    /// the next grant or renewal asked of it.
    Pending,
    /// A primary that the Sentinels replaced while it was still up, deposed
    /// by a manager that learned of the failover: it grants, hands over
    /// and renews nothing for `left` more (then, if still a primary, its
    /// lock-delay starts at the next grant or renewal).
    Deposed {
        /// What was left of the deposition when the node was checked.
        left: Duration,
    },
}

/// What a node is to the manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeRole {
    /// The server locks are taken on (one server, Sentinel's primary, a
    /// Cluster primary).
    Primary,
    /// A Sentinel that names the primary.
    Sentinel,
    /// One of Redlock's independent masters.
    RedlockNode,
}

/// A setting of a server that weakens what the lock guarantees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Risk {
    /// The server evicts keys when memory is full, and every lock key has a
    /// TTL, so `volatile-*` policies evict them as readily as `allkeys-*`:
    /// an evicted lock is granted again while its holder works.
    Eviction {
        /// The node, `host:port`.
        node: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
    /// Replicas are attached and nothing makes a grant wait for them: a
    /// failover can promote a replica that never saw a lock and grant it again.
    AsyncReplication {
        /// The node, `host:port`.
        node: String,
        /// How many replicas it has.
        replicas: u32,
    },
    /// No append-only file: a restart loses every lock held, and the
    /// server may grant one again while its earlier lease is still valid.
    NoAppendOnlyFile {
        /// The node, `host:port`.
        node: String,
    },
    /// The server's clock moved differently from this process's between
    /// two reads during the check: leases count the server's time.
    ClockJump {
        /// The node, `host:port`.
        node: String,
        /// How much more (or, negative, less) the server's clock advanced.
        drift_ms: i64,
    },
    /// The server refused `INFO`, so its eviction, replication and
    /// persistence settings could not be checked.
    SettingsUnreadable {
        /// The node, `host:port`.
        node: String,
    },
}

/// The overall outcome of a check, for a probe's answer or an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Every node answered and no risk was found.
    Healthy,
    /// Every node answered; some setting weakens the guarantees.
    AtRisk,
    /// Locks work, but some node (a Sentinel, a Redlock node) failed.
    Degraded,
}

impl CheckReport {
    /// A report on `deployment` with nothing found yet.
    pub(crate) fn new(deployment: impl Into<String>) -> Self {
        CheckReport {
            deployment: deployment.into(),
            nodes: Vec::new(),
            risks: Vec::new(),
        }
    }

    /// Degraded when a node failed, at risk when a risk was found, else
    /// healthy.
    pub fn verdict(&self) -> Verdict {
        if self.nodes.iter().any(|node| node.failure.is_some()) {
            Verdict::Degraded
        } else if !self.risks.is_empty() {
            Verdict::AtRisk
        } else {
            Verdict::Healthy
        }
    }
}

impl NodeReport {
    /// A node in `role` at `address`, nothing learned yet.
    pub(crate) fn new(address: impl Into<String>, role: NodeRole) -> Self {
        NodeReport {
            address: address.into(),
            role,
            round_trip: None,
            server: None,
            native: Vec::new(),
            lock_delay: None,
            failure: None,
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "deployment: {}", self.deployment)?;
        for node in &self.nodes {
            writeln!(f, "  {node}")?;
        }
        if !self.risks.is_empty() {
            writeln!(f, "risks:")?;
            for risk in &self.risks {
                writeln!(f, "  - {risk}")?;
            }
        }
        write!(f, "verdict: {}", self.verdict())
    }
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.address)?;
        if let Some(failure) = &self.failure {
            return write!(f, ": FAILED: {failure}");
        }
        if let Some(server) = &self.server {
            write!(f, ", {server}")?;
        }
        if let Some(round_trip) = self.round_trip {
            write!(
                f,
                ", round trip {:.1} ms",
                round_trip.as_secs_f64() * 1000.0
            )?;
        }
        if !self.native.is_empty() {
            write!(f, ", native {}", self.native.join(", "))?;
        }
        match self.lock_delay {
            Some(LockDelayState::Running { left }) => write!(
                f,
                ", in its lock-delay (a failover or a restart): grants nothing for {:.1} s more",
                left.as_secs_f64()
            ),
            Some(LockDelayState::Pending) => f.write_str(
                ", promoted or restarted since its last grant: its lock-delay starts at the next grant",
            ),
            Some(LockDelayState::Deposed { left }) => write!(
                f,
                ", replaced as the primary and deposed: grants and renews nothing for {:.1} s more",
                left.as_secs_f64()
            ),
            None => Ok(()),
        }
    }
}

impl fmt::Display for NodeRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeRole::Primary => "primary",
            NodeRole::Sentinel => "sentinel",
            NodeRole::RedlockNode => "redlock node",
        })
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Risk::Eviction { node, policy } => write!(
                f,
                "{node}: maxmemory-policy {policy} can evict lock keys (every lock key has a TTL), and an evicted lock is granted again while its holder works; set maxmemory-policy noeviction, or keep locks on a server of their own"
            ),
            Risk::AsyncReplication { node, replicas } => write!(
                f,
                "{node}: {replicas} replica(s) and no grant waits for them, so a failover can grant a lock twice; use LockOptions::min_replicas (or the server's min-replicas-to-write)"
            ),
            Risk::NoAppendOnlyFile { node } => write!(
                f,
                "{node}: no append-only file, so a restart loses every held lock and may grant one again while its earlier lease is valid; keep a restarted server down for the longest ttl, or set appendonly yes with appendfsync always (fencing tokens keep rising across restarts while the server's clock does not step back)"
            ),
            Risk::ClockJump { node, drift_ms } => write!(
                f,
                "{node}: the server's clock moved {drift_ms:+} ms against this process's during the check; leases count the server's time, so check its time source"
            ),
            Risk::SettingsUnreadable { node } => write!(
                f,
                "{node}: INFO was refused, so eviction, replication and persistence could not be checked; grant +info to let check() see them"
            ),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Healthy => "healthy",
            Verdict::AtRisk => "at risk",
            Verdict::Degraded => "degraded",
        })
    }
}
