//! `dlock verify`: a bounded contest against the user's own deployment.
//! Worker processes of its own (this binary, `verify-worker`) contend for a
//! few keys in a namespace of their own, each hold doing a fenced
//! read-modify-write on a counter kept on the same deployment; the
//! controller stops and kills workers (and, with `--allow-failover`, fails
//! the deployment over), each worker cuts, slows and resets its own links
//! (one server, Redlock); afterwards the checker (`history`) reads what
//! happened and the verdict is the exit code. Every key the contest wrote
//! is deleted at the end, also after Ctrl-C.

mod history;
mod proxy;
mod store;
pub mod worker;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::connect::{Deployment, Target};
use crate::failure::Failure;
use history::{now_us, Event, Findings};
use store::Store;

/// The contest's settings (`dlock verify`'s options; a worker gets the same).
#[derive(Debug, Clone, Args)]
pub struct Contest {
    /// How long the contest runs, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    workers: u64,
    /// Tasks per manager (each worker has 2 managers).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub(crate) tasks: u64,
    /// Keys contended for.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) keys: u64,
    /// Lease of each hold, in milliseconds.
    #[arg(long = "ttl-ms", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    ttl_ms: u64,
    /// Also fail the deployment over once (`SENTINEL FAILOVER`, `CLUSTER
    /// FAILOVER` on a replica): only with --sentinel or --cluster.
    #[arg(long)]
    allow_failover: bool,
    /// The contest's namespace (default: a fresh `dlock-verify-…` one);
    /// refused if it holds keys.
    #[arg(long, value_name = "NS")]
    pub(crate) verify_namespace: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Set by the controller for its workers.
    #[arg(skip)]
    pub(crate) namespace: String,
    #[arg(skip)]
    pub(crate) duration: Duration,
    #[arg(skip)]
    pub(crate) ttl: Duration,
    #[arg(skip)]
    pub(crate) network_faults: bool,
}

/// The user key of contest key `index`.
pub fn user_key(index: u64) -> String {
    format!("k{index}")
}

/// The counter hash of `key` in `namespace`: beside the lock's own names,
/// none of which ends in `-verify-counter`.
pub fn counter_key(namespace: &str, key: &str) -> String {
    format!("{namespace}-verify-counter:{key}")
}

impl Contest {
    /// The settings made whole for a run in `namespace` on `deployment`.
    fn settled(mut self, namespace: String, deployment: &Deployment) -> Contest {
        self.namespace = namespace;
        self.duration = Duration::from_secs(self.seconds);
        self.ttl = Duration::from_millis(self.ttl_ms);
        self.network_faults = matches!(deployment, Deployment::Server(_) | Deployment::Redlock(_));
        self
    }

    /// The settings of a worker: `verify_namespace` is the controller's.
    pub fn for_worker(self, target: &Target) -> Result<Contest, Failure> {
        let namespace = self.verify_namespace.clone().ok_or_else(|| {
            Failure::Usage("verify-worker runs under `dlock verify` only".to_owned())
        })?;
        Ok(self.settled(namespace, &target.deployment()?))
    }

    /// Where the counters live: the server, the first Redlock node, the
    /// Sentinels' primary, or the cluster.
    pub async fn store(&self, target: &Target) -> Result<Store, Failure> {
        let timeout = target.timeout();
        let store = match target.deployment()? {
            Deployment::Server(url) => Store::server(url.as_str(), timeout).await,
            Deployment::Redlock(urls) => Store::server(urls[0].as_str(), timeout).await,
            Deployment::Cluster(urls) => Store::cluster(&urls, timeout).await,
            Deployment::Sentinel {
                service,
                sentinels,
                primary_url,
                credentials,
            } => {
                match sentinel_primary(
                    &service,
                    &sentinels,
                    &primary_url,
                    credentials.as_ref(),
                    timeout,
                )
                .await
                {
                    Ok(primary) => Store::server(primary, timeout).await,
                    Err(err) => Err(err),
                }
            }
        };
        store.map_err(|err| store_failure(&err))
    }
}

