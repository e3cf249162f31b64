//! [`RedisCluster`]: a real Redis Cluster of `redis-server` processes on
//! loopback, which a test forms, fails over and reshards on command.

mod nodes;
mod slot;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

pub use slot::{key_slot, CLUSTER_SLOTS};

use self::nodes::Entry;
use crate::process::LOOPBACK;
use crate::resp::RespValue;
use crate::server::RedisServer;
use crate::topology::{self, Role};
use crate::ExtraPort;

/// Default `cluster-node-timeout`: short, so failovers take seconds, yet long
/// enough that a busy machine does not make nodes look failed.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Bound on forming the cluster once its nodes run.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a failover or a migration settling, before node timeouts are added.
const SETTLE_BASE: Duration = Duration::from_secs(10);
/// Node timeouts added to [`SETTLE_BASE`]: failure detection takes two, and
/// the election waits up to about one more per replica ranked before the winner.
const SETTLE_NODE_TIMEOUTS: u32 = 10;
/// When to ask again for a manual failover: Redis gives one up after 5 s.
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(6);
/// Added to 2 node timeouts before the harness fails over a shard again.
const VOTE_MARGIN: Duration = Duration::from_millis(500);
/// Keys moved by one `MIGRATE`.
const MIGRATE_BATCH: usize = 100;
/// Rounds of `MIGRATE` at most for one slot: a million keys.
const MAX_MIGRATE_ROUNDS: usize = 10_000;
/// Bound on one `MIGRATE`, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";

/// Options for starting a [`RedisCluster`]; obtained from [`RedisCluster::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct RedisClusterBuilder {
    primaries: usize,
    replicas_per_primary: usize,
    node_timeout: Duration,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            primaries: 3,
            replicas_per_primary: 1,
            node_timeout: DEFAULT_NODE_TIMEOUT,
        }
    }
}

impl RedisClusterBuilder {
    /// Number of primaries (default 3), which split the 16384 slots into
    /// contiguous ranges as evenly as possible. Replicas are promoted only by
    /// a majority of primaries, so failovers need at least 3.
    pub fn primaries(mut self, primaries: usize) -> Self {
        self.primaries = primaries;
        self
    }

    /// Number of replicas attached to each primary (default 1; 0 for none).
    pub fn replicas_per_primary(mut self, replicas: usize) -> Self {
        self.replicas_per_primary = replicas;
        self
    }

    /// The nodes' `cluster-node-timeout` (default 1 s, whole milliseconds):
    /// how long a primary must be unreachable before its replica may take
    /// over. Failovers take a few times this long.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Starts the nodes and forms the cluster; returns once every running
    /// node reports `cluster_state:ok`, all nodes agree on which primary
    /// serves each of the 16384 slots, and every replica's replication link
    /// is up.
    ///
    /// Each node is a [`RedisServer`] with `--cluster-enabled yes`, its bus
    /// on a second reserved port (`--cluster-port`, so Redis ≥ 7.0 is
    /// needed), and `--cluster-replica-validity-factor 0`, so a replica may
    /// always take over. The cluster is formed with the commands
    /// `redis-cli --cluster create` sends: slot ranges, distinct config
    /// epochs, `CLUSTER MEET`, `CLUSTER REPLICATE`.
    ///
    /// Panics if `primaries` is 0 or above 16384, or the node timeout is
    /// under 1 ms; if a node cannot start (see [`RedisServerBuilder::start`](crate::RedisServerBuilder::start));
    /// or, with the cause and every node's log tail, if the cluster does not
    /// form within 30 s.
    #[track_caller]
    pub fn start(self) -> RedisCluster {
        if self.primaries == 0 || self.primaries > usize::from(CLUSTER_SLOTS) {
            panic!(
                "a cluster needs 1 to {CLUSTER_SLOTS} primaries, not {}",
                self.primaries
            );
        }
        let node_timeout_ms = self.node_timeout.as_millis();
        if node_timeout_ms == 0 {
            panic!("the node timeout must be at least 1 ms");
        }
        let count = self
            .primaries
            .saturating_mul(self.replicas_per_primary.saturating_add(1));
        let nodes = (0..count)
            .map(|_| Node::start(&node_timeout_ms.to_string()))
            .collect();
        let cluster = RedisCluster {
            nodes,
            node_timeout: self.node_timeout,
            last_election: Mutex::new(None),
        };
        cluster.form(self.primaries, self.replicas_per_primary);
        cluster
    }
}

