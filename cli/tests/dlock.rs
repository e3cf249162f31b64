//! The `dlock` binary against real `redis-server` processes, with the locks
//! held by another process (this test binary run again as
//! `holder_process`), as an operator meets them: `ls` and `show` name that
//! process, `release --force --yes` evicts it (and it learns so), `release`
//! refuses without `--force` or confirmation, bad targets fail with a
//! message and an exit code, `top --once` shows a contended key, `ls`
//! works on a Redis Cluster, `show --kind rw|semaphore` names each
//! reader and permit holder, `ls` lists every kind with its kind, and
//! `release --kind rw|semaphore` evicts every holder of another manager,
//! which learns it lost its lease.
//!
//! Every wait is bounded: `dlock` runs and holder output by
//! `support::PATIENCE`, polls by their count.

mod support;

/// Secrets in `dlock`'s output and arguments (issue 27).
#[path = "dlock/secrets.rs"]
mod secrets;

/// `dlock doctor` on every deployment (issue 39).
#[path = "dlock/doctor.rs"]
mod doctor;

/// `dlock verify` on every deployment (issue 46).
#[path = "dlock/verify.rs"]
mod verify;

use std::time::Duration;

use leasehold::{LockGuard, LockManager, LockOptions};
use leasehold_testkit::{ExtraPort, RedisCluster, RedisSentinel, RedisServer};
use serde_json::Value;
use support::{dlock, dlock_with_env, Holder, HOLDER_LABEL, HOLDER_NAME, HOLDER_TTL};

/// The name of the test below, which `Holder::start` runs.
const HOLDER_TEST: &str = "holder_process";

/// The holder process of the tests: see `support::holder_process_main`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the other tests"]
async fn holder_process() {
    support::holder_process_main().await;
}

