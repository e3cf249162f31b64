//! Lock throughput: what our public API costs against a
//! hand-written baseline on the same Redis server, in one process and across
//! processes; what the same costs on Redlock; and what the
//! `#[distributed_lock]` attribute adds to the API it calls.
//!
//! ```text
//! cargo bench --bench lock_throughput            # starts its own redis-servers
//! REDIS_URL=redis://127.0.0.1:6379 cargo bench --bench lock_throughput
//! LOCK_BENCH_REDIS_CPUS=0 LOCK_BENCH_CLIENT_CPUS=1-3 cargo bench --bench lock_throughput
//! LOCK_BENCH_ONLY=U1,U32 cargo bench --bench lock_throughput   # only these workloads
//! LOCK_BENCH_ENGINE=valkey cargo bench --bench lock_throughput  # valkey-server 9.1 as the one server
//! LOCK_BENCH_ONLY=held cargo bench --bench lock_throughput      # many leases held, see `held`
//! LOCK_BENCH_ONLY=parked cargo bench --bench lock_throughput    # 1 000 parked waiters, see `parked`
//! ```
//!
//! Measured as production runs: each redis-server the bench starts is pinned
//! to its own CPU (`LOCK_BENCH_REDIS_CPUS`, default 0) and the bench, its
//! Tokio workers and its worker processes to others
//! (`LOCK_BENCH_CLIENT_CPUS`, default 1); `none` leaves a side unpinned (see
//! [`cpu`]). The Tokio runtime has one worker per client CPU.
//!
//! The subjects (one column each, see [`subjects`]): **ours** (`acquire` and
//! `release`; **ours fenced** with `fenced(true)`, **ours+token on request**
//! without it, both reading the fencing token once per cycle), **raw** (SET NX PX polled every 1 ms, EVALSHA
//! compare-and-delete; see [`raw`]), **ours on Redlock** over 3 more local
//! redis-servers, **ours on Cluster** over a Redis Cluster of 3 more
//! (primaries without replicas, all on the Redis CPU), and **macro**, **with_lock**, **acquire+release** around an
//! empty body with the attribute's options, and the **peers**, the crates a
//! user would pick instead, each with its own idiomatic cycle ([`peers`]: rslock,
//! distributed-lock-redis). Workloads: U1, U32 and C8 in this
//! process ([`workloads`]), X4x2 in 4 worker processes ([`cross_process`]),
//! F-U1 and F-U32 (with fencing tokens), D-U1 and D-U32 (with and without the
//! lock-delay), P-U1 and P-U32 (beside the peers), R3-U1 and M-U1 (U1 on Redlock, and
//! through the attribute), CL-U32 (U32 on the cluster; the cluster starts
//! only when CL-U32 is selected), `held`, N leases held at once ([`held`]), and
//! `parked`, 1 000 waiters parked on one held key in 4 worker processes ([`parked`]). Commands sent are counted in one more, smaller run
//! of each under MONITOR ([`monitor`]).
//!
//! The subjects take turns going first from round to round ([`measure`]);
//! the fastest run of each is printed ([`report`]) with the first column
//! divided by each other one, then the Redis command time by command. Redis
//! counters come from `INFO commandstats` and `INFO cpu` ([`redis_stats`]),
//! the client's CPU from `/proc/self/task/*/schedstat` of this process and of
//! its workers. Nothing is asserted: this prints numbers. See BENCHMARKS.md
//! for what they mean.
//!
//! Under `cargo test` (no `--bench` argument) each workload runs once at
//! 1/100 of its size, so the bench keeps compiling and working without
//! slowing the suite. With `--worker ...` the binary is a worker process.
//!
//! To add a workload: write one `async fn(Side, Scale) -> Timings` (most are
//! a [`workloads::Plan`] handed to [`workloads::drive`]) and add it to a
//! table of [`TABLES`] with the figures its rows show. Another client is one
//! more [`subjects::Subject`] and [`subjects::Client`] variant.

