//! [`RedisSentinel`]: a primary, its replicas and three Sentinels watching
//! them, all real processes on loopback, failed over on command.

use std::iter;
use std::net::SocketAddr;
use std::time::Duration;

use crate::engine::Engine;
use crate::process::LOOPBACK;
use crate::resp::RespValue;
use crate::server::RedisServer;
use crate::tempdir::TempDir;
use crate::topology::{self, Role};

/// The name under which the Sentinels monitor the primary.
const SERVICE_NAME: &str = "testkit-primary";
/// Replicas of the primary.
const REPLICAS: usize = 2;
/// Sentinels watching them.
const SENTINELS: usize = 3;
/// Sentinels that must agree the primary is down: a majority.
const QUORUM: usize = 2;
/// How long the primary must be silent before a Sentinel thinks it down.
const DOWN_AFTER_MS: u32 = 1000;
/// Sentinel's `failover-timeout`; a failed election is retried after twice this.
const FAILOVER_TIMEOUT_MS: u32 = 5000;
/// Bound on the Sentinels finding the replicas and each other.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a failover reaching every Sentinel: detection, a retried
/// election, promotion and the news spreading fit in it.
const FAILOVER_WAIT: Duration = Duration::from_secs(20);
/// Bound on Sentinel finding a replica it may promote: after a failover, the
/// old primary becomes one only 8 to 20 s later.
const PROMOTABLE_WAIT: Duration = Duration::from_secs(30);

/// One primary and 2 replicas, each a [`RedisServer`] on `127.0.0.1`, and 3
/// Sentinels monitoring them under [`service_name`](Self::service_name) with
/// quorum 2, `down-after-milliseconds` 1000 and `failover-timeout` 5000.
///
/// The primary is whatever the Sentinels say it is: [`primary`](Self::primary)
/// asks them each time, so it follows failovers however they happen. The
/// methods that fail over return once every Sentinel names the new primary
/// and it answers `ROLE` as a primary.
///
/// Every process is killed with SIGKILL when the value is dropped, the
/// Sentinels first, also during unwinding after a failed assertion.
///
/// ```no_run
/// use leasehold_testkit::RedisSentinel;
///
/// let mut topology = RedisSentinel::start();
/// let before = topology.primary().addr();
/// let after = topology.kill_primary();
/// assert_ne!(before, after);
/// ```
#[must_use = "the processes are killed as soon as the value is dropped"]
#[derive(Debug)]
pub struct RedisSentinel {
    /// Declared first, so dropped first: no Sentinel sees the data nodes die.
    sentinels: Vec<Sentinel>,
    /// The primary at start, then its replicas.
    data: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts the primary, its 2 replicas and the 3 Sentinels; returns once
    /// both replicas' links are up and every Sentinel names the primary,
    /// lists both replicas as healthy and knows the other 2 Sentinels, so a
    /// failover can be authorised at once.
    ///
    /// Each Sentinel is `redis-server <config> --sentinel`, with its config
    /// file (which Sentinel rewrites) in its own temporary directory.
    ///
    /// Panics if a process cannot start (see
    /// [`RedisServerBuilder::start`](crate::RedisServerBuilder::start)) or,
    /// with the cause and every process's log tail, if the Sentinels have
    /// not found everything within 30 s.
    #[track_caller]
    pub fn start() -> RedisSentinel {
        RedisSentinel::start_on(Engine::Redis)
    }

    /// As [`start`](Self::start), every process (data nodes and Sentinels)
    /// running `engine`'s server, e.g. Valkey 9.1 with its native commands.
    #[track_caller]
    pub fn start_on(engine: Engine) -> RedisSentinel {
        let data: Vec<RedisServer> =
            iter::repeat_with(|| RedisServer::builder().engine(engine).start())
                .take(1 + REPLICAS)
                .collect();
        for replica in &data[1..] {
            replica.replica_of(&data[0]);
        }
        let sentinels = iter::repeat_with(|| Sentinel::start(engine, data[0].port()))
            .take(SENTINELS)
            .collect();
        let topology = RedisSentinel { sentinels, data };
        topology::wait_for(
            "start Sentinels that know the primary, its replicas and each other",
            DISCOVERY_TIMEOUT,
            &topology.servers(),
            || topology.discovered(),
        );
        topology
    }

