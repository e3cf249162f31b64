//! The `held` workload: one process holds N plain locks (ttl 3 s, so the
//! watchdog renews each every second) for 10 s, N = 1 000, 10 000, 50 000
//! and 100 000 (under `cargo test`: 100 leases for 1 s). Per lease-second
//! it reports the client's CPU and the server's, the server's commands (a
//! script's inner commands included) and round trips (the calls clients
//! sent: EVALSHA; nothing else is sent while the leases are held), the
//! client's memory per lease (growth of its resident set from before the
//! acquisitions to the end of the hold), and how many leases were lost,
//! which must be none.
//!
//! Before the sizes it holds one lease, unreported, for one hold: the
//! first measured size would otherwise also pay the process's warm-up (its
//! first manager, lazily built statics, the renewal timer's first runs),
//! which made 1 000 leases look up to a fifth dearer. One lease warms that
//! up without growing the allocator's pool, so the first size's memory
//! figure stays its own. It also reports the fixed
//! cost, client and server CPU per second with a manager connected and no
//! lease held (the idle server's own `serverCron` among it), so that the
//! per-lease figures of small sizes can be read against it.

use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use leasehold::{LockManager, LockOptions};

use crate::cpu::process_cpu;
use crate::redis_stats::Admin;
use crate::workloads::Scale;

/// Lease of every held lock.
const TTL: Duration = Duration::from_secs(3);
/// Acquisitions in flight at once while the leases are taken.
const ACQUIRING: usize = 256;

/// What one size of the workload measured.
struct Held {
    leases: usize,
    failed: usize,
    lost: usize,
    lease_seconds: f64,
    client_cpu: Duration,
    server_cpu: Duration,
    commands: u64,
    round_trips: u64,
    memory: Option<u64>,
    seconds: f64,
}

/// Runs the workload at each size on the server at `url` and prints one
/// row per size.
pub async fn run(url: &str, scale: Scale) {
    let (sizes, hold): (&[usize], Duration) = if scale.is_full() {
        (&[1_000, 10_000, 50_000, 100_000], Duration::from_secs(10))
    } else {
        (&[100], Duration::from_secs(1))
    };
    let mut admin = Admin::connect(&[url.to_owned()]).await;
    println!(
        "\nheld: N plain locks held for {hold:?} (ttl {TTL:?}), per lease-second \
         (client CPU and server CPU in µs; memory: resident-set growth per lease)"
    );
    println!(
        "{:>8} {:>7} {:>5} {:>12} {:>12} {:>9} {:>11} {:>11}",
        "leases", "failed", "lost", "client CPU", "server CPU", "commands", "round trips", "memory"
    );
    hold_leases(url, &mut admin, 1, hold).await;
    let idle = hold_leases(url, &mut admin, 0, hold).await;
    println!(
        "{:>8} {:>7} {:>5} {:>10.0}µs {:>10.0}µs   (fixed cost per second: a manager connected, no lease held)",
        "idle",
        "",
        "",
        idle.client_cpu.as_secs_f64() * 1e6 / idle.seconds,
        idle.server_cpu.as_secs_f64() * 1e6 / idle.seconds,
    );
    for &leases in sizes {
        let held = hold_leases(url, &mut admin, leases, hold).await;
        let per = |total: f64| total / held.lease_seconds;
        println!(
            "{:>8} {:>7} {:>5} {:>10.2}µs {:>10.2}µs {:>9.3} {:>11.4} {:>11}",
            held.leases,
            held.failed,
            held.lost,
            per(held.client_cpu.as_secs_f64() * 1e6),
            per(held.server_cpu.as_secs_f64() * 1e6),
            per(held.commands as f64),
            per(held.round_trips as f64),
            held.memory.map_or_else(
                || "unknown".to_owned(),
                |bytes| format!("{:.2} KiB", bytes as f64 / 1024.0 / held.leases as f64)
            ),
        );
    }
}

/// Takes `leases` locks (none for the idle figure) on a manager of its
/// own, holds them for `hold` while measuring, then releases them.
async fn hold_leases(url: &str, admin: &mut Admin, leases: usize, hold: Duration) -> Held {
    let resident_before = resident_bytes();
    let manager = LockManager::connect(url).await.expect("connect");
    let options = LockOptions::new().ttl(TTL).wait(Duration::ZERO);
    let acquired: Vec<_> = stream::iter(0..leases)
        .map(|i| {
            let (manager, options) = (&manager, options.clone());
            async move { manager.acquire(&format!("held-{i}"), options).await }
        })
        .buffer_unordered(ACQUIRING)
        .collect()
        .await;
    let failed = acquired.iter().filter(|guard| guard.is_err()).count();
    let guards: Vec<_> = acquired.into_iter().filter_map(Result::ok).collect();
    admin.reset().await;
    let (server_before, client_before) = (admin.cpu().await, process_cpu());
    let started = Instant::now();
    tokio::time::sleep(hold).await;
    let held_for = started.elapsed();
    let (server_after, client_after) = (admin.cpu().await, process_cpu());
    let memory = resident_bytes()
        .zip(resident_before)
        .map(|(after, before)| after.saturating_sub(before));
    let commands = admin.commands().await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let round_trips = ["evalsha", "eval"]
        .iter()
        .filter_map(|name| commands.get(*name))
        .map(|stat| stat.calls)
        .sum();
    let total_commands = commands.values().map(|stat| stat.calls).sum();
    stream::iter(guards)
        .for_each_concurrent(ACQUIRING, |guard| async move {
            // Lost or not, the lease ends here; a failed release expires.
            let _ = guard.release().await;
        })
        .await;
    Held {
        leases,
        failed,
        lost,
        lease_seconds: leases as f64 * held_for.as_secs_f64(),
        seconds: held_for.as_secs_f64(),
        client_cpu: client_after
            .zip(client_before)
            .map_or(Duration::ZERO, |(after, before)| {
                after.saturating_sub(before)
            }),
        server_cpu: server_after.saturating_sub(server_before),
        commands: total_commands,
        round_trips,
        memory,
    }
}

/// This process's resident set in bytes (Linux `/proc/self/statm`).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