mod catalog;
mod cpu;
mod cross_process;
mod held;
mod limits;
mod measure;
mod monitor;
mod parked;
mod peers;
mod raw;
mod redis_stats;
mod report;
mod subjects;
mod workloads;

use leasehold_testkit::{Engine, RedisCluster, RedisServer};

use crate::catalog::{Figure, Table, Workload};
use crate::cpu::Placement;
use crate::measure::measure;
use crate::report::{print_command_time, print_table};
use crate::subjects::{Setup, Side, Subject};
use crate::workloads::Scale;

/// Redlock servers of the R3-U1 table (its name and title say 3).
const REDLOCK_NODES: usize = 3;
/// Primaries of the CL-U32 table's cluster (its title says 3).
const CLUSTER_PRIMARIES: usize = 3;

/// The figures of the uncontended workloads.
const UNCONTENDED: &[Figure] = &[
    Figure::CyclesPerSec,
    Figure::CycleP50,
    Figure::CycleP99,
    Figure::AcquireP50,
    Figure::AcquireP99,
    Figure::ClientCpu,
    Figure::ServerCpu,
    Figure::CommandTime,
    Figure::Commands,
    Figure::CommandsSent,
];

/// The figures of the workloads on one key.
const CONTENDED: &[Figure] = &[
    Figure::CyclesPerSec,
    Figure::AcquireP50,
    Figure::AcquireP99,
    Figure::AcquireMax,
    Figure::MostAhead,
    Figure::HandoffP50,
    Figure::HandoffP99,
    Figure::FirstSecondMin,
    Figure::FirstSecondMax,
    Figure::ClientCpu,
    Figure::ServerCpu,
    Figure::CommandTime,
    Figure::Commands,
    Figure::CommandsSent,
];

