//! What the Redis servers did during a run, from their own counters: calls
//! and time of each command (`INFO commandstats`, zeroed by `CONFIG
//! RESETSTAT` before the run) and process CPU (`INFO cpu`); and a server's
//! process id. Who sent the commands is counted by [`crate::monitor`].

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// Calls of one command during a run, and the time Redis spent executing
/// them (`usec`; for EVALSHA that includes the commands its script runs).
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

/// Connections for the counters, apart from the clients', to every server
/// one subject uses; the figures are summed over them.
#[derive(Clone)]
pub struct Admin {
    connections: Vec<MultiplexedConnection>,
    urls: Vec<String>,
}

impl Admin {
    /// Connects to each of `urls`; panics if one is unreachable.
    pub async fn connect(urls: &[String]) -> Admin {
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            let connection = redis::Client::open(url.as_str())
                .expect("invalid Redis URL")
                .get_multiplexed_async_connection()
                .await
                .expect("admin: cannot connect");
            connections.push(connection);
        }
        Admin {
            connections,
            urls: urls.to_vec(),
        }
    }

    /// The servers' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Sends `ECHO text` to every server (a marker in their MONITOR logs).
    pub async fn echo(&mut self, text: &str) {
        for connection in &mut self.connections {
            redis::cmd("ECHO")
                .arg(text)
                .query_async::<()>(connection)
                .await
                .expect("ECHO");
        }
    }

    /// Zeroes the command counters of every server (`CONFIG RESETSTAT`).
    pub async fn reset(&mut self) {
        for connection in &mut self.connections {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async::<()>(connection)
                .await
                .expect("CONFIG RESETSTAT");
        }
    }

    /// Calls and time per command since the last reset, summed over the
    /// servers, leaving out the bench's own CONFIG, INFO and COMMAND.
    pub async fn commands(&mut self) -> BTreeMap<String, CommandStat> {
        let mut stats: BTreeMap<String, CommandStat> = BTreeMap::new();
        for info in self.info("commandstats").await {
            for (name, stat) in info.lines().filter_map(parse_commandstat) {
                if ["config", "info", "command"]
                    .iter()
                    .any(|own| name.starts_with(own))
                {
                    continue;
                }
                let total = stats.entry(name.to_owned()).or_default();
                total.calls += stat.calls;
                total.usec += stat.usec;
            }
        }
        stats
    }

    /// CPU time (user + system, all threads) the servers have used since they started.
    pub async fn cpu(&mut self) -> Duration {
        let seconds: f64 = self
            .info("cpu")
            .await
            .iter()
            .flat_map(|info| info.lines())
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                let used = name == "used_cpu_user" || name == "used_cpu_sys";
                used.then(|| value.trim().parse::<f64>().ok()).flatten()
            })
            .sum();
        Duration::from_secs_f64(seconds)
    }

    /// The version of the first server.
    pub async fn redis_version(&mut self) -> String {
        let info = self.info("server").await;
        info.first()
            .and_then(|info| info.lines().find_map(|l| l.strip_prefix("redis_version:")))
            .unwrap_or("unknown")
            .trim()
            .to_owned()
    }

    /// One section of `INFO` from each server.
    async fn info(&mut self, section: &str) -> Vec<String> {
        let mut infos = Vec::with_capacity(self.connections.len());
        for connection in &mut self.connections {
            let info = redis::cmd("INFO")
                .arg(section)
                .query_async(connection)
                .await
                .expect("INFO");
            infos.push(info);
        }
        infos
    }
}

/// The process id `server` reports (`process_id` of `INFO server`); `None`
/// if it cannot be read.
pub fn process_id(server: &RedisServer) -> Option<u32> {
    let info = server.command(&["INFO", "server"]).ok()?;
    info.as_str()?
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))?
        .trim()
        .parse()
        .ok()
}

/// One `cmdstat_<name>:calls=<n>,usec=<n>,...` line of `INFO commandstats`.
fn parse_commandstat(line: &str) -> Option<(&str, CommandStat)> {
    let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
    let field = |key: &str| -> Option<u64> {
        fields
            .split(',')
            .find_map(|field| field.strip_prefix(key)?.strip_prefix('='))?
            .trim()
            .parse()
            .ok()
    };
    Some((
        name,
        CommandStat {
            calls: field("calls")?,
            usec: field("usec")?,
        },
    ))
}
