//! One worker process of a `verify` contest (`dlock verify-worker`, run by
//! the controller): a few managers with a few tasks each contend for the
//! contest's keys, each hold doing a fenced read-modify-write of the key's
//! counter, and on one server or Redlock the managers reach the nodes
//! through fault proxies of the worker's own. Every event goes to stdout as
//! one JSON line (see `history`).

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{LockManager, LockOptions};

use super::history::{now_us, Event};
use super::proxy::{Mode, Proxy};
use super::store::Store;
use super::{counter_key, user_key, Contest};
use crate::connect::{Deployment, Target};
use crate::failure::Failure;

/// Managers per worker.
const MANAGERS: usize = 2;

/// Runs worker `id` of `contest` until its end.
pub async fn run(target: &Target, contest: &Contest, id: usize) -> Result<(), Failure> {
    let proxies = if contest.network_faults {
        start_proxies(target).await?
    } else {
        Vec::new()
    };
    let route = |url: &str| {
        proxies
            .iter()
            .find(|(upstream, _)| upstream == url)
            .map_or_else(|| url.to_owned(), |(_, proxy)| via(url, proxy.port()))
    };
    let store = Arc::new(contest.store(target).await?);
    let mut managers = Vec::new();
    for _ in 0..MANAGERS {
        managers.push(target.connect_through(&contest.namespace, &route).await?);
    }
    let deadline = Instant::now() + contest.duration;
    let mut tasks = Vec::new();
    for (m, manager) in managers.into_iter().enumerate() {
        for t in 0..contest.tasks {
            let holder = format!("w{id}/{m}.{t}");
            let (store, contest) = (Arc::clone(&store), contest.clone());
            let manager = manager.clone();
            tasks.push(tokio::spawn(async move {
                contend(&manager, &store, &contest, &holder, deadline).await;
            }));
        }
    }
    let faults = inject_faults(&proxies, contest, deadline, id);
    tokio::join!(futures_join(tasks), faults);
    Ok(())
}

/// Waits for every task.
async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

/// One task: takes a random key, reads its counter and writes it back one
/// higher under the lock's fencing token, releases; until `deadline`.
async fn contend(
    manager: &LockManager,
    store: &Store,
    contest: &Contest,
    holder: &str,
    deadline: Instant,
) {
    let options = LockOptions::new()
        .ttl(contest.ttl)
        .wait(contest.ttl * 2)
        .fenced(true)
        .label("dlock-verify");
    let mut turn = 0_u64;
    while Instant::now() < deadline {
        turn += 1;
        let key = user_key(pick(holder, turn, contest.keys));
        let Ok(guard) = manager.acquire(&key, options.clone()).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(token) = guard.fencing_token().await else {
            continue;
        };
        let counter = counter_key(&contest.namespace, &key);
        emit(&Event::Acquired {
            at: now_us(),
            holder: holder.to_owned(),
            key: key.clone(),
            token,
            valid_until: wall(guard.valid_until()),
        });
        let read = store.read(&counter, token).await;
        if let Ok(value) = read {
            emit(&Event::Read {
                at: now_us(),
                holder: holder.to_owned(),
                key: key.clone(),
                token,
                value,
            });
            if let Some(value) = value {
                tokio::time::sleep(Duration::from_millis(turn % 20)).await;
                let valid_until = wall(guard.valid_until());
                let sent = now_us();
                if let Ok(accepted) = store.write(&counter, token, value + 1).await {
                    emit(&Event::Wrote {
                        at: sent,
                        holder: holder.to_owned(),
                        key: key.clone(),
                        token,
                        value: value + 1,
                        accepted,
                        valid_until,
                    });
                }
            }
        }
        let (valid_until, lost) = (wall(guard.valid_until()), guard.is_lost());
        let at = now_us();
        let _ = guard.release().await;
        emit(&Event::Released {
            at,
            holder: holder.to_owned(),
            key,
            valid_until,
            lost,
        });
    }
}