const TABLES: &[Table] = &[
    Table {
        title: "Ours against raw, on one redis-server: U1, U32 and C8 in one process, \
                X4x2 in 4 worker processes.",
        subjects: &[Subject::Ours, Subject::Raw],
        workloads: &[
            Workload {
                name: "U1",
                run: |side, scale| Box::pin(workloads::u1(side, scale)),
                rounds: 5,
                figures: UNCONTENDED,
            },
            Workload {
                name: "U32",
                run: |side, scale| Box::pin(workloads::u32_tasks(side, scale)),
                rounds: 5,
                figures: UNCONTENDED,
            },
            Workload {
                name: "C8",
                run: |side, scale| Box::pin(workloads::c8(side, scale)),
                rounds: 3,
                figures: CONTENDED,
            },
            Workload {
                name: "X4x2",
                run: |side, scale| Box::pin(cross_process::x4(side, scale)),
                rounds: 3,
                figures: CONTENDED,
            },
        ],
    },
    Table {
        title: "F-U1, F-U32: U1 and U32 reading the fencing token once per cycle, with \
                `fenced(true)` (ours fenced) and without it (ours+token on request), beside \
                ours without a token and raw, on one redis-server.",
        subjects: &[
            Subject::OursFenced,
            Subject::OursTokenOnRequest,
            Subject::Ours,
            Subject::Raw,
        ],
        workloads: &[
            Workload {
                name: "F-U1",
                run: |side, scale| Box::pin(workloads::u1(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
            Workload {
                name: "F-U32",
                run: |side, scale| Box::pin(workloads::u32_tasks(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
        ],
    },
    Table {
        title: "D-U1, D-U32: what the lock-delay's check costs (`INFO server` and `INFO \
                replication` inside every granting and renewing script): ours against ours \
                on a manager without it, and raw, on one redis-server.",
        subjects: &[Subject::Ours, Subject::OursWithoutDelay, Subject::Raw],
        workloads: &[
            Workload {
                name: "D-U1",
                run: |side, scale| Box::pin(workloads::u1(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
            Workload {
                name: "D-U32",
                run: |side, scale| Box::pin(workloads::u32_tasks(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
        ],
    },
    Table {
        title: "P-U1, P-U32: ours and raw beside the Rust crates a user would pick instead, \
                each through its own idiomatic cycle on the same redis-server: rslock \
                (Redlock on one node, no watchdog) and distributed-lock-redis (a watchdog \
                task per lock); see `peers`.",
        subjects: &[
            Subject::Ours,
            Subject::Raw,
            Subject::Rslock,
            Subject::DistLock,
        ],
        workloads: &[
            Workload {
                name: "P-U1",
                run: |side, scale| Box::pin(workloads::u1(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
            Workload {
                name: "P-U32",
                run: |side, scale| Box::pin(workloads::u32_tasks(side, scale)),
                rounds: 3,
                figures: UNCONTENDED,
            },
        ],
    },
    Table {
        title: "R3-U1: U1 through ours on Redlock over 3 redis-servers, beside ours and raw \
                on one server; Redis CPU and commands of ours on Redlock are summed over \
                the 3 servers.",
        subjects: &[Subject::OursRedlock, Subject::Ours, Subject::Raw],
        workloads: &[Workload {
            name: "R3-U1",
            run: |side, scale| Box::pin(workloads::u1(side, scale)),
            rounds: 3,
            figures: UNCONTENDED,
        }],
    },
    Table {
        title: "CL-U32: U32 through ours on a Redis Cluster of 3 primaries (the 32 keys \
                spread over them), beside ours and raw on one server; Redis CPU and commands \
                of ours on Cluster are summed over the 3 primaries.",
        subjects: &[Subject::OursCluster, Subject::Ours, Subject::Raw],
        workloads: &[Workload {
            name: "CL-U32",
            run: |side, scale| Box::pin(workloads::u32_tasks(side, scale)),
            rounds: 3,
            figures: UNCONTENDED,
        }],
    },
    Table {
        title: "M-U1: U1 through `#[distributed_lock]` around an empty body, against \
                `with_lock` around an empty body and against `acquire` + `release`, same \
                options (ttl 10 s, wait 0), one redis-server.",
        subjects: &[Subject::Macro, Subject::WithLock, Subject::AcquireRelease],
        workloads: &[Workload {
            name: "M-U1",
            run: |side, scale| Box::pin(workloads::u1(side, scale)),
            // Each subject goes first once.
            rounds: 3,
            figures: &[
                Figure::CyclesPerSec,
                Figure::CycleP50,
                Figure::CycleP99,
                Figure::ClientCpu,
                Figure::ServerCpu,
                Figure::CommandTime,
                Figure::Commands,
                Figure::CommandsSent,
            ],
        }],
    },
];

/// The server the bench starts for the one-server workloads:
/// `LOCK_BENCH_ENGINE=valkey` for `valkey-server` 9.1 (from
/// `LEASEHOLD_VALKEY_SERVER`, see `scripts/ensure-valkey`), else
/// `redis-server`.
fn engine_from_env() -> Engine {
    match std::env::var("LOCK_BENCH_ENGINE").as_deref() {
        Ok("valkey") => Engine::Valkey,
        Ok("redis") | Err(_) => Engine::Redis,
        Ok(other) => panic!("LOCK_BENCH_ENGINE={other}: expected redis or valkey"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(cross_process::WORKER_ARG) {
        cross_process::worker_main(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some(parked::WORKER_ARG) {
        parked::worker_main(&args[1..]);
        return;
    }
    let scale = if args.iter().any(|arg| arg == "--bench") {
        Scale(1)
    } else {
        Scale(100)
    };
    let cpus = available_cpus();
    let mut placement = Placement::from_env(cpus);
    // First, so that everything started from here on inherits it.
    placement.pin_self();
    let own_server = std::env::var("REDIS_URL")
        .is_err()
        .then(|| RedisServer::builder().engine(engine_from_env()).start());
    let url = own_server.as_ref().map_or_else(
        || std::env::var("REDIS_URL").expect("REDIS_URL is set"),
        RedisServer::url,
    );
    let nodes = RedisServer::start_independent(REDLOCK_NODES);
    let cluster = selected("CL-U32").then(|| {
        RedisCluster::builder()
            .primaries(CLUSTER_PRIMARIES)
            .replicas_per_primary(0)
            .start()
    });
    let cluster_nodes: Vec<&RedisServer> =
        cluster.iter().flat_map(RedisCluster::primaries).collect();
    let cluster_urls: Vec<String> = cluster_nodes.iter().map(|node| node.url()).collect();
    for server in own_server
        .iter()
        .chain(&nodes)
        .chain(cluster_nodes.iter().copied())
    {
        match redis_stats::process_id(server) {
            Some(pid) => placement.pin_server(pid),
            None => eprintln!("warning: no process id from {}: not pinned", server.url()),
        }
    }
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let redis_pid = own_server
        .as_ref()
        .or(nodes.first())
        .and_then(redis_stats::process_id);
    let workers = available_cpus();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let setup = Setup::connect(&url, &node_urls, &cluster_urls).await;
        let mut subjects: Vec<Subject> = Vec::new();
        let running = TABLES.iter().filter(|table| {
            table
                .workloads
                .iter()
                .any(|workload| selected(workload.name))
        });
        for subject in running.flat_map(|table| table.subjects) {
            if !subjects.contains(subject) {
                subjects.push(*subject);
            }
        }
        // Loads the scripts and warms the connections before anything is
        // measured: 1 000 cycles per subject, 10 in the smoke run.
        for subject in subjects {
            workloads::u1(setup.side(subject), Scale(20 * scale.0)).await;
        }
        let mut results = Vec::new();
        for table in TABLES {
            let mut sides: Vec<Side> = Vec::new();
            let mut runs = Vec::new();
            for workload in table.workloads {
                if selected(workload.name) {
                    if sides.is_empty() {
                        sides = table.subjects.iter().map(|s| setup.side(*s)).collect();
                    }
                    runs.push(measure(workload, &sides, scale).await);
                } else {
                    runs.push(Vec::new());
                }
            }
            results.push(runs);
        }
        println!(
            "\n{cpus} CPUs ({}); {}{}; redis-server {} ({}; Redlock: {REDLOCK_NODES} more, \
             Cluster: {CLUSTER_PRIMARIES} more, started by the bench); Tokio multi-thread runtime with {workers} worker(s); \
             fastest of alternating runs per subject{}\n",
            cpu::model().unwrap_or_else(|| "model unknown".to_owned()),
            placement.describe(redis_pid),
            if own_server.is_some() {
                ""
            } else {
                " (the REDIS_URL server is wherever you put it)"
            },
            setup.server.clone().redis_version().await,
            if own_server.is_some() {
                "started by the bench, --save '' --appendonly no"
            } else {
                "REDIS_URL"
            },
            if scale.is_full() {
                ""
            } else {
                ", smoke run at 1/100 size"
            },
        );
        for (table, runs) in TABLES.iter().zip(&results) {
            print_table(table, runs);
        }
        print_command_time(TABLES, &results);
        if selected("held") {
            held::run(&url, scale).await;
        }
        if selected("parked") {
            parked::run(&url, scale).await;
        }
    });
}

/// Whether `workload` runs: all do unless `LOCK_BENCH_ONLY` lists some
/// (comma-separated names, e.g. `U1,U32`).
fn selected(workload: &str) -> bool {
    std::env::var("LOCK_BENCH_ONLY").map_or(true, |only| {
        only.split(',')
            .any(|name| name.trim().eq_ignore_ascii_case(workload))
    })
}

/// CPUs this process may run on (after pinning: the client CPUs).
fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