/// Runs `dlock verify` with `contest` against `target`.
pub async fn run(target: &Target, contest: Contest) -> Result<(), Failure> {
    let deployment = target.deployment()?;
    let namespace = contest.verify_namespace.clone().unwrap_or_else(|| {
        format!(
            "dlock-verify-{:x}",
            now_us() ^ u64::from(std::process::id())
        )
    });
    let mut contest = contest.settled(namespace.clone(), &deployment);
    contest.verify_namespace = Some(namespace.clone());
    if contest.allow_failover
        && !matches!(
            deployment,
            Deployment::Sentinel { .. } | Deployment::Cluster(_)
        )
    {
        return Err(Failure::Usage(
            "--allow-failover needs --sentinel or --cluster".to_owned(),
        ));
    }
    let manager = target
        .connect_through(&namespace, &|url: &str| url.to_owned())
        .await?;
    let checked = manager.check().await?;
    let stores = cleanup_stores(target, &contest).await?;
    let pattern = format!("*{namespace}*");
    for store in &stores {
        if !store
            .scan(&pattern)
            .await
            .map_err(|err| store_failure(&err))?
            .is_empty()
        {
            return Err(Failure::NotDone(format!(
                "namespace `{namespace}` holds keys: verify runs only on a namespace of its own (give --verify-namespace a fresh one, or none)"
            )));
        }
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut controller = Controller {
        contest: contest.clone(),
        events: Arc::clone(&events),
        workers: Vec::new(),
        next_id: 0,
        started: Instant::now(),
    };
    let outcome = tokio::select! {
        outcome = controller.contest(&deployment) => outcome,
        () = interrupted() => Err(Failure::NotDone(
            "interrupted; the workers were stopped and the contest's keys removed".to_owned(),
        )),
    };
    controller.stop_all();
    let mut counters = BTreeMap::new();
    let store = contest.store(target).await?;
    for index in 0..contest.keys {
        let key = user_key(index);
        let value = store
            .value(&counter_key(&namespace, &key))
            .await
            .map_err(|err| store_failure(&err))?;
        counters.insert(key, value);
    }
    let cleaned = clean(&stores, &pattern).await;
    outcome?;
    let events = std::mem::take(&mut *events.lock().unwrap_or_else(PoisonError::into_inner));
    let findings = history::check(&events, &counters);
    let report = Report {
        deployment: target.describe_deployment(),
        namespace: &namespace,
        seconds: contest.duration.as_secs(),
        workers: contest.workers,
        keys: contest.keys,
        risks: checked.risks.iter().map(ToString::to_string).collect(),
        faults: faults_of(&events),
        cleaned,
        verdict: verdict(&findings),
        findings,
    };
    if contest.json {
        crate::locks::print_json(&report)?;
    } else {
        print!("{report}");
    }
    match report.verdict {
        "pass" => Ok(()),
        verdict => Err(Failure::Verify(verdict)),
    }
}

/// Resolves on Ctrl-C (`SIGINT`) or `SIGTERM`.
async fn interrupted() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// The verdict of `findings`: `pass`, `lock-failed` (a double grant at the
/// lock that fencing caught) or `violated` (one that reached the counter, a
/// lost update, a token that went down).
fn verdict(findings: &Findings) -> &'static str {
    if findings.violated() {
        "violated"
    } else if !findings.double_grants_at_lock.is_empty() {
        "lock-failed"
    } else {
        "pass"
    }
}

/// The workers and faults of one contest.
struct Controller {
    contest: Contest,
    events: Arc<Mutex<Vec<Event>>>,
    workers: Vec<(String, Child)>,
    next_id: usize,
    started: Instant,
}

