//! `dlock verify` for a few seconds against one server, Redlock, a
//! Sentinel set-up and a Redis Cluster: each contest ends with no double
//! grant at the counter, no lost update, fencing tokens rising, and every
//! key it wrote removed; a namespace that holds keys is refused. (The
//! checker's own findings are unit tests in `verify::history`.)

use leasehold_testkit::{RedisCluster, RedisSentinel, RedisServer, RespValue};
use serde_json::Value;

use crate::support::{dlock, Run};

/// The contest's options: 4 s, 2 workers, 600 ms leases, JSON.
const SHORT: [&str; 8] = [
    "verify",
    "--seconds",
    "4",
    "--workers",
    "2",
    "--ttl-ms",
    "600",
    "--json",
];

/// The number of keys on `server`.
fn keys_on(server: &RedisServer) -> i64 {
    match server.command(&["DBSIZE"]) {
        Ok(RespValue::Integer(keys)) => keys,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// `run`'s JSON report, checked for what fencing must keep.
#[track_caller]
fn fenced(run: &Run) -> Value {
    let report: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|err| panic!("{err}: {run:#?}"));
    let findings = &report["findings"];
    for (what, list) in [
        ("double grants at the counter", "double_grants_at_counter"),
        ("lost updates", "lost_updates"),
        ("tokens that went down", "tokens_went_down"),
    ] {
        assert_eq!(
            findings[list].as_array().map(Vec::len),
            Some(0),
            "{what}: {run:#?}"
        );
    }
    assert!(
        findings["holds"].as_u64().unwrap_or(0) > 0,
        "the contest held locks: {run:#?}"
    );
    assert_ne!(report["verdict"], "violated", "{run:#?}");
    assert!(matches!(run.code, Some(0 | 8)), "{run:#?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_one_server_passes_and_leaves_no_key() {
    let server = RedisServer::start();
    let run = dlock(&[&["--url", &server.url()][..], &SHORT].concat(), "").await;
    let report = fenced(&run);
    assert!(
        !report["faults"].as_array().expect("faults").is_empty(),
        "{run:#?}"
    );
    assert_eq!(keys_on(&server), 0, "every key removed: {run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_redlock_passes_and_leaves_no_key() {
    let nodes = RedisServer::start_independent(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let run = dlock(&[&["--redlock", &urls.join(",")][..], &SHORT].concat(), "").await;
    fenced(&run);
    for node in &nodes {
        assert_eq!(keys_on(node), 0, "every key removed: {run:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_sentinel_passes() {
    let topology = RedisSentinel::start();
    let urls = topology.sentinel_urls().join(",");
    let target = ["--sentinel", topology.service_name(), &urls];
    let run = dlock(&[&target[..], &SHORT].concat(), "").await;
    fenced(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_a_cluster_passes() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls().join(",");
    let run = dlock(&[&["--cluster", &seeds][..], &SHORT].concat(), "").await;
    fenced(&run);
    for node in cluster.primaries() {
        assert_eq!(keys_on(node), 0, "every key removed: {run:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_a_namespace_that_holds_keys() {
    let server = RedisServer::start();
    server
        .command(&["SET", "app:orders", "1"])
        .expect("an application's key");
    let run = dlock(
        &[
            "--url",
            &server.url(),
            "verify",
            "--seconds",
            "1",
            "--verify-namespace",
            "app",
        ],
        "",
    )
    .await;
    run.expect_code(4);
    assert!(run.stderr.contains("holds keys"), "{run:#?}");
    assert_eq!(keys_on(&server), 1, "the application's key is untouched");
}

/// SIGTERM (as Ctrl-C) mid-contest: the workers are stopped, every key the
/// contest wrote is removed, and it says it was interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_interrupted_removes_its_keys() {
    let server = RedisServer::start();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["--url", &server.url(), "verify", "--seconds", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start dlock verify");
    let written = async {
        for _ in 0..100 {
            if keys_on(&server) > 0 {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    };
    assert!(written.await, "the contest wrote keys within 10 s");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut exited = None;
    for _ in 0..300 {
        if let Some(status) = child.try_wait().expect("wait for dlock") {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let status = exited.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("dlock verify still ran 15 s after SIGTERM")
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(keys_on(&server), 0, "every key removed");
}