    /// The name the Sentinels know the primary by, as clients pass it to
    /// `SENTINEL get-master-addr-by-name`.
    pub fn service_name(&self) -> &str {
        SERVICE_NAME
    }

    /// `redis://127.0.0.1:PORT` of every Sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.server.url()).collect()
    }

    /// The Sentinels themselves, e.g. to ask each one a `SENTINEL` command.
    pub fn sentinels(&self) -> Vec<&RedisServer> {
        self.sentinels.iter().map(|s| &s.server).collect()
    }

    /// Makes every Sentinel ask clients for `password` (the `default`
    /// user's, set with `ACL SETUSER`) from now on, as Sentinels of managed
    /// set-ups do. The data nodes ask for none. This type's own queries send
    /// no password, so ask for [`primary`](Self::primary) and the like
    /// before calling it.
    ///
    /// Panics if a Sentinel refuses.
    #[track_caller]
    pub fn require_password(&self, password: &str) {
        let rule = format!(">{password}");
        for sentinel in self.sentinels() {
            sentinel
                .command(&["ACL", "SETUSER", "default", "resetpass", &rule])
                .unwrap_or_else(|e| panic!("password on Sentinel {}: {e}", sentinel.addr()));
        }
    }

    /// The data node that the first answering Sentinel names as primary.
    /// Right after [`start`](Self::start), [`failover`](Self::failover) and
    /// [`kill_primary`](Self::kill_primary) every Sentinel names it; while a
    /// failover is under way it may be a node that is down.
    ///
    /// Panics, with every process's log tail, if no Sentinel answers or the
    /// one that does names an address that is not one of the data nodes.
    #[track_caller]
    pub fn primary(&self) -> &RedisServer {
        let servers = self.servers();
        let reported = self
            .sentinels
            .iter()
            .find_map(|s| reported_primary(&s.server).ok());
        let Some(port) = reported else {
            topology::fail("find the primary", "no Sentinel answers", &servers);
        };
        self.data
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| {
                let cause = format!("the Sentinels name port {port}, not a data node");
                topology::fail("find the primary", &cause, &servers)
            })
    }

    /// The running data nodes other than [`primary`](Self::primary), in start
    /// order. After [`failover`](Self::failover) this includes the old
    /// primary, which Sentinel turns into a replica only some seconds later.
    #[track_caller]
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let primary = self.primary().port();
        self.data
            .iter()
            .filter(|node| node.port() != primary && node.is_running())
            .collect()
    }

    /// Forces a failover with `SENTINEL FAILOVER` and returns the new
    /// primary's address once every Sentinel names it and it answers `ROLE`
    /// as a primary. The old primary is not asked to agree: it keeps running,
    /// and accepts writes until Sentinel makes it a replica some seconds later.
    ///
    /// While Sentinel has no replica it may promote (`NOGOODSLAVE`, e.g.
    /// when the only one left is a previous primary that Sentinel is still
    /// turning into a replica) the command is retried, for up to 30 s.
    ///
    /// Panics, with every process's log tail, if Sentinel refuses for another
    /// reason or for longer, or no new primary is agreed on within 20 s.
    #[track_caller]
    pub fn failover(&self) -> SocketAddr {
        let what = "fail over with SENTINEL FAILOVER";
        let old = self.primary().port();
        let servers = self.servers();
        let sentinel = &self.sentinels[0].server;
        let args = ["SENTINEL", "FAILOVER", SERVICE_NAME];
        let accepted = topology::wait_for(what, PROMOTABLE_WAIT, &servers, || {
            match sentinel.command(&args) {
                Err(error) if error.contains("NOGOODSLAVE") => Err(error),
                other => Ok(other),
            }
        });
        if let Err(error) = accepted {
            topology::fail(what, &error, &servers);
        }
        self.wait_for_new_primary(what, old)
    }

    /// Kills the primary with SIGKILL, as in a crash, and returns the address
    /// of the replica the Sentinels promote, once every Sentinel names it and
    /// it answers `ROLE` as a primary. Writes the replica had not received are
    /// lost, as in production.
    ///
    /// Panics, with every process's log tail, if no replica is promoted
    /// within 20 s (detection takes about 1 s, a lost election 10 s more).
    #[track_caller]
    pub fn kill_primary(&mut self) -> SocketAddr {
        let old = self.primary().port();
        if let Some(primary) = self.data.iter_mut().find(|node| node.port() == old) {
            primary.kill();
        }
        self.wait_for_new_primary("promote a replica of the killed primary", old)
    }

    /// Waits until every Sentinel names the same primary other than the one
    /// on `old` and has finished its part in the failover, and that node
    /// answers `ROLE` as a primary.
    #[track_caller]
    fn wait_for_new_primary(&self, what: &str, old: u16) -> SocketAddr {
        topology::wait_for(what, FAILOVER_WAIT, &self.servers(), || {
            let port = self.agreed_primary()?;
            if port == old {
                return Err(format!("the Sentinels still name port {old}"));
            }
            for sentinel in &self.sentinels {
                let reply = sentinel
                    .server
                    .command(&["SENTINEL", "MASTER", SERVICE_NAME])?;
                if field(&reply, "flags").is_none_or(|flags| flags.contains("failover_in_progress"))
                {
                    return Err(format!(
                        "Sentinel {} is still failing over",
                        sentinel.server.addr()
                    ));
                }
            }
            let node = self
                .data
                .iter()
                .find(|node| node.port() == port && node.is_running())
                .ok_or_else(|| {
                    format!("the Sentinels name port {port}, not a running data node")
                })?;
            match topology::role(node)? {
                Role::Primary => Ok(node.addr()),
                role => Err(format!("{} is named primary but is {role:?}", node.addr())),
            }
        })
    }

    /// The primary's port, if every Sentinel names the same one.
    fn agreed_primary(&self) -> Result<u16, String> {
        let mut named = self.sentinels.iter().map(|s| reported_primary(&s.server));
        let first = named.next().ok_or("there is no Sentinel")??;
        for port in named {
            let port = port?;
            if port != first {
                return Err(format!("Sentinels name both port {first} and port {port}"));
            }
        }
        Ok(first)
    }

    /// Whether the replicas follow the primary and every Sentinel knows them
    /// all and the other Sentinels, none of them down or disconnected.
    fn discovered(&self) -> Result<(), String> {
        let primary = self.data[0].port();
        for replica in &self.data[1..] {
            match topology::role(replica)? {
                Role::Replica {
                    primary_port,
                    connected: true,
                } if primary_port == primary => {}
                role => return Err(format!("replica {} is {role:?}", replica.addr())),
            }
        }
        if self.agreed_primary()? != primary {
            return Err(format!("the Sentinels do not name port {primary}"));
        }
        let mut replica_ports: Vec<u16> = self.data[1..].iter().map(RedisServer::port).collect();
        replica_ports.sort_unstable();
        for sentinel in &self.sentinels {
            let addr = sentinel.server.addr();
            let mut replicas = healthy_ports(&sentinel.server, "REPLICAS")?;
            replicas.sort_unstable();
            if replicas != replica_ports {
                return Err(format!(
                    "Sentinel {addr} sees healthy replicas {replicas:?}"
                ));
            }
            let others = healthy_ports(&sentinel.server, "SENTINELS")?.len();
            if others != SENTINELS - 1 {
                return Err(format!("Sentinel {addr} knows {others} other Sentinels"));
            }
        }
        Ok(())
    }

    /// Every process, Sentinels first, for failure messages.
    fn servers(&self) -> Vec<&RedisServer> {
        let sentinels = self.sentinels.iter().map(|s| &s.server);
        sentinels.chain(&self.data).collect()
    }
}

