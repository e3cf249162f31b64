//! `dlock doctor` on one server, a Sentinel set-up, a Redis Cluster and
//! Redlock: each node in the report, the risks, and the verdict as the exit
//! code (0 healthy, 6 at risk, 7 degraded, 5 credentials refused).

use leasehold_testkit::{RedisCluster, RedisSentinel, RedisServer};
use serde_json::Value;

use crate::support::dlock;

/// `run`'s stdout as JSON.
fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"))
}

/// The `kind` of every risk in a `--json` report.
fn risk_kinds(report: &Value) -> Vec<&str> {
    report["risks"]
        .as_array()
        .expect("risks")
        .iter()
        .map(|risk| risk["kind"].as_str().expect("a kind"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_one_server_reports_it_and_its_risks() {
    let plain = RedisServer::start();
    let run = dlock(&["--url", &plain.url(), "doctor"], "").await;
    run.expect_code(6);
    assert!(run.stdout.contains("primary 127.0.0.1:"), "{run:#?}");
    assert!(run.stdout.contains("no append-only file"), "{run:#?}");
    assert!(run.stdout.contains("verdict: at risk"), "{run:#?}");

    let run = dlock(&["--url", &plain.url(), "doctor", "--json"], "").await;
    run.expect_code(6);
    let report = json(&run.stdout);
    assert_eq!(report["deployment"], "one server");
    assert_eq!(report["verdict"], "at risk");
    assert_eq!(report["nodes"][0]["role"], "primary");
    assert!(report["nodes"][0]["round_trip_ms"].as_f64().is_some());
    assert_eq!(risk_kinds(&report), ["no_append_only_file"]);

    let durable = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .start();
    let run = dlock(&["--url", &durable.url(), "doctor"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("verdict: healthy"), "{run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_refused_credentials_exit_5_without_the_password() {
    let server = RedisServer::start();
    server
        .command(&["CONFIG", "SET", "requirepass", "doctor-secret"])
        .expect("CONFIG SET requirepass");
    let run = dlock(&["--url", &server.url(), "doctor"], "").await;
    run.expect_code(5);
    assert!(run.stderr.contains("asks for a password"), "{run:#?}");
    let wrong = format!("redis://:not-it@{}", server.addr());
    let run = dlock(&["--url", &wrong, "doctor"], "").await;
    run.expect_code(5);
    assert!(!run.stderr.contains("not-it"), "{run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_sentinel_names_the_primary_and_every_sentinel() {
    let topology = RedisSentinel::start();
    let urls = topology.sentinel_urls().join(",");
    let run = dlock(
        &[
            "--sentinel",
            topology.service_name(),
            &urls,
            "doctor",
            "--json",
        ],
        "",
    )
    .await;
    run.expect_code(6);
    let report = json(&run.stdout);
    let roles: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| node["role"].as_str().expect("a role"))
        .collect();
    let mut expected = vec!["primary"];
    expected.extend(topology.sentinel_urls().iter().map(|_| "sentinel"));
    assert_eq!(roles, expected, "{run:#?}");
    assert!(
        risk_kinds(&report).contains(&"async_replication"),
        "{run:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_a_cluster_names_every_primary() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls().join(",");
    let run = dlock(&["--cluster", &seeds, "doctor", "--json"], "").await;
    run.expect_code(6);
    let report = json(&run.stdout);
    assert_eq!(report["deployment"], "Redis Cluster");
    assert_eq!(
        report["nodes"].as_array().expect("nodes").len(),
        cluster.primaries().len(),
        "{run:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_redlock_with_a_node_down_is_degraded() {
    let mut nodes = RedisServer::start_independent(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    nodes[0].kill();
    let run = dlock(&["--redlock", &urls.join(","), "doctor"], "").await;
    run.expect_code(7);
    assert!(run.stdout.contains("FAILED"), "{run:#?}");
    assert!(run.stdout.contains("verdict: degraded"), "{run:#?}");
}
