//! Leader election among 3 instances of a service, each its own process,
//! campaigning for `svc:orders` with a 1 s lease. A leader leads for 2 s and
//! resigns, which hands leadership over at once; 3 s in, the leader of the
//! moment is killed with SIGKILL (no release, no last word), and a waiting
//! instance leads once its lease has run out, within ttl + ttl/3.
//! Each term prints its number, the lock's fencing token: every term's is
//! greater than all before it.
//!
//! Run: `cargo run --example leader_election` (about 6 s). Starts its own
//! temporary redis-server unless `REDIS_URL` is set, and the instances as
//! child processes of itself (`--instance N URL`; closing an instance's
//! stdin stops it). All instances print to one pipe, so the lines arrive in
//! the order they were written: the example exits with an error if a term
//! began while another instance led, if a term's number was not greater
//! than the last, or if nobody led within ttl + ttl/3 of the kill.

use std::error::Error;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use tokio::sync::oneshot;

/// The key the instances campaign for.
const KEY: &str = "svc:orders";
const INSTANCES: usize = 3;
/// The lease of a term, renewed every ttl/3 while it lasts.
const TTL: Duration = Duration::from_secs(1);
/// How long a leader leads before it resigns.
const TERM: Duration = Duration::from_secs(2);
/// When the leader of the moment is killed, from the start.
const KILL_AT: Duration = Duration::from_secs(3);
/// When the instances are stopped, from the start.
const STOP_AT: Duration = Duration::from_millis(5500);
/// Bound on a new leader after the kill: the dead leader's last renewal may
/// have run up to ttl/3 before it, and its lease then lasts one ttl; plus
/// an allowance for scheduling.
const REPLACED_WITHIN: Duration = Duration::from_millis(1000 + 333 + 250);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next(), args.next()) {
        (None, _, _) => orchestrate(),
        (Some("--instance"), Some(name), Some(url)) => {
            let stop = stdin_closed();
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(instance(name.parse()?, &url, stop))?;
            Ok(())
        }
        _ => Err("run without arguments (or `--instance N URL` for one instance)".into()),
    }
}

/// One instance of the service: campaigns, leads until its term is lost,
/// it has led for [`TERM`], or it is stopped, and campaigns again.
async fn instance(
    name: usize,
    url: &str,
    mut stop: oneshot::Receiver<()>,
) -> Result<(), LockError> {
    let locks = LockManager::connect(url).await?;
    let mut leadership = locks.leader(KEY, LockOptions::new().ttl(TTL));
    loop {
        let term = tokio::select! {
            term = leadership.next_term() => term?,
            _ = &mut stop => return Ok(()),
        };
        let number = term.number();
        println!("instance {name}: term {number} began: leading");
        tokio::select! {
            () = term.lost() => println!("instance {name}: term {number} ended: leadership lost"),
            () = tokio::time::sleep(TERM) => {
                println!("instance {name}: term {number} ended: resigning");
                term.resign().await?;
            }
            _ = &mut stop => {
                println!("instance {name}: term {number} ended: stopping");
                term.resign().await?;
                return Ok(());
            }
        }
    }
}

/// Resolves once stdin is closed (the parent's signal to stop).
fn stdin_closed() -> oneshot::Receiver<()> {
    let (closed, receiver) = oneshot::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed.send(());
    });
    receiver
}

/// Runs the instances and the kill, echoes their lines and checks them.
fn orchestrate() -> Result<(), Box<dyn Error>> {
    let own_server = std::env::var("REDIS_URL").is_err().then(RedisServer::start);
    let url = match &own_server {
        Some(server) => server.url(),
        None => std::env::var("REDIS_URL")?,
    };
    let (output, writer) = std::io::pipe()?;
    let mut instances = Vec::new();
    for name in 0..INSTANCES {
        instances.push(
            Command::new(std::env::current_exe()?)
                .args(["--instance", &name.to_string(), &url])
                .stdin(Stdio::piped())
                .stdout(writer.try_clone()?)
                .spawn()?,
        );
    }
    // Only the instances write now: the pipe ends when they all have exited.
    drop(writer);
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });

    let start = Instant::now();
    let mut election = Election::default();
    while start.elapsed() < STOP_AT {
        if election.killed.is_none()
            && start.elapsed() >= KILL_AT
            && let Some(term) = election.leader
        {
            kill(&mut instances[term.instance])?;
            println!(
                "-- killed instance {} (SIGKILL) while it led term {}",
                term.instance, term.number
            );
            election.killed_now();
        }
        if let Ok((at, line)) = received.recv_timeout(Duration::from_millis(10)) {
            election.read(at, &line);
        }
    }

    println!("-- stopping the instances");
    stop(&mut instances, &election)?;
    while let Ok((at, line)) = received.recv_timeout(Duration::from_secs(2)) {
        election.read(at, &line);
    }
    election.verdict()
}