/// A Redis Cluster on `127.0.0.1`: by default 3 primaries with one replica
/// each, every node a [`RedisServer`] owned by the current test.
///
/// Roles are not fixed: the lookups ([`primaries`](Self::primaries),
/// [`node_for_slot`](Self::node_for_slot), ...) ask the running nodes each
/// time, so they follow failovers and migrations, whether this value caused
/// them or not. The methods that change the topology return only once every
/// running node agrees on it again.
///
/// Every node is killed with SIGKILL when the value is dropped, also during
/// unwinding after a failed assertion.
///
/// ```no_run
/// use leasehold_testkit::RedisCluster;
///
/// let mut cluster = RedisCluster::start();
/// let primary = cluster.primary_for_key("{user1}.lock").unwrap();
/// primary.command(&["SET", "{user1}.lock", "me"]).unwrap();
/// cluster.kill_primary(0);
/// ```
#[must_use = "the nodes are killed as soon as the cluster is dropped"]
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    node_timeout: Duration,
    /// When the last failover this harness caused had settled.
    last_election: Mutex<Option<Instant>>,
}

impl RedisCluster {
    /// Starts 3 primaries with one replica each; see
    /// [`RedisClusterBuilder::start`] for the guarantees and panics.
    #[track_caller]
    pub fn start() -> RedisCluster {
        Self::builder().start()
    }

    /// Options for starting a cluster: primaries, replicas, node timeout.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// `redis://127.0.0.1:PORT` of every running node, primaries and
    /// replicas, in start order: what a cluster client takes as seeds.
    pub fn seed_urls(&self) -> Vec<String> {
        self.running().map(|node| node.server.url()).collect()
    }