impl Controller {
    /// Starts the workers, injects faults until the contest's end, and
    /// waits for the workers (killing any still running well past it).
    async fn contest(&mut self, deployment: &Deployment) -> Result<(), Failure> {
        for _ in 0..self.contest.workers {
            self.spawn()?;
        }
        let end = self.started + self.contest.duration;
        let mut round = 0_u32;
        let mut failed_over = !self.contest.allow_failover;
        while Instant::now() + self.contest.ttl * 3 < end {
            round += 1;
            tokio::time::sleep(Duration::from_millis(1800 + u64::from(round) * 389 % 1500)).await;
            if !failed_over && Instant::now() >= self.started + self.contest.duration / 3 {
                failed_over = true;
                let what = fail_over(deployment).await;
                self.record(Event::Fault { at: now_us(), what });
                continue;
            }
            self.fault(round).await?;
        }
        let grace = Instant::now().max(end) + self.contest.ttl * 4 + Duration::from_secs(3);
        while Instant::now() < grace {
            if self
                .workers
                .iter_mut()
                .all(|(_, child)| matches!(child.try_wait(), Ok(Some(_))))
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// One fault on one worker: stopped for 1.5 ttl, or killed and replaced.
    async fn fault(&mut self, round: u32) -> Result<(), Failure> {
        let index = round as usize % self.workers.len();
        let (name, child) = &mut self.workers[index];
        let (name, pid) = (name.clone(), child.id());
        if round % 2 == 1 {
            let pause = self.contest.ttl * 3 / 2;
            self.record(Event::Fault {
                at: now_us(),
                what: format!("worker {name} stopped (SIGSTOP) for {pause:?}"),
            });
            signal("STOP", pid);
            tokio::time::sleep(pause).await;
            signal("CONT", pid);
        } else {
            let _ = child.kill();
            let _ = child.wait();
            self.record(Event::Killed {
                at: now_us(),
                worker: name.clone(),
            });
            self.workers.remove(index);
            self.spawn()?;
        }
        Ok(())
    }

    fn record(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Starts one more worker for the rest of the contest, its events
    /// collected from its stdout.
    fn spawn(&mut self) -> Result<(), Failure> {
        let id = self.next_id;
        self.next_id += 1;
        let left = (self.started + self.contest.duration).saturating_duration_since(Instant::now());
        let mut args: Vec<String> = worker_args(std::env::args().skip(1).collect());
        args.extend([
            "--worker-id".to_owned(),
            id.to_string(),
            "--verify-namespace".to_owned(),
            self.contest.namespace.clone(),
            "--seconds".to_owned(),
            left.as_secs().max(1).to_string(),
        ]);
        let mut child = Command::new(std::env::current_exe()?)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Failure::Io(std::io::Error::other("a worker's stdout was not piped")))?;
        let events = Arc::clone(&self.events);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Event>(&line) {
                    events
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(event);
                }
            }
        });
        self.workers.push((format!("w{id}"), child));
        Ok(())
    }

    /// Kills every worker still running and reaps it.
    fn stop_all(&mut self) {
        for (_, child) in &mut self.workers {
            signal("CONT", child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The controller's own arguments made a worker's: `verify` becomes
/// `verify-worker`, and the options only the controller reads are dropped.
fn worker_args(args: Vec<String>) -> Vec<String> {
    let takes_value = [
        "--url",
        "--password-file",
        "--redlock",
        "--cluster",
        "--namespace",
        "--timeout",
        "--sentinel-password",
        "--sentinel-password-file",
        "--sentinel-user",
    ];
    let mut out = Vec::with_capacity(args.len());
    let mut skip_values = 0;
    let mut replaced = false;
    for arg in args {
        if skip_values > 0 {
            skip_values -= 1;
            out.push(arg);
            continue;
        }
        if takes_value.contains(&arg.as_str()) {
            skip_values = 1;
        } else if arg == "--sentinel" {
            skip_values = 2;
        }
        if !replaced && arg == "verify" {
            replaced = true;
            out.push("verify-worker".to_owned());
        } else if arg != "--json" && arg != "--allow-failover" {
            out.push(arg);
        }
    }
    out
}

/// Sends `kill -SIGNAL pid` (no `unsafe` in the workspace for a direct call).
fn signal(name: &str, pid: u32) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Fails the deployment over once; what was done, in words.
async fn fail_over(deployment: &Deployment) -> String {
    let done = match deployment {
        Deployment::Sentinel {
            service,
            sentinels,
            credentials,
            ..
        } => sentinel_failover(service, &sentinels[0], credentials.as_ref()).await,
        Deployment::Cluster(urls) => cluster_failover(&urls[0]).await,
        _ => Err("no failover on this deployment".to_owned()),
    };
    match done {
        Ok(what) => what,
        Err(why) => format!("failover not started: {why}"),
    }
}

async fn sentinel_failover(
    service: &str,
    sentinel: &str,
    credentials: Option<&(Option<String>, String)>,
) -> Result<String, String> {
    let mut connection = sentinel_connection(sentinel, credentials)
        .await
        .map_err(|err| err.to_string())?;
    redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(service)
        .query_async::<()>(&mut connection)
        .await
        .map_err(|err| err.to_string())?;
    Ok(format!("SENTINEL FAILOVER {service}"))
}

async fn cluster_failover(seed: &str) -> Result<String, String> {
    let client = redis::Client::open(seed).map_err(|err| err.to_string())?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut connection)
        .await
        .map_err(|err| err.to_string())?;
    let replica = nodes
        .lines()
        .find(|line| {
            line.split(' ')
                .nth(2)
                .is_some_and(|flags| flags.contains("slave"))
        })
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|addr| addr.split('@').next())
        .ok_or("no replica in the cluster")?
        .to_owned();
    let (host, port) = replica.rsplit_once(':').ok_or("a replica without a port")?;
    let info = client
        .get_connection_info()
        .clone()
        .set_addr(redis::ConnectionAddr::Tcp(
            host.to_owned(),
            port.parse().map_err(|_| "a bad port")?,
        ));
    let mut replica_connection = redis::Client::open(info)
        .map_err(|err| err.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async::<()>(&mut replica_connection)
        .await
        .map_err(|err| err.to_string())?;
    Ok(format!("CLUSTER FAILOVER on replica {replica}"))
}

/// A connection to the Sentinel at `url`, with its own credentials.
async fn sentinel_connection(
    url: &str,
    credentials: Option<&(Option<String>, String)>,
) -> Result<redis::aio::MultiplexedConnection, redis::RedisError> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some((user, password)) = credentials {
        settings = settings.set_password(password);
        if let Some(user) = user {
            settings = settings.set_username(user);
        }
    }
    redis::Client::open(info.set_redis_settings(settings))?
        .get_multiplexed_async_connection()
        .await
}

/// The primary: `primary_url`'s settings at the address the first
/// Sentinel that answers names.
async fn sentinel_primary(
    service: &str,
    sentinels: &[String],
    primary_url: &str,
    credentials: Option<&(Option<String>, String)>,
    timeout: Duration,
) -> Result<redis::ConnectionInfo, redis::RedisError> {
    let mut last = None;
    for sentinel in sentinels {
        let asked = async {
            let mut connection = sentinel_connection(sentinel, credentials).await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(service)
                .query_async::<(String, u16)>(&mut connection)
                .await
        };
        match tokio::time::timeout(timeout * 2, asked).await {
            Ok(Ok((host, port))) => {
                return Ok(redis::Client::open(primary_url)?
                    .get_connection_info()
                    .clone()
                    .set_addr(redis::ConnectionAddr::Tcp(host, port)));
            }
            Ok(Err(err)) => last = Some(err),
            Err(_) => {}
        }
    }
    Err(last
        .unwrap_or_else(|| redis::RedisError::from((redis::ErrorKind::Io, "no Sentinel answered"))))
}

/// Every store whose nodes the contest may have written keys on: each
/// Redlock node, or the one store.
async fn cleanup_stores(target: &Target, contest: &Contest) -> Result<Vec<Store>, Failure> {
    match target.deployment()? {
        Deployment::Redlock(urls) => {
            let mut stores = Vec::new();
            for url in urls {
                stores.push(
                    Store::server(url.as_str(), target.timeout())
                        .await
                        .map_err(|err| store_failure(&err))?,
                );
            }
            Ok(stores)
        }
        _ => Ok(vec![contest.store(target).await?]),
    }
}

/// Deletes every key matching `pattern` on `stores`: how many.
async fn clean(stores: &[Store], pattern: &str) -> usize {
    let mut cleaned = 0;
    for store in stores {
        if let Ok(keys) = store.scan(pattern).await {
            if store.delete(&keys).await.is_ok() {
                cleaned += keys.len();
            }
        }
    }
    cleaned
}

/// The faults of `events`, each with its time.
fn faults_of(events: &[Event]) -> Vec<String> {
    let start = events.iter().map(event_time).min().unwrap_or(0);
    let mut faults: Vec<(u64, String)> = events
        .iter()
        .filter_map(|event| match event {
            Event::Fault { at, what } => Some((*at, what.clone())),
            Event::Killed { at, worker } => {
                Some((*at, format!("worker {worker} killed (SIGKILL)")))
            }
            _ => None,
        })
        .collect();
    faults.sort();
    faults
        .into_iter()
        .map(|(at, what)| format!("+{:.1}s {what}", at.saturating_sub(start) as f64 / 1e6))
        .collect()
}

fn event_time(event: &Event) -> u64 {
    match event {
        Event::Acquired { at, .. }
        | Event::Read { at, .. }
        | Event::Wrote { at, .. }
        | Event::Released { at, .. }
        | Event::Fault { at, .. }
        | Event::Killed { at, .. } => *at,
    }
}

/// A failure of the counters' store, in words (never a password: redis-rs
/// errors name no URL).
fn store_failure(err: &redis::RedisError) -> Failure {
    Failure::NotDone(format!("the contest's counters cannot be reached: {err}"))
}

/// What `verify` prints.
#[derive(Serialize)]
struct Report<'a> {
    deployment: String,
    namespace: &'a str,
    seconds: u64,
    workers: u64,
    keys: u64,
    risks: Vec<String>,
    faults: Vec<String>,
    findings: Findings,
    cleaned: usize,
    verdict: &'static str,
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |us: Option<u64>| {
            us.map_or_else(
                || "-".to_owned(),
                |us| format!("{:.1} ms", us as f64 / 1000.0),
            )
        };
        let Findings {
            holds,
            writes_accepted,
            writes_refused,
            ..
        } = &self.findings;
        writeln!(
            f,
            "dlock verify: {}, {} s, {} workers, {} keys, namespace {}",
            self.deployment, self.seconds, self.workers, self.keys, self.namespace
        )?;
        for risk in &self.risks {
            writeln!(f, "risk: {risk}")?;
        }
        writeln!(f, "faults ({}):", self.faults.len())?;
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        writeln!(f, "holds: {holds}; counter writes accepted: {writes_accepted}, refused as stale: {writes_refused}")?;
        let list =
            |f: &mut std::fmt::Formatter<'_>, what: &str, found: &[String]| -> std::fmt::Result {
                writeln!(f, "{what}: {}", found.len())?;
                for one in found.iter().take(10) {
                    writeln!(f, "  {one}")?;
                }
                Ok(())
            };
        list(
            f,
            "double grants at the lock",
            &self.findings.double_grants_at_lock,
        )?;
        list(
            f,
            "double grants that reached the counter",
            &self.findings.double_grants_at_counter,
        )?;
        list(f, "lost updates", &self.findings.lost_updates)?;
        list(
            f,
            "fencing tokens that went down",
            &self.findings.tokens_went_down,
        )?;
        writeln!(
            f,
            "longest write past a lease's end: {}",
            ms(Some(self.findings.longest_overrun_us))
        )?;
        writeln!(
            f,
            "hand-off latency: p50 {}, p99 {}",
            ms(self.findings.handoff_p50_us),
            ms(self.findings.handoff_p99_us)
        )?;
        writeln!(
            f,
            "recovery after a killed holder: {}",
            ms(self.findings.longest_recovery_us)
        )?;
        writeln!(f, "keys removed: {}", self.cleaned)?;
        writeln!(f, "verdict: {}", self.verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::worker_args;

    #[test]
    fn a_workers_arguments_keep_the_target_and_drop_the_controllers() {
        let args = [
            "--namespace",
            "verify",
            "verify",
            "--seconds",
            "5",
            "--json",
            "--sentinel",
            "s",
            "verify",
        ];
        let worker = worker_args(args.iter().map(|arg| (*arg).to_owned()).collect());
        assert_eq!(
            worker,
            [
                "--namespace",
                "verify",
                "verify-worker",
                "--seconds",
                "5",
                "--sentinel",
                "s",
                "verify"
            ]
        );
    }
}