/// Kills `instance` with SIGKILL and reaps it.
fn kill(instance: &mut Child) -> std::io::Result<()> {
    instance.kill()?;
    instance.wait()?;
    Ok(())
}

/// Stops the followers (their campaigns end and leave no lock behind), then
/// the leader (it resigns with nobody left waiting), each by closing its stdin.
fn stop(instances: &mut [Child], election: &Election) -> std::io::Result<()> {
    let leader = election.leader.map(|term| term.instance);
    let (leaders, followers): (Vec<_>, Vec<_>) = instances
        .iter_mut()
        .enumerate()
        .partition(|(name, _)| Some(*name) == leader);
    for (_, instance) in followers.into_iter().chain(leaders) {
        drop(instance.stdin.take());
        instance.wait()?;
    }
    Ok(())
}

/// A term as announced by its leader.
#[derive(Debug, Clone, Copy)]
struct Announced {
    instance: usize,
    number: u64,
}

/// What the instances' lines say, in the order they were written.
#[derive(Default)]
struct Election {
    /// The term in progress, if any.
    leader: Option<Announced>,
    /// Every term that began, in order.
    terms: Vec<Announced>,
    /// When the leader was killed.
    killed: Option<Instant>,
    /// How long after the kill the next term began.
    replaced_after: Option<Duration>,
    problems: Vec<String>,
}

impl Election {
    /// Echoes one line of an instance, read at `at`, and follows it.
    fn read(&mut self, at: Instant, line: &str) {
        println!("{line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(instance), Some(number), Some(event)) = (
            words
                .get(1)
                .and_then(|name| name.trim_end_matches(':').parse().ok()),
            words.get(3).and_then(|number| number.parse().ok()),
            words.get(4).copied(),
        ) else {
            return;
        };
        let term = Announced { instance, number };
        match event {
            "began:" => self.began(at, term),
            "ended:" if self.leader.is_some_and(|leader| leader.number == number) => {
                self.leader = None;
            }
            _ => {}
        }
    }

    fn began(&mut self, at: Instant, term: Announced) {
        if let Some(leader) = self.leader {
            self.problems.push(format!(
                "term {} began while instance {} still led term {}",
                term.number, leader.instance, leader.number
            ));
        }
        if let Some(last) = self.terms.last()
            && term.number <= last.number
        {
            self.problems.push(format!(
                "term {} began after term {}: numbers must grow",
                term.number, last.number
            ));
        }
        if let (Some(killed), None) = (self.killed, self.replaced_after) {
            let after = at - killed;
            println!(
                "-- a new leader {:.2} s after the kill",
                after.as_secs_f64()
            );
            self.replaced_after = Some(after);
        }
        self.leader = Some(term);
        self.terms.push(term);
    }

    /// The leader was killed now: its term is over.
    fn killed_now(&mut self) {
        self.killed = Some(Instant::now());
        self.leader = None;
    }

    fn verdict(mut self) -> Result<(), Box<dyn Error>> {
        match self.replaced_after {
            None => self.problems.push("nobody led after the kill".to_owned()),
            Some(after) if after > REPLACED_WITHIN => self.problems.push(format!(
                "the next leader came {after:?} after the kill, later than {REPLACED_WITHIN:?}"
            )),
            Some(_) => {}
        }
        let terms: Vec<String> = self
            .terms
            .iter()
            .map(|term| format!("{} (instance {})", term.number, term.instance))
            .collect();
        println!("terms: {}", terms.join(", "));
        if !self.problems.is_empty() {
            return Err(self.problems.join("; ").into());
        }
        println!("one leader at a time, every term's number greater than the last");
        Ok(())
    }
}