/// A Sentinel process and the directory holding its config file.
#[derive(Debug)]
struct Sentinel {
    server: RedisServer,
    /// Sentinel rewrites its config; kept until after the process is killed.
    _config_dir: TempDir,
}

impl Sentinel {
    /// Writes a config monitoring the primary on `primary_port` and starts a
    /// Sentinel of `engine` with it.
    #[track_caller]
    fn start(engine: Engine, primary_port: u16) -> Sentinel {
        let config_dir = TempDir::new("sentinel")
            .unwrap_or_else(|e| panic!("cannot create a Sentinel's config dir: {e}"));
        let config = config_dir.path().join("sentinel.conf");
        std::fs::write(&config, config_text(primary_port))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", config.display()));
        let server = RedisServer::builder()
            .engine(engine)
            .config_file(&config)
            .arg("--sentinel")
            .start();
        Sentinel {
            server,
            _config_dir: config_dir,
        }
    }
}

/// A Sentinel config monitoring the primary on `primary_port`.
fn config_text(primary_port: u16) -> String {
    format!(
        "sentinel monitor {SERVICE_NAME} {LOOPBACK} {primary_port} {QUORUM}\n\
         sentinel down-after-milliseconds {SERVICE_NAME} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {SERVICE_NAME} {FAILOVER_TIMEOUT_MS}\n\
         sentinel parallel-syncs {SERVICE_NAME} 1\n"
    )
}