/// A task of this process that queues for `key` on `url` as `waiter-svc`
/// (label `restock`), and returns once the server shows it queued.
async fn queue_waiter(url: &str, key: &str) -> tokio::task::JoinHandle<Option<LockGuard>> {
    let locks = LockManager::builder()
        .name("waiter-svc")
        .connect(url)
        .await
        .expect("connect");
    let waiting = {
        let (locks, key) = (locks.clone(), key.to_owned());
        tokio::spawn(async move {
            let options = LockOptions::new()
                .wait(Duration::from_secs(20))
                .label("restock");
            locks.acquire(&key, options).await.ok()
        })
    };
    for _ in 0..200 {
        if locks.inspect(key).await.expect("inspect").queued_count == 1 {
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the waiter never showed up in the queue of `{key}`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_names_the_other_process_that_holds_each_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let (holder, _) = Holder::start(HOLDER_TEST, &url, &["stock:1", "stock:2", "order:9"], false);
    let pid = holder.pid().to_string();

    let run = dlock(&["--url", &url, "ls", "stock:*"], "").await;
    run.expect_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a heading and two locks: {run:#?}");
    assert!(lines[0].starts_with("KEY") && lines[0].contains("WAITERS"));
    for (line, key) in lines[1..].iter().zip(["stock:1", "stock:2"]) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells[..7],
            [key, "lock", "1", HOLDER_NAME, cells[4], &pid, HOLDER_LABEL],
            "{line}"
        );
    }

    let run = dlock(&["--url", &url, "ls", "--json"], "").await;
    run.expect_code(0);
    let all: Value = serde_json::from_str(&run.stdout).expect("ls --json prints JSON");
    let keys: Vec<&str> = all
        .as_array()
        .expect("an array")
        .iter()
        .map(|lock| lock["key"].as_str().expect("a key"))
        .collect();
    assert_eq!(keys, ["order:9", "stock:1", "stock:2"]);
    for lock in all.as_array().unwrap() {
        assert_eq!(lock["kind"], "lock");
        assert_eq!(lock["holder"]["manager"], HOLDER_NAME);
        assert_eq!(
            lock["holder"]["pid"].as_u64(),
            Some(u64::from(holder.pid()))
        );
        assert_eq!(lock["holder"]["ttl_ms"].as_u64(), Some(3_000));
        assert!(lock["fencing_counter"].as_u64().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_names_holder_ttl_fencing_counter_and_a_queued_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let (holder, tokens) = Holder::start(HOLDER_TEST, &url, &["stock:42"], false);
    let waiting = queue_waiter(&url, "stock:42").await;

    let run = dlock(&["--url", &url, "show", "stock:42"], "").await;
    run.expect_code(0);
    let text = &run.stdout;
    assert!(
        text.contains(&format!("held by:         {HOLDER_NAME}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid:             {}", holder.pid())),
        "{text}"
    );
    assert!(
        text.contains(&format!("label:           {HOLDER_LABEL}")),
        "{text}"
    );
    assert!(text.contains("ttl:             3.0s"), "{text}");
    assert!(
        text.contains(&format!("fencing counter: {}", tokens[0])),
        "{text}"
    );
    assert!(text.contains("queued waiters:  1"), "{text}");
    assert!(text.contains("1. waiter-svc (pid "), "{text}");
    assert!(text.contains("label restock waiting for"), "{text}");

    let run = dlock(&["--url", &url, "show", "stock:42", "--json"], "").await;
    run.expect_code(0);
    let info: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    assert_eq!(info["held"], true);
    assert_eq!(
        info["holder"]["pid"].as_u64(),
        Some(u64::from(holder.pid()))
    );
    assert_eq!(info["fencing_counter"].as_u64(), Some(tokens[0]));
    let remaining = info["remaining_ms"].as_u64().expect("a remaining lease");
    assert!(remaining > 0 && remaining <= 3_000, "{remaining}");
    assert_eq!(info["queued_count"], 1);
    assert_eq!(info["queued"][0]["manager"], "waiter-svc");
    assert_eq!(
        info["queued"][0]["pid"].as_u64(),
        Some(u64::from(std::process::id()))
    );
    waiting.abort();
}

/// Issue 40: a server in its lock-delay grants nothing; `show` says so,
/// and when the delay ends. Put in it as after a crash: restarted empty
/// under a 60 s lease, then asked by a manager that knew it before (which
/// starts a 60 s delay, longer than the test). A server that grants shows
/// no such line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_names_a_server_in_its_lock_delay_and_when_it_ends() {
    let mut server = RedisServer::start();
    let url = server.url();
    let knew = LockManager::connect(&url).await.expect("connect");
    let outlasting = || LockOptions::new().ttl(Duration::from_secs(60)).renew(false);
    let _first = knew.acquire("stock:42", outlasting()).await.expect("free");
    let run = dlock(&["--url", &url, "show", "stock:42"], "").await;
    run.expect_code(0);
    assert!(!run.stdout.contains("lock-delay"), "{run:#?}");
    let run = dlock(&["--url", &url, "show", "stock:42", "--json"], "").await;
    run.expect_code(0);
    let info: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    assert_eq!(info["lock_delay"], Value::Null, "{run:#?}");

    server.restart_empty();
    let mut refused = None;
    for _ in 0..50 {
        match knew.try_acquire("stock:42", outlasting()).await {
            Err(leasehold::LockError::Connection { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answer => {
                refused = Some(answer.expect("answered").is_none());
                break;
            }
        }
    }
    assert_eq!(refused, Some(true), "granted during the lock-delay");

    let run = dlock(&["--url", &url, "show", "stock:42"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("held:            no"), "{run:#?}");
    assert!(
        run.stdout
            .contains("lock-delay:      the server grants nothing for "),
        "{run:#?}"
    );
    assert!(
        run.stdout.contains(" UTC (promoted or restarted"),
        "{run:#?}"
    );
    let run = dlock(&["--url", &url, "show", "stock:42", "--json"], "").await;
    run.expect_code(0);
    let info: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    assert_eq!(info["held"], false, "{run:#?}");
    assert_eq!(info["lock_delay"]["state"], "running", "{run:#?}");
    let left = info["lock_delay"]["left_ms"].as_u64().expect("time left");
    assert!(left > 0 && left <= 60_000, "{left}");
    assert!(
        info["lock_delay"]["ends_at_ms"].as_u64().is_some(),
        "{run:#?}"
    );
}

/// Issue 42: `show` counted "held for" from when the holder asked, wait
/// included. A holder that waited in the queue is shown held since its
/// grant, and its wait apart; one that took the lock at once did not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_tells_a_holders_wait_from_how_long_it_has_held() {
    let server = RedisServer::start();
    let url = server.url();
    let first = LockManager::builder()
        .name("first-svc")
        .connect(&url)
        .await
        .expect("connect");
    let held = first
        .acquire("report", LockOptions::new())
        .await
        .expect("free");
    let run = dlock(&["--url", &url, "show", "report"], "").await;
    run.expect_code(0);
    assert!(
        run.stdout.contains("(granted when it asked: asked at "),
        "{run:#?}"
    );
    assert!(
        run.stdout.contains("waited:          none recorded"),
        "{run:#?}"
    );

    let waiting = queue_waiter(&url, "report").await;
    // Queued now; it waits at least this long before the release below.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    held.release().await.expect("release");
    let granted = waiting.await.expect("the waiter").expect("handed the lock");

    let run = dlock(&["--url", &url, "show", "report"], "").await;
    run.expect_code(0);
    let text = &run.stdout;
    assert!(text.contains("held by:         waiter-svc"), "{text}");
    assert!(
        text.contains("(granted after a wait, by the server's clock)"),
        "{text}"
    );
    assert!(text.contains(" in the queue (asked at "), "{text}");

    let run = dlock(&["--url", &url, "show", "report", "--json"], "").await;
    run.expect_code(0);
    let info: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    let waited = info["waited_ms"].as_u64().expect("a recorded wait");
    assert!(waited >= 1_500, "{info}");
    let held_for = info["granted_ago_ms"].as_u64().expect("a recorded grant");
    let since_asked = info["holder"]["for_ms"].as_u64().expect("since it asked");
    assert!(held_for + 1_000 < since_asked, "{info}");
    drop(granted);
}

/// Issue 42: a job released within its `hold_at_least` is shown released,
/// kept until its hold ends, so its expiry is not taken for a lost holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_marks_a_lock_released_within_its_hold() {
    let server = RedisServer::start();
    let url = server.url();
    let jobs = LockManager::builder()
        .name("jobs")
        .connect(&url)
        .await
        .expect("connect");
    let hold = LockOptions::new().hold_at_least(Duration::from_secs(60));
    let running = jobs.acquire("job:report", hold).await.expect("free");
    let run = dlock(&["--url", &url, "show", "job:report"], "").await;
    run.expect_code(0);
    assert!(!run.stdout.contains("released by its holder"), "{run:#?}");
    running.release().await.expect("released within its hold");

    let run = dlock(&["--url", &url, "show", "job:report"], "").await;
    run.expect_code(0);
    assert!(
        run.stdout
            .contains("(released by its holder; kept until its hold_at_least ends)"),
        "{run:#?}"
    );
    let run = dlock(&["--url", &url, "show", "job:report", "--json"], "").await;
    let info: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    assert_eq!(info["released"], true, "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_release_evicts_the_other_process_which_learns_it_lost_its_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let (mut holder, tokens) = Holder::start(HOLDER_TEST, &url, &["stuck"], false);

    let run = dlock(
        &[
            "--url", &url, "release", "stuck", "--force", "--yes", "--json",
        ],
        "",
    )
    .await;
    run.expect_code(0);
    let forced: Value = serde_json::from_str(&run.stdout).expect("release --json prints JSON");
    assert_eq!(forced["was_held"], true);
    assert_eq!(
        forced["evicted"]["pid"].as_u64(),
        Some(u64::from(holder.pid()))
    );
    let counter = forced["fencing_counter"].as_u64().expect("a counter");
    assert!(
        counter > tokens[0],
        "counter {counter} not above the holder's token {}",
        tokens[0]
    );

    holder.expect_line("LOST stuck");
    let run = dlock(&["--url", &url, "show", "stuck"], "").await;
    assert!(run.stdout.contains("held:            no"), "{run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_release_in_text_names_the_evicted_holder_and_the_raised_counter() {
    let server = RedisServer::start();
    let url = server.url();
    let (mut holder, tokens) = Holder::start(HOLDER_TEST, &url, &["stuck"], false);

    let run = dlock(&["--url", &url, "release", "stuck", "--force"], "y\n").await;
    run.expect_code(0);
    assert!(
        run.stderr.contains(&format!(
            "Release stuck held by {HOLDER_NAME} (pid {} on ",
            holder.pid()
        )),
        "{run:#?}"
    );
    let counter: u64 = run
        .stdout
        .split("fencing counter raised to ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no raised counter in {run:#?}"));
    assert!(counter > tokens[0]);
    holder.expect_line("LOST stuck");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_without_force_refuses_and_the_lock_stays_held() {
    let server = RedisServer::start();
    let url = server.url();
    let (_holder, _) = Holder::start(HOLDER_TEST, &url, &["stuck"], false);

    let run = dlock(&["--url", &url, "release", "stuck"], "y\n").await;
    run.expect_code(4);
    assert!(run.stderr.contains("without --force"), "{run:#?}");
    assert!(run.stderr.contains("fencing tokens"), "{run:#?}");
    assert_still_held(&url, "stuck").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_not_confirmed_on_stdin_does_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let (mut holder, tokens) = Holder::start(HOLDER_TEST, &url, &["stuck"], false);

    for answer in ["n\n", "\n", ""] {
        let run = dlock(&["--url", &url, "release", "stuck", "--force"], answer).await;
        run.expect_code(4);
        assert!(run.stderr.contains("[y/N]"), "{run:#?}");
        assert!(run.stderr.contains("not released"), "{run:#?}");
    }
    assert_still_held(&url, "stuck").await;
    let info = LockManager::connect(&url)
        .await
        .unwrap()
        .inspect("stuck")
        .await
        .unwrap();
    assert_eq!(
        info.fencing_counter,
        Some(tokens[0]),
        "the counter was raised"
    );
    // Two renewals later the holder still has not lost its lease.
    tokio::time::sleep(HOLDER_TTL * 2 / 3).await;
    let printed = holder.printed();
    assert!(
        !printed.iter().any(|line| line.starts_with("LOST")),
        "{printed:#?}"
    );
}

/// Panics unless the lock on `key` at `url` is held by the holder process.
async fn assert_still_held(url: &str, key: &str) {
    let info = LockManager::connect(url)
        .await
        .unwrap()
        .inspect(key)
        .await
        .unwrap();
    assert!(info.held, "{info:#?}");
    assert_eq!(
        info.holder.map(|holder| holder.manager).as_deref(),
        Some(HOLDER_NAME)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_url_and_unreachable_server_fail_with_a_message_and_no_panic() {
    let run = dlock(&["--url", "not a url", "ls"], "").await;
    run.expect_code(2);
    assert!(
        run.stderr
            .starts_with("dlock: invalid Redis URL `not a url`"),
        "{run:#?}"
    );

    let port = ExtraPort::reserve();
    let url = format!("redis://127.0.0.1:{}", port.port());
    for args in [
        vec!["--url", url.as_str(), "ls"],
        vec!["--url", url.as_str(), "--timeout", "300", "show", "k"],
        vec!["--url", url.as_str(), "release", "k", "--force", "--yes"],
        vec!["--url", url.as_str(), "top", "--once"],
        vec!["--cluster", url.as_str(), "ls"],
    ] {
        let run = dlock(&args, "").await;
        run.expect_code(3);
        assert!(
            run.stderr.starts_with("dlock: lock server unreachable"),
            "{run:#?}"
        );
    }

    let run = dlock(
        &["--redlock", "redis://127.0.0.1:1,redis://127.0.0.1:2", "ls"],
        "",
    )
    .await;
    run.expect_code(2);
    assert!(run.stderr.contains("invalid lock options"), "{run:#?}");
    let run = dlock(&["--timeout", "0", "ls"], "").await;
    run.expect_code(2);
    let run = dlock(&["--sentinel", "mymaster"], "").await;
    run.expect_code(2);
}

/// Sentinels that ask for a password: `--sentinel-password`,
/// `--sentinel-password-file` or `DLOCK_SENTINEL_PASSWORD` reaches them;
/// without it `dlock` fails with the Sentinels' refusal. The variable set
/// in the environment leaves other targets alone (it made every command
/// without `--sentinel` a usage error). Either option
/// alone, without `--sentinel`, is a usage error, as are an unreadable file
/// (named, its content never shown) and `--sentinel-user` without a
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_password_reaches_sentinels_that_ask_for_one() {
    const PASSWORD: &str = "dlock-sentinel-secret";
    let topology = RedisSentinel::start();
    topology.require_password(PASSWORD);
    let urls = topology.sentinel_urls().join(",");
    let sentinel = ["--sentinel", topology.service_name(), urls.as_str()];

    let refused = dlock(&[&sentinel[..], &["ls"]].concat(), "").await;
    refused.expect_code(5);
    assert!(refused.stderr.contains("NOAUTH"), "{refused:#?}");
    assert!(
        refused.stderr.contains("sentinel_credentials"),
        "{refused:#?}"
    );

    let listed = dlock(
        &[&sentinel[..], &["--sentinel-password", PASSWORD, "ls"]].concat(),
        "",
    )
    .await;
    listed.expect_code(0);

    let alone = dlock(&["--sentinel-password", PASSWORD, "ls"], "").await;
    alone.expect_code(2);

    let dir = leasehold_testkit::TempDir::new("dlock-sentinel-password").expect("a temp dir");
    let file = dir.path().join("sentinel-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).expect("write the password file");
    let file = file.to_str().expect("a UTF-8 path");
    let from_file = dlock(
        &[&sentinel[..], &["--sentinel-password-file", file, "ls"]].concat(),
        "",
    )
    .await;
    from_file.expect_code(0);
    assert!(
        !from_file.stdout.contains(PASSWORD) && !from_file.stderr.contains(PASSWORD),
        "{from_file:#?}"
    );
    let file_alone = dlock(&["--sentinel-password-file", file, "ls"], "").await;
    file_alone.expect_code(2);
    let unreadable = dlock(
        &[
            &sentinel[..],
            &["--sentinel-password-file", "/nonexistent/spw", "ls"],
        ]
        .concat(),
        "",
    )
    .await;
    unreadable.expect_code(2);
    assert!(
        unreadable.stderr.contains("/nonexistent/spw"),
        "{unreadable:#?}"
    );
    let from_env = dlock_with_env(
        &[&sentinel[..], &["ls"]].concat(),
        &[("DLOCK_SENTINEL_PASSWORD", PASSWORD)],
        "",
    )
    .await;
    from_env.expect_code(0);
    // Set in the environment, it is no concern of other targets.
    let plain = RedisServer::start();
    let elsewhere = dlock_with_env(
        &["--url", &plain.url(), "ls"],
        &[("DLOCK_SENTINEL_PASSWORD", PASSWORD)],
        "",
    )
    .await;
    elsewhere.expect_code(0);

    let user_alone = dlock(
        &[&sentinel[..], &["--sentinel-user", "ops", "ls"]].concat(),
        "",
    )
    .await;
    user_alone.expect_code(2);
    assert!(
        user_alone.stderr.contains("--sentinel-user"),
        "{user_alone:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_shows_the_contended_key_with_its_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let (holder, _) = Holder::start(HOLDER_TEST, &url, &["hot:1", "calm:2"], false);
    let waiting = queue_waiter(&url, "hot:1").await;

    let run = dlock(&["--url", &url, "top", "--once"], "").await;
    run.expect_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        2 + 6 + 9,
        "as high as two locks need: {}",
        run.stdout
    );
    assert!(
        lines[1].starts_with("2 held, 1 waiters queued"),
        "{}",
        run.stdout
    );
    let heading = lines
        .iter()
        .position(|line| line.contains("Most waiters"))
        .expect("the waiters table");
    let hottest: Vec<&str> = lines[heading + 2].split_whitespace().collect();
    assert_eq!(hottest[..2], ["│hot:1", "1"], "{}", run.stdout);
    assert!(
        lines[heading + 2].contains(&format!("{HOLDER_NAME} pid {}", holder.pid())),
        "{}",
        run.stdout
    );
    waiting.abort();
}

/// `dlock top` shows read/write locks and semaphores too, each key marked
/// with its kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_shows_read_write_locks_and_semaphores_with_their_kind() {
    let server = RedisServer::start();
    let locks = LockManager::builder()
        .name("catalog-svc")
        .connect(&server.url())
        .await
        .unwrap();
    let reader = locks
        .rwlock("doc")
        .acquire_read(LockOptions::new())
        .await
        .unwrap();
    let permit = locks
        .semaphore("api", 4)
        .acquire(LockOptions::new())
        .await
        .unwrap();

    let run = dlock(&["--url", &server.url(), "top", "--once"], "").await;
    run.expect_code(0);
    assert!(
        run.stdout.contains("2 held, 0 waiters queued"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("doc (rw)"), "{}", run.stdout);
    assert!(run.stdout.contains("api (semaphore)"), "{}", run.stdout);
    assert!(run.stdout.contains("catalog-svc pid"), "{}", run.stdout);
    reader.release().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_on_a_cluster_names_the_other_process_that_holds_each_lock() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls().join(",");
    let keys = ["job:a", "job:b", "job:d", "job:{c}"]; // sorted, as listed
    let (holder, tokens) = Holder::start(HOLDER_TEST, &seeds, &keys, true);

    let run = dlock(&["--cluster", &seeds, "ls", "--json"], "").await;
    run.expect_code(0);
    let all: Value = serde_json::from_str(&run.stdout).expect("ls --json prints JSON");
    let all = all.as_array().expect("an array");
    let listed: Vec<&str> = all
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    assert_eq!(listed, keys);
    for (lock, token) in all.iter().zip(tokens) {
        assert_eq!(lock["holder"]["manager"], HOLDER_NAME);
        assert_eq!(
            lock["holder"]["pid"].as_u64(),
            Some(u64::from(holder.pid()))
        );
        assert_eq!(lock["fencing_counter"].as_u64(), Some(token));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_kind_rw_and_semaphore_name_each_reader_and_permit_holder() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockManager::builder()
        .name("catalog-svc")
        .connect(&url)
        .await
        .expect("connect");
    let long = |label: &str| LockOptions::new().ttl(Duration::from_secs(30)).label(label);
    let _first = locks
        .rwlock("doc")
        .acquire_read(long("show"))
        .await
        .expect("read");
    let _second = locks
        .rwlock("doc")
        .acquire_read(long("print"))
        .await
        .expect("read");
    let _permit = locks
        .semaphore("api", 4)
        .acquire(long("charge"))
        .await
        .expect("permit");

    let run = dlock(&["--url", &url, "show", "doc", "--kind", "rw"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("writer:          none"), "{run:#?}");
    assert!(run.stdout.contains("readers:         2"), "{run:#?}");
    for label in ["label show", "label print"] {
        assert!(run.stdout.contains(label), "{run:#?}");
    }

    let run = dlock(
        &["--url", &url, "show", "doc", "--kind", "rw", "--json"],
        "",
    )
    .await;
    run.expect_code(0);
    let rw: Value = serde_json::from_str(&run.stdout).expect("show --json prints JSON");
    assert_eq!(rw["reader_count"], 2, "{rw}");
    assert!(rw["writer"].is_null(), "{rw}");
    assert_eq!(rw["readers"][0]["holder"]["manager"], "catalog-svc", "{rw}");

    let run = dlock(
        &[
            "--url",
            &url,
            "show",
            "api",
            "--kind",
            "semaphore",
            "--json",
        ],
        "",
    )
    .await;
    run.expect_code(0);
    let semaphore: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(semaphore["held"], 1, "{semaphore}");
    assert_eq!(
        semaphore["holders"][0]["holder"]["label"], "charge",
        "{semaphore}"
    );

    let run = dlock(&["--url", &url, "show", "doc", "--kind", "mutex"], "").await;
    run.expect_code(2);
    assert!(
        run.stderr.contains("rw"),
        "the error lists the kinds: {run:#?}"
    );
}

/// Without `--kind`, `show` finds the kind that is held, as `ls` does: a
/// read/write lock or a semaphore is not reported as a free lock; several
/// kinds held on one key are all shown; a free key shows the free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_without_kind_shows_every_kind_that_is_held() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockManager::connect(&url).await.expect("connect");
    let long = |label: &str| LockOptions::new().ttl(Duration::from_secs(30)).label(label);
    let _reader = locks
        .rwlock("doc")
        .acquire_read(long("show"))
        .await
        .expect("read");
    let _permit = locks
        .semaphore("api", 4)
        .acquire(long("charge"))
        .await
        .expect("permit");
    let _lock = locks.acquire("both", long("plain")).await.expect("lock");
    let _writer = locks
        .rwlock("both")
        .acquire_write(long("write"))
        .await
        .expect("write");

    let run = dlock(&["--url", &url, "show", "doc"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("read/write lock: doc"), "{run:#?}");
    assert!(run.stdout.contains("readers:         1"), "{run:#?}");
    assert!(!run.stdout.contains("held:            no"), "{run:#?}");

    let run = dlock(&["--url", &url, "show", "api", "--json"], "").await;
    run.expect_code(0);
    let semaphore: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(semaphore["kind"], "semaphore", "{semaphore}");
    assert_eq!(semaphore["held"], 1, "{semaphore}");

    let run = dlock(&["--url", &url, "show", "both"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("label:           plain"), "{run:#?}");
    assert!(run.stdout.contains("label write"), "{run:#?}");
    let run = dlock(&["--url", &url, "show", "both", "--json"], "").await;
    let both: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let kinds: Vec<&str> = both
        .as_array()
        .expect("an array for two kinds")
        .iter()
        .filter_map(|held| held["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["lock", "rw"], "{both}");

    let run = dlock(&["--url", &url, "show", "nothing"], "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("held:            no"), "{run:#?}");
}

/// The lease of the shared holders that the tests evict: renewed every 3 s,
/// while the lease itself would last about 9 s.
const SHARED_TTL: Duration = Duration::from_secs(9);

/// How soon an evicted holder learns that its lease is lost: at its next
/// renewal, refused, well before its lease could have run out.
const LEARNS_WITHIN: Duration = Duration::from_secs(6);

/// A manager of this process named `catalog-svc`, on `url`.
async fn catalog(url: &str) -> LockManager {
    LockManager::builder()
        .name("catalog-svc")
        .connect(url)
        .await
        .expect("connect")
}

/// Options of a shared acquisition labelled `label`.
fn shared(label: &str) -> LockOptions {
    LockOptions::new().ttl(SHARED_TTL).label(label)
}

/// Panics unless `lost` (an evicted holder's) completes within
/// [`LEARNS_WITHIN`].
async fn learns_it_lost(lost: impl std::future::Future<Output = ()>, what: &str) {
    tokio::time::timeout(LEARNS_WITHIN, lost)
        .await
        .unwrap_or_else(|_| panic!("{what} never learned that it was evicted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_every_kind_with_its_kind_column_and_json_field() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = catalog(&url).await;
    let _lock = locks.acquire("doc", shared("render")).await.expect("lock");
    let _show = locks
        .rwlock("doc")
        .acquire_read(shared("show"))
        .await
        .expect("read");
    let _print = locks
        .rwlock("doc")
        .acquire_read(shared("print"))
        .await
        .expect("read");
    let writer = locks
        .rwlock("ledger")
        .acquire_write(shared("post").fenced(true))
        .await
        .expect("write");
    let token = writer.fencing_token().await.expect("a fencing token");
    let _permit = locks
        .semaphore("api", 4)
        .acquire(shared("charge"))
        .await
        .expect("permit");

    let run = dlock(&["--url", &url, "ls"], "").await;
    run.expect_code(0);
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect())
        .collect();
    let pid = std::process::id().to_string();
    let summary: Vec<[&str; 5]> = rows
        .iter()
        .map(|cells| [cells[0], cells[1], cells[2], cells[3], cells[5]])
        .collect();
    assert_eq!(
        summary,
        [
            ["api", "semaphore", "1", "catalog-svc", pid.as_str()],
            ["doc", "lock", "1", "catalog-svc", pid.as_str()],
            ["doc", "rw", "2", "catalog-svc", pid.as_str()],
            ["ledger", "rw", "1", "catalog-svc", pid.as_str()],
        ],
        "{run:#?}"
    );
    assert_eq!(rows[3][6], "post", "the writer is shown: {run:#?}");
    let fence_and_waiters = |row: &[&str]| row[row.len() - 2..].join(" ");
    assert_eq!(fence_and_waiters(&rows[0]), "- -", "{run:#?}");
    assert_eq!(
        fence_and_waiters(&rows[3]),
        format!("{token} 0"),
        "{run:#?}"
    );

    let run = dlock(&["--url", &url, "ls", "--json"], "").await;
    run.expect_code(0);
    let all: Value = serde_json::from_str(&run.stdout).expect("ls --json prints JSON");
    let kinds: Vec<(&str, &str)> = all
        .as_array()
        .expect("an array")
        .iter()
        .map(|lock| {
            (
                lock["key"].as_str().unwrap(),
                lock["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("api", "semaphore"),
            ("doc", "lock"),
            ("doc", "rw"),
            ("ledger", "rw")
        ]
    );
    assert_eq!(all[0]["held"], 1, "{all}");
    assert_eq!(all[0]["holders"][0]["holder"]["label"], "charge", "{all}");
    assert_eq!(all[1]["holder"]["label"], "render", "{all}");
    assert_eq!(all[2]["reader_count"], 2, "{all}");
    assert_eq!(all[3]["writer"]["holder"]["label"], "post", "{all}");
    assert_eq!(all[3]["fencing_counter"].as_u64(), Some(token), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_kind_rw_evicts_every_reader_and_fences_off_the_writer() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = catalog(&url).await;
    let show = locks
        .rwlock("doc")
        .acquire_read(shared("show"))
        .await
        .expect("read");
    let print = locks
        .rwlock("doc")
        .acquire_read(shared("print"))
        .await
        .expect("read");

    let args = [
        "--url", &url, "release", "doc", "--force", "--kind", "rw", "--yes", "--json",
    ];
    let run = dlock(&args, "").await;
    run.expect_code(0);
    let forced: Value = serde_json::from_str(&run.stdout).expect("release --json prints JSON");
    assert_eq!(forced["writer_was_held"], false, "{forced}");
    assert_eq!(forced["evicted_reader_count"], 2, "{forced}");
    assert_eq!(forced["evicted_readers"][0]["manager"], "catalog-svc");
    learns_it_lost(show.lost(), "the reader `show`").await;
    learns_it_lost(print.lost(), "the reader `print`").await;

    let writer = locks
        .rwlock("ledger")
        .acquire_write(shared("post").fenced(true))
        .await
        .expect("write");
    let token = writer.fencing_token().await.expect("a fencing token");
    let args = [
        "--url", &url, "release", "ledger", "--force", "--kind", "rw",
    ];
    let run = dlock(&args, "n\n").await;
    run.expect_code(4);
    assert!(run.stderr.contains("not released"), "{run:#?}");
    let run = dlock(&args, "y\n").await;
    run.expect_code(0);
    assert!(
        run.stderr.contains(&format!(
            "Release read/write lock ledger held by 1 writer: catalog-svc (pid {} on ",
            std::process::id()
        )),
        "{run:#?}"
    );
    let counter: u64 = run
        .stdout
        .split("writers' fencing counter raised to ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no raised counter in {run:#?}"));
    assert!(
        counter > token,
        "counter {counter} not above the writer's token {token}"
    );
    learns_it_lost(writer.lost(), "the writer").await;
    let next = locks
        .rwlock("ledger")
        .try_acquire_write(shared("again").fenced(true))
        .await
        .expect("write")
        .expect("the lock is free at once");
    assert!(next.fencing_token().await.expect("a token") > counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_kind_semaphore_takes_back_every_permit_after_confirmation() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = catalog(&url).await;
    let api = locks.semaphore("api", 2);
    let first = api.acquire(shared("charge")).await.expect("permit");
    let second = api.acquire(shared("refund")).await.expect("permit");

    let args = ["--url", &url, "release", "api", "--kind", "semaphore"];
    dlock(&args, "y\n").await.expect_code(4);
    let forced = [&args[..], &["--force"]].concat();
    let run = dlock(&forced, "no\n").await;
    run.expect_code(4);
    assert!(
        run.stderr
            .contains("Release semaphore api, taking back 2 permits: catalog-svc (pid "),
        "{run:#?}"
    );
    assert_eq!(
        api.inspect().await.expect("inspect").held,
        2,
        "released anyway"
    );

    let run = dlock(&forced, "yes\n").await;
    run.expect_code(0);
    assert!(
        run.stdout
            .contains("released semaphore `api`: took back 2 permits from catalog-svc (pid "),
        "{run:#?}"
    );
    learns_it_lost(first.lost(), "the permit `charge`").await;
    learns_it_lost(second.lost(), "the permit `refund`").await;
    let other = LockManager::connect(&url).await.expect("connect");
    let permit = other
        .semaphore("api", 2)
        .try_acquire(LockOptions::new())
        .await
        .expect("try");
    let permit = permit.expect("another manager gets a permit at once");
    permit.release().await.expect("release");

    let run = dlock(&forced, "").await;
    run.expect_code(0);
    assert!(run.stdout.contains("has no permit held"), "{run:#?}");
}