    /// The running nodes that answer and call themselves primaries, ordered
    /// by the lowest slot they serve (primaries serving none come last), so
    /// index 0 is the primary of slot 0 even after a failover.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        let mut found: Vec<(u32, u16, &RedisServer)> = self
            .running()
            .filter_map(|node| {
                let me = node.myself().ok()?;
                let lowest = me.slots.iter().map(|range| u32::from(*range.start())).min();
                me.primary
                    .then(|| (lowest.unwrap_or(u32::MAX), node.server.port(), &node.server))
            })
            .collect();
        found.sort_by_key(|&(lowest, port, _)| (lowest, port));
        found.into_iter().map(|(_, _, server)| server).collect()
    }

    /// The running nodes that answer and call themselves replicas, in start order.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.running()
            .filter(|node| node.myself().is_ok_and(|me| !me.primary))
            .map(|node| &node.server)
            .collect()
    }

    /// The running replicas that name `primary` as their primary, in start
    /// order; empty if `primary` is not a node of this cluster.
    pub fn replicas_of(&self, primary: &RedisServer) -> Vec<&RedisServer> {
        let Some(primary) = self.find(primary) else {
            return Vec::new();
        };
        self.running()
            .filter(|node| {
                node.myself()
                    .is_ok_and(|me| me.primary_id.as_deref() == Some(primary.id.as_str()))
            })
            .map(|node| &node.server)
            .collect()
    }

    /// The running primary that claims `slot`, as the nodes themselves
    /// report it; `None` if none does (e.g. while a failover is under way)
    /// or `slot` is not below [`CLUSTER_SLOTS`].
    pub fn node_for_slot(&self, slot: u16) -> Option<&RedisServer> {
        self.running()
            .find(|node| {
                node.myself().is_ok_and(|me| {
                    me.primary && me.slots.iter().any(|range| range.contains(&slot))
                })
            })
            .map(|node| &node.server)
    }

    /// The running primary that serves `key`: [`node_for_slot`](Self::node_for_slot)
    /// of [`key_slot`]`(key)`, hash tags included.
    pub fn primary_for_key(&self, key: impl AsRef<[u8]>) -> Option<&RedisServer> {
        self.node_for_slot(key_slot(key))
    }

    /// Kills `primaries()[index]` with SIGKILL, as in a crash, and returns the
    /// address of the replica that took over its slots, once every running
    /// node agrees on the new layout (see [`RedisClusterBuilder::start`]).
    /// Writes the replica had not received yet are lost, as in production.
    ///
    /// First waits, if needed, until 2 node timeouts have passed since the
    /// harness's previous failover: Redis 7.0 can otherwise let a replica
    /// that won that election reuse its stale votes, and the shard stays
    /// down.
    ///
    /// Panics if there is no such primary, it serves no slot or has no
    /// replica, or, with every node's log tail, if no replica takes over
    /// within 10 s plus 10 node timeouts (20 s by default). Needs 3 primaries
    /// or more: the others must be a majority to elect the replica.
    #[track_caller]
    pub fn kill_primary(&mut self, index: usize) -> SocketAddr {
        let primaries = self.primaries();
        let Some(&target) = primaries.get(index) else {
            panic!(
                "kill_primary({index}): the cluster has {} running primaries",
                primaries.len()
            );
        };
        let addr = target.addr();
        let first_slot = self
            .node_for(target)
            .myself()
            .ok()
            .and_then(|me| me.slots.first().map(|range| *range.start()));
        let Some(first_slot) = first_slot else {
            panic!("kill_primary({index}): {addr} serves no slot, so no replica would take over");
        };
        if self.replicas_of(target).is_empty() {
            panic!("kill_primary({index}): {addr} has no replica to promote");
        }
        let position = self.position(target);
        self.let_votes_go_stale();
        self.nodes[position].server.kill();
        let promoted = topology::wait_for(
            &format!("promote a replica of the killed primary {addr}"),
            self.settle_timeout(),
            &self.servers(),
            || {
                self.settled()?;
                self.node_for_slot(first_slot)
                    .map(RedisServer::addr)
                    .ok_or_else(|| format!("no running primary claims slot {first_slot}"))
            },
        );
        self.election_settled();
        promoted
    }

    /// Runs `CLUSTER FAILOVER` on `replica`: its primary stops accepting
    /// writes until the replica has caught up, then the replica takes over
    /// its slots and the old primary becomes its replica. Returns once the
    /// replica calls itself primary and every running node agrees on the
    /// layout, replication links up (see [`RedisClusterBuilder::start`]).
    /// No acknowledged write is lost.
    ///
    /// Like [`Self::kill_primary`], first waits until 2 node timeouts have
    /// passed since the harness's previous failover, if needed.
    ///
    /// Redis abandons a manual failover after 5 s, e.g. when the primaries
    /// will not vote again so soon (2 node timeouts) after an earlier
    /// failover of the same shard; the command is then sent again.
    ///
    /// Panics if `replica` is not a running replica of this cluster, or, with
    /// every node's log tail, if the failover does not complete within 10 s
    /// plus 10 node timeouts.
    #[track_caller]
    pub fn failover(&self, replica: &RedisServer) {
        self.fail_over_to(replica, &["CLUSTER", "FAILOVER"]);
    }

    /// Runs `CLUSTER FAILOVER FORCE` on `replica`: it takes over its
    /// primary's slots without first catching up with it, as when that
    /// primary cannot be reached, so writes the replica had not received
    /// are lost (the old primary, demoted, resynchronises from it). Returns
    /// and panics as [`Self::failover`] does.
    #[track_caller]
    pub fn force_failover(&self, replica: &RedisServer) {
        self.fail_over_to(replica, &["CLUSTER", "FAILOVER", "FORCE"]);
    }

    /// Sends `command`, a form of `CLUSTER FAILOVER`, to `replica` until it
    /// is a primary, and waits until the cluster is whole again.
    #[track_caller]
    fn fail_over_to(&self, replica: &RedisServer, command: &[&str]) {
        let node = self.node_for(replica);
        let servers = self.servers();
        let addr = replica.addr();
        if !replica.is_running() || node.myself().map_or(true, |me| me.primary) {
            topology::fail(
                &format!("fail over to {addr}"),
                "it is not a running replica",
                &servers,
            );
        }
        let request = || topology::expect(replica, command, &servers);
        self.let_votes_go_stale();
        request();
        let mut requested = Instant::now();
        topology::wait_for(
            &format!("promote {addr} with CLUSTER FAILOVER"),
            self.settle_timeout(),
            &servers,
            || {
                if !node.myself()?.primary {
                    if requested.elapsed() > MANUAL_FAILOVER_RETRY {
                        request();
                        requested = Instant::now();
                    }
                    return Err(format!("{addr} is still a replica"));
                }
                self.settled().map(drop)
            },
        );
        self.election_settled();
    }

    /// Waits until 2 node timeouts (plus a margin) have passed since the
    /// last failover this harness caused. Within that time Redis 7.0 lets a
    /// replica that won that election, and has since become a replica
    /// again, "win" the next one with the old votes and the old config
    /// epoch; the other nodes reject the stale claim and the shard's slots
    /// stay unserved (seen as `cluster_state:fail` for over 20 s). A real
    /// cluster does not fail the same shard twice within 2 s; the harness
    /// must not either.
    fn let_votes_go_stale(&self) {
        let stale_after = self.node_timeout.saturating_mul(2) + VOTE_MARGIN;
        let last = *self.last_election.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(remaining) = last.and_then(|at| stale_after.checked_sub(at.elapsed())) {
            thread::sleep(remaining);
        }
    }

    /// Notes that a failover has just settled (see [`Self::let_votes_go_stale`]).
    fn election_settled(&self) {
        *self.last_election.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Moves `slot` and its keys from primary `from` to primary `to` the way
    /// Redis documents resharding: `CLUSTER SETSLOT IMPORTING` on `to`,
    /// `MIGRATING` on `from`, `MIGRATE` of the slot's keys in batches of 100
    /// (TTLs kept), then `CLUSTER SETSLOT NODE` on `to`, `from` and the other
    /// primaries. Returns the number of keys moved, once every running node
    /// agrees that `to` serves the slot.
    ///
    /// While keys move, `from` answers `ASK` for keys it no longer has, as a
    /// real resharding does. Keys must be UTF-8, the only keys this crate's
    /// client can send.
    ///
    /// Panics if `slot` is not below [`CLUSTER_SLOTS`], `from` does not serve
    /// it, `to` is not another running primary, a key is not UTF-8, or, with
    /// every node's log tail, if a command fails or the nodes do not agree
    /// within 10 s plus 10 node timeouts.
    #[track_caller]
    pub fn migrate_slot(&self, slot: u16, from: &RedisServer, to: &RedisServer) -> usize {
        let servers = self.servers();
        let what = format!("migrate slot {slot} from {} to {}", from.addr(), to.addr());
        let (source, target) = (self.node_for(from), self.node_for(to));
        if self.node_for_slot(slot).map(RedisServer::port) != Some(from.port()) {
            topology::fail(&what, "the source does not serve that slot", &servers);
        }
        if source.id == target.id || !to.is_running() || !target.myself().is_ok_and(|me| me.primary)
        {
            topology::fail(&what, "the target is not another running primary", &servers);
        }
        let slot_arg = slot.to_string();
        let setslot = |node: &RedisServer, state: &str, id: &str| {
            topology::expect(
                node,
                &["CLUSTER", "SETSLOT", &slot_arg, state, id],
                &servers,
            );
        };
        setslot(to, "IMPORTING", &source.id);
        setslot(from, "MIGRATING", &target.id);
        let moved = self.move_keys(slot, from, to, &what);
        setslot(to, "NODE", &target.id);
        setslot(from, "NODE", &target.id);
        for other in self.primaries() {
            if other.port() != from.port() && other.port() != to.port() {
                setslot(other, "NODE", &target.id);
            }
        }
        topology::wait_for(&what, self.settle_timeout(), &servers, || {
            self.settled()?;
            self.running().try_for_each(|node| {
                let owners = nodes::slot_owners(&node.view()?)?;
                let owner = owners.iter().find(|(range, _)| range.contains(&slot));
                match owner {
                    Some((_, id)) if *id == target.id => Ok(()),
                    _ => Err(format!(
                        "{} does not see the slot on the target yet",
                        node.server.addr()
                    )),
                }
            })
        });
        moved
    }

    /// Assigns slot ranges, introduces the nodes to each other, attaches the
    /// replicas, and waits until the cluster is whole.
    #[track_caller]
    fn form(&self, primaries: usize, replicas_per_primary: usize) {
        let servers = self.servers();
        let (first_primaries, replicas) = self.nodes.split_at(primaries);
        for (index, node) in first_primaries.iter().enumerate() {
            let (start, end) = slot_range(index, primaries);
            let (start, end) = (start.to_string(), end.to_string());
            let args = ["CLUSTER", "ADDSLOTSRANGE", &start, &end];
            topology::expect(&node.server, &args, &servers);
        }
        // Distinct epochs, so no two primaries claim slots with equal authority.
        for (epoch, node) in (1_u32..).zip(&self.nodes) {
            let args = ["CLUSTER", "SET-CONFIG-EPOCH", &epoch.to_string()];
            topology::expect(&node.server, &args, &servers);
        }
        let host = LOOPBACK.to_string();
        let introducer = &self.nodes[0].server;
        for node in &self.nodes[1..] {
            let (port, bus) = (
                node.server.port().to_string(),
                node.bus_port.port().to_string(),
            );
            topology::expect(
                introducer,
                &["CLUSTER", "MEET", &host, &port, &bus],
                &servers,
            );
        }
        topology::wait_for(
            "introduce the cluster's nodes to each other",
            FORM_TIMEOUT,
            &servers,
            || self.all_known(),
        );
        for (index, node) in replicas.iter().enumerate() {
            let primary = &first_primaries[index % primaries];
            topology::expect(
                &node.server,
                &["CLUSTER", "REPLICATE", &primary.id],
                &servers,
            );
        }
        let expected = (primaries, primaries * replicas_per_primary);
        topology::wait_for("form the cluster", FORM_TIMEOUT, &servers, || {
            let census = self.settled()?;
            match census == expected {
                true => Ok(()),
                false => Err(format!(
                    "(primaries, replicas) are {census:?}, not {expected:?}"
                )),
            }
        });
    }

    /// Whether every node knows every other one, handshakes finished.
    fn all_known(&self) -> Result<(), String> {
        self.nodes.iter().try_for_each(|node| {
            let view = node.view()?;
            let known = view.iter().filter(|entry| !entry.handshake).count();
            match known == self.nodes.len() {
                true => Ok(()),
                false => Err(format!("{} knows {known} nodes", node.server.addr())),
            }
        })
    }

    /// Checks that the cluster is whole: every running node reports
    /// `cluster_state:ok`; all of them see the same owner for every slot, an
    /// owner that is a running primary; all of them see each running node in
    /// the role it claims (so a primary knows its replicas); and each running
    /// replica replicates from the primary it claims over a link that is up
    /// (not from a demoted primary it has yet to leave). Returns the
    /// (primaries, replicas) running.
    fn settled(&self) -> Result<(usize, usize), String> {
        let views = self.views()?;
        let claims: Vec<(&Node, &Entry)> = views
            .iter()
            .map(|(node, view)| Ok((*node, nodes::myself(view)?)))
            .collect::<Result<_, String>>()?;
        let claimed = |id: &str| claims.iter().find(|(node, _)| node.id == id);
        let running_primary = |id: &str| claimed(id).filter(|(_, me)| me.primary);
        let mut owners = None;
        for (node, view) in &views {
            let addr = node.server.addr();
            let seen = nodes::slot_owners(view).map_err(|e| format!("{addr} sees that {e}"))?;
            if owners.as_ref().is_some_and(|owners| *owners != seen) {
                return Err(format!(
                    "{addr} and another node disagree on who serves which slots"
                ));
            }
            owners = Some(seen);
            for entry in view {
                if claimed(&entry.id).is_some_and(|(_, me)| !same_role(me, entry)) {
                    return Err(format!(
                        "{addr} does not yet see node {} in its new role",
                        entry.id
                    ));
                }
            }
        }
        let owners = owners.ok_or("no node is running")?;
        if let Some((range, owner)) = owners.iter().find(|(_, id)| running_primary(id).is_none()) {
            return Err(format!(
                "slots {range:?} belong to {owner}, not a running primary"
            ));
        }
        let mut replicas = 0;
        for (node, me) in claims.iter().filter(|(_, me)| !me.primary) {
            let expected = me.primary_id.as_deref().and_then(running_primary);
            let expected = expected.map(|(primary, _)| primary.server.port());
            match topology::role(&node.server)? {
                Role::Replica {
                    primary_port,
                    connected: true,
                } if Some(primary_port) == expected => {}
                role => {
                    let addr = node.server.addr();
                    return Err(format!(
                        "replica {addr} is {role:?}, not yet following port {expected:?}"
                    ));
                }
            }
            replicas += 1;
        }
        Ok((claims.len() - replicas, replicas))
    }

    /// The running nodes with their `CLUSTER NODES`, each checked to report
    /// `cluster_state:ok`.
    fn views(&self) -> Result<Vec<(&Node, Vec<Entry>)>, String> {
        self.running()
            .map(|node| {
                let info = topology::text(&node.server, &["CLUSTER", "INFO"])?;
                if !info.lines().any(|line| line.trim() == "cluster_state:ok") {
                    return Err(format!(
                        "{} does not report cluster_state:ok",
                        node.server.addr()
                    ));
                }
                Ok((node, node.view()?))
            })
            .collect()
    }

    /// Moves the keys of `slot` from `from` to `to` in bounded rounds.
    #[track_caller]
    fn move_keys(&self, slot: u16, from: &RedisServer, to: &RedisServer, what: &str) -> usize {
        let servers = self.servers();
        let (slot, batch) = (slot.to_string(), MIGRATE_BATCH.to_string());
        let (host, port) = (LOOPBACK.to_string(), to.port().to_string());
        let mut moved = 0;
        for _ in 0..MAX_MIGRATE_ROUNDS {
            let reply =
                topology::expect(from, &["CLUSTER", "GETKEYSINSLOT", &slot, &batch], &servers);
            let RespValue::Array(keys) = reply else {
                topology::fail(what, &format!("GETKEYSINSLOT replied {reply:?}"), &servers);
            };
            if keys.is_empty() {
                return moved;
            }
            let mut args = vec!["MIGRATE", &host, &port, "", "0", MIGRATE_TIMEOUT_MS, "KEYS"];
            for key in &keys {
                let key = key.as_str().unwrap_or_else(|| {
                    topology::fail(what, &format!("key {key:?} is not UTF-8"), &servers)
                });
                args.push(key);
            }
            topology::expect(from, &args, &servers);
            moved += keys.len();
        }
        topology::fail(
            what,
            &format!("keys remain after {MAX_MIGRATE_ROUNDS} rounds of MIGRATE"),
            &servers,
        )
    }

    /// Bound on a failover or migration settling.
    fn settle_timeout(&self) -> Duration {
        SETTLE_BASE.saturating_add(self.node_timeout.saturating_mul(SETTLE_NODE_TIMEOUTS))
    }

    /// The nodes whose process is alive.
    fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|node| node.server.is_running())
    }

    /// Every node, running or not, for failure messages.
    fn servers(&self) -> Vec<&RedisServer> {
        self.nodes.iter().map(|node| &node.server).collect()
    }

    /// The node `server` is, if it belongs to this cluster.
    fn find(&self, server: &RedisServer) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|node| node.server.port() == server.port())
    }

    /// The node `server` is; panics if it is not one of this cluster's.
    #[track_caller]
    fn node_for(&self, server: &RedisServer) -> &Node {
        self.find(server)
            .unwrap_or_else(|| panic!("{} is not a node of this cluster", server.addr()))
    }

    /// Index of `server` in `nodes`; panics if it is not one of this cluster's.
    #[track_caller]
    fn position(&self, server: &RedisServer) -> usize {
        self.nodes
            .iter()
            .position(|node| node.server.port() == server.port())
            .unwrap_or_else(|| panic!("{} is not a node of this cluster", server.addr()))
    }
}