/// The primary's port as `sentinel` names it (`get-master-addr-by-name`).
fn reported_primary(sentinel: &RedisServer) -> Result<u16, String> {
    let reply = sentinel.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME])?;
    let port = match &reply {
        RespValue::Array(fields) => fields.get(1).and_then(RespValue::as_str),
        _ => None,
    };
    port.and_then(|port| port.parse().ok())
        .ok_or_else(|| format!("Sentinel {} names the primary {reply:?}", sentinel.addr()))
}

/// Ports of the instances that `SENTINEL <kind> <name>` lists whose flags
/// show neither a failure nor a lost link.
fn healthy_ports(sentinel: &RedisServer, kind: &str) -> Result<Vec<u16>, String> {
    let reply = sentinel.command(&["SENTINEL", kind, SERVICE_NAME])?;
    let RespValue::Array(instances) = &reply else {
        return Err(format!("SENTINEL {kind} replied {reply:?}"));
    };
    let healthy = |flags: &str| {
        !flags
            .split(',')
            .any(|flag| matches!(flag, "s_down" | "o_down" | "disconnected"))
    };
    instances
        .iter()
        .filter(|instance| field(instance, "flags").is_some_and(healthy))
        .map(|instance| {
            field(instance, "port")
                .and_then(|port| port.parse().ok())
                .ok_or_else(|| format!("SENTINEL {kind} listed {instance:?}"))
        })
        .collect()
}

/// The value after `name` in a flat name/value array, as Sentinel lists instances.
fn field<'a>(instance: &'a RespValue, name: &str) -> Option<&'a str> {
    let RespValue::Array(items) = instance else {
        return None;
    };
    items
        .chunks_exact(2)
        .find(|pair| pair[0].as_str() == Some(name))
        .and_then(|pair| pair[1].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> RespValue {
        RespValue::Bulk(text.as_bytes().to_vec())
    }

    #[test]
    fn config_monitors_the_primary_with_a_majority_quorum() {
        let text = config_text(7000);
        assert!(text.starts_with("sentinel monitor testkit-primary 127.0.0.1 7000 2\n"));
        assert!(text.contains("down-after-milliseconds testkit-primary 1000\n"));
    }

    #[test]
    fn fields_are_read_from_flat_pairs() {
        let instance = RespValue::Array(vec![
            bulk("port"),
            bulk("7001"),
            bulk("flags"),
            bulk("slave,s_down"),
        ]);
        assert_eq!(field(&instance, "port"), Some("7001"));
        assert_eq!(field(&instance, "flags"), Some("slave,s_down"));
        assert_eq!(field(&instance, "ip"), None);
        assert_eq!(field(&RespValue::Nil, "port"), None);
    }
}