/// Faults on the worker's own links until `deadline`: a blackhole past
/// the ttl, a slow link, a reset, refused connections for a ttl, one every
/// few seconds, on one proxy;
/// each worker (`id`) on a schedule of its own.
async fn inject_faults(
    proxies: &[(String, Proxy)],
    contest: &Contest,
    deadline: Instant,
    id: usize,
) {
    if proxies.is_empty() {
        return;
    }
    let mut round = id;
    while Instant::now() + contest.ttl * 3 < deadline {
        round += 1;
        tokio::time::sleep(Duration::from_millis(1500 + (round as u64 * 701) % 2000)).await;
        let (node, proxy) = &proxies[round % proxies.len()];
        let node = leasehold::redact_url(node);
        match round % 4 {
            3 => {
                emit_fault(format!(
                    "connections to {node} refused for {:?}",
                    contest.ttl
                ));
                proxy.set(Mode::Refuse);
                tokio::time::sleep(contest.ttl).await;
                proxy.set(Mode::Pass);
            }
            0 => {
                emit_fault(format!("blackhole to {node} for {:?}", contest.ttl * 3 / 2));
                proxy.set(Mode::Blackhole);
                tokio::time::sleep(contest.ttl * 3 / 2).await;
                proxy.set(Mode::Pass);
            }
            1 => {
                emit_fault(format!("200 ms each way to {node} for 2s"));
                proxy.set(Mode::Delay(Duration::from_millis(200)));
                tokio::time::sleep(Duration::from_secs(2)).await;
                proxy.set(Mode::Pass);
            }
            _ => {
                emit_fault(format!("links to {node} reset"));
                proxy.reset();
            }
        }
    }
}

/// A proxy for each node of a single-server or Redlock target, keyed by
/// the node's URL as the target names it.
async fn start_proxies(target: &Target) -> Result<Vec<(String, Proxy)>, Failure> {
    let urls = match target.deployment()? {
        Deployment::Server(url) => vec![url],
        Deployment::Redlock(urls) => urls,
        _ => Vec::new(),
    };
    let mut proxies = Vec::new();
    for url in urls {
        let upstream = address_of(&url).ok_or_else(|| {
            Failure::Usage(format!("cannot resolve {}", leasehold::redact_url(&url)))
        })?;
        proxies.push((url, Proxy::start(upstream).await?));
    }
    Ok(proxies)
}

/// The socket address a `redis://` URL names.
fn address_of(url: &str) -> Option<SocketAddr> {
    let client = redis::Client::open(url).ok()?;
    let addr = client.get_connection_info().addr().to_string();
    addr.to_socket_addrs().ok()?.next()
}

/// `url` with its host and port replaced by the loopback `port`.
fn via(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (credentials, host_and_path) = match rest.rsplit_once('@') {
        Some((credentials, tail)) => (format!("{credentials}@"), tail),
        None => (String::new(), rest),
    };
    let path = host_and_path
        .find('/')
        .map_or("", |at| &host_and_path[at..]);
    format!("{scheme}://{credentials}127.0.0.1:{port}{path}")
}

/// The key a task takes on its `turn`: spread over `keys`, differently per holder.
fn pick(holder: &str, turn: u64, keys: u64) -> u64 {
    let seed = holder.bytes().fold(turn, |seed, byte| {
        seed.wrapping_mul(31).wrapping_add(u64::from(byte))
    });
    seed % keys.max(1)
}

/// Prints `event` as one JSON line.
fn emit(event: &Event) {
    if let Ok(line) = serde_json::to_string(event) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn emit_fault(what: String) {
    emit(&Event::Fault { at: now_us(), what });
}

/// `instant` (a lease's certain end, past or future) on the wall clock, in
/// µs; now when none.
fn wall(instant: Option<Instant>) -> u64 {
    let (now, wall_now) = (Instant::now(), now_us());
    let micros = |span: Duration| u64::try_from(span.as_micros()).unwrap_or(u64::MAX);
    match instant {
        Some(until) if until >= now => wall_now.saturating_add(micros(until - now)),
        Some(until) => wall_now.saturating_sub(micros(now - until)),
        None => wall_now,
    }
}

#[cfg(test)]
mod tests {
    use super::via;

    #[test]
    fn a_url_through_a_proxy_keeps_its_credentials_and_database() {
        assert_eq!(
            via("redis://u:p@10.1.2.3:6379/2", 4000),
            "redis://u:p@127.0.0.1:4000/2"
        );
        assert_eq!(via("redis://h:1", 4000), "redis://127.0.0.1:4000");
    }
}