/// One cluster node: its server, its id, and the port of its cluster bus.
#[derive(Debug)]
struct Node {
    server: RedisServer,
    id: String,
    /// Reserved for as long as the node lives; dropped after the server.
    bus_port: ExtraPort,
}

impl Node {
    /// Starts a cluster-enabled server and learns its id.
    #[track_caller]
    fn start(node_timeout_ms: &str) -> Node {
        let bus_port = ExtraPort::reserve();
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            node_timeout_ms,
            "--cluster-port",
            &bus_port.port().to_string(),
            "--cluster-replica-validity-factor",
            "0",
        ];
        let server = args
            .iter()
            .fold(RedisServer::builder(), |builder, arg| builder.arg(*arg))
            .start();
        let id = topology::text(&server, &["CLUSTER", "MYID"])
            .unwrap_or_else(|e| topology::fail("learn a node's id", &e, &[&server]));
        Node {
            server,
            id,
            bus_port,
        }
    }

    /// The node's `CLUSTER NODES`.
    fn view(&self) -> Result<Vec<Entry>, String> {
        nodes::parse(&topology::text(&self.server, &["CLUSTER", "NODES"])?)
    }

    /// The node's own line of `CLUSTER NODES`.
    fn myself(&self) -> Result<Entry, String> {
        nodes::myself(&self.view()?).cloned()
    }
}

/// Whether `seen`, a line of another node's view, gives the node the role
/// that `claimed`, its own line, does.
fn same_role(claimed: &Entry, seen: &Entry) -> bool {
    claimed.primary == seen.primary && claimed.primary_id == seen.primary_id
}

/// The `index`-th of `count` contiguous, near-equal slot ranges.
fn slot_range(index: usize, count: usize) -> (usize, usize) {
    let slots = usize::from(CLUSTER_SLOTS);
    (index * slots / count, (index + 1) * slots / count - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for count in [1, 2, 3, 7, 16384] {
            let ranges: Vec<_> = (0..count).map(|index| slot_range(index, count)).collect();
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges[count - 1].1, 16383);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].1 + 1, pair[1].0);
            }
        }
        assert_eq!(slot_range(1, 3), (5461, 10921));
    }
}
