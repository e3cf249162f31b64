//! Secrets stay secret (issue 27): one password, in every URL of bad and
//! good inputs driven through every constructor and every backend, must
//! appear nowhere the library shows anything: the `Display` and `Debug` of
//! every error, the `Debug` of builders, managers and guards, everything
//! traced at TRACE level (the `log` records of redis-rs included) and every
//! metric name and label.
//!
//! A binary of its own: it installs the process-wide tracing subscriber and
//! metrics recorder. `dlock`'s side is `cli/tests/dlock.rs`, `secrets::`.

use leasehold_test_support as support;

use std::io;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use leasehold::{LockError, LockManager, LockManagerBuilder, LockOptions};
use leasehold_testkit::{ExtraPort, RedisCluster, RedisSentinel, RedisServer};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use support::{service_rules, NO_HANG};

/// The one password of this test: no other text holds it by chance.
const PASSWORD: &str = "Pw-LEAK-7f3a9c";

/// A password that is not [`PASSWORD`], where a server needs another one.
const OTHER: &str = "the-right-one";

/// Everything traced so far, as the subscriber formatted it.
static TRACED: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The writer of the subscriber: appends to [`TRACED`].
struct Capture;

impl io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        TRACED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Installs the TRACE subscriber (with `log` records) and a metrics
/// recorder, once; returns the recorder's snapshotter.
fn capture() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
            .with_ansi(false)
            .with_writer(|| Capture)
            .try_init()
            .expect("no other subscriber in this binary");
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        snapshotter
    })
}

/// What the library showed during the test, to search for the password.
#[derive(Default)]
struct Shown {
    texts: Vec<String>,
    errors: usize,
}

impl Shown {
    /// Keeps `err`'s `Display` and `Debug`, labelled with `what`.
    fn error(&mut self, what: &str, err: &LockError) {
        self.errors += 1;
        self.texts.push(format!("{what}: {err}"));
        self.texts.push(format!("{what}: {err:?}"));
    }

    /// Keeps the error of `result`, or the `Debug` of what succeeded.
    fn outcome<T: std::fmt::Debug>(&mut self, what: &str, result: &Result<T, LockError>) {
        match result {
            Ok(value) => self.texts.push(format!("{what}: {value:?}")),
            Err(err) => self.error(what, err),
        }
    }

    /// Keeps `value`'s `Debug`.
    fn debug(&mut self, what: &str, value: &impl std::fmt::Debug) {
        self.texts.push(format!("{what}: {value:?}"));
    }
}

/// A builder with short time limits, so unreachable nodes cost little.
fn quick() -> LockManagerBuilder {
    LockManager::builder()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
}

/// Every constructor and backend given `url` (and, for Redlock, the same
/// node three times): what each returned.
async fn every_constructor(shown: &mut Shown, what: &str, url: &str) {
    const CONSTRUCTORS: [&str; 6] = [
        "connect",
        "builder.connect",
        "redlock",
        "redlock x3",
        "sentinel",
        "cluster",
    ];
    for constructor in CONSTRUCTORS {
        let attempt = async {
            match constructor {
                "connect" => LockManager::connect(url).await,
                "builder.connect" => quick().connect(url).await,
                "redlock" => quick().redlock([url]).await,
                "redlock x3" => quick().redlock([url, url, url]).await,
                "sentinel" => quick().sentinel("svc", [url]).await,
                _ => quick().cluster([url]).await,
            }
        };
        let result = tokio::time::timeout(NO_HANG, attempt)
            .await
            .unwrap_or_else(|_| panic!("{constructor} of {what} ran longer than {NO_HANG:?}"));
        shown.outcome(&format!("{what}, {constructor}"), &result);
    }
}

/// Takes `key` on `manager`, has a second caller wait for it briefly and
/// gives it back: the lock's trace, debug and info lines.
async fn use_lock(shown: &mut Shown, what: &str, manager: &LockManager) {
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let guard = manager.acquire("k", options.clone()).await;
    shown.outcome(&format!("{what}, guard"), &guard);
    let waited = manager
        .acquire("k", options.wait(Duration::from_millis(200)))
        .await;
    shown.outcome(&format!("{what}, waiter"), &waited);
    if let Ok(guard) = guard {
        let released = guard.release().await;
        shown.outcome(&format!("{what}, release"), &released);
    }
    shown.outcome(&format!("{what}, list_all"), &manager.list_all("*").await);
}

/// A server that asks for `password` (set once it runs: the testkit checks
/// a new server with a password-less `PING`).
fn with_password(password: &str) -> RedisServer {
    let server = RedisServer::start();
    server
        .command(&["CONFIG", "SET", "requirepass", password])
        .expect("CONFIG SET requirepass");
    server
}

/// Malformed URLs, each holding the password somewhere between `:` and `@`.
fn malformed() -> Vec<String> {
    vec![
        format!("redis://:{PASSWORD}@127.0.0.1:notaport"),
        format!(":{PASSWORD}@127.0.0.1:6379"),
        format!("redis://svc:{PASSWORD}@"),
        format!("redis://svc:a@{PASSWORD}@127.0.0.1:notaport"),
        format!("redis://svc:{PASSWORD}:x@[::1"),
        format!("http://:{PASSWORD}@127.0.0.1:6379"),
        format!("redis://:{PASSWORD}@127.0.0.1:6379/notadb"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_in_errors_debug_tracing_or_metrics() {
    let snapshotter = capture();
    let mut shown = Shown::default();

    for (index, url) in malformed().iter().enumerate() {
        every_constructor(&mut shown, &format!("malformed URL #{index}"), url).await;
    }
    let mixed = [
        format!("redis://:{PASSWORD}@127.0.0.1:1"),
        format!("redis://:{OTHER}@127.0.0.1:2"),
    ];
    shown.outcome("cluster, two passwords", &quick().cluster(&mixed).await);

    // A wrong password, an unreachable port, TLS spoken to a plain server.
    let guarded = with_password(OTHER);
    let closed = ExtraPort::reserve();
    let failing = [
        (
            "wrong password",
            format!("redis://:{PASSWORD}@{}", guarded.addr()),
        ),
        (
            "wrong user",
            format!("redis://nobody:{PASSWORD}@{}", guarded.addr()),
        ),
        (
            "unreachable",
            format!("redis://:{PASSWORD}@127.0.0.1:{}", closed.port()),
        ),
        (
            "TLS failure",
            format!("rediss://:{PASSWORD}@{}", guarded.addr()),
        ),
    ];
    for (what, url) in &failing {
        every_constructor(&mut shown, what, url).await;
    }

    // Sentinels that ask for the password while the URLs carry it for the
    // primary: they answer NOAUTH. With sentinel_credentials they let us in.
    let sentinel = RedisSentinel::start();
    let service = sentinel.service_name().to_owned();
    let sentinel_urls = sentinel.sentinel_urls();
    sentinel.require_password(PASSWORD);
    let urls_with_password: Vec<String> = sentinel_urls
        .iter()
        .map(|url| url.replacen("redis://", &format!("redis://:{PASSWORD}@"), 1))
        .collect();
    let noauth = quick().sentinel(&service, &urls_with_password).await;
    assert!(
        noauth.is_err(),
        "Sentinels that ask for a password let us in without"
    );
    shown.outcome("sentinel NOAUTH", &noauth);
    let builder = quick().sentinel_credentials(Some("default"), PASSWORD);
    shown.debug("builder with Sentinel credentials", &builder);
    let through_sentinel = builder.sentinel(&service, &sentinel_urls).await;
    shown.outcome("sentinel", &through_sentinel);
    let through_sentinel = through_sentinel.expect("Sentinels with credentials");
    use_lock(&mut shown, "sentinel", &through_sentinel).await;

    // One server whose password is ours: a working manager, then the server gone.
    let mut server = with_password(PASSWORD);
    let url = format!("redis://:{PASSWORD}@{}", server.addr());
    let manager = quick().connect(&url).await.expect("the right password");
    shown.debug("manager", &manager);
    use_lock(&mut shown, "single", &manager).await;
    let held = manager.acquire("held", LockOptions::new()).await;
    server.kill();
    shown.outcome(
        "single, down",
        &manager.try_acquire("k", LockOptions::new()).await,
    );
    drop(held);

    // Redlock with one node down at start, then a second one: no quorum.
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| with_password(PASSWORD)).collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|node| format!("redis://:{PASSWORD}@{}", node.addr()))
        .collect();
    nodes[0].kill();
    let redlock = quick().redlock(&urls).await.expect("a quorum of 2 of 3");
    use_lock(&mut shown, "redlock", &redlock).await;
    nodes[1].kill();
    shown.outcome(
        "redlock, no quorum",
        &redlock.try_acquire("k", LockOptions::new()).await,
    );

    // A cluster whose nodes know the service's user with our password.
    let cluster = RedisCluster::start();
    let rules = service_rules("lock", true);
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    cluster.set_acl_user("svc", PASSWORD, &rules);
    let on_cluster = quick()
        .cluster(cluster.seed_urls_as("svc", PASSWORD))
        .await
        .expect("the service user on the cluster");
    use_lock(&mut shown, "cluster", &on_cluster).await;
    let wrong_cluster = cluster.seed_urls_as("svc", &format!("{PASSWORD}x"));
    shown.outcome(
        "cluster, wrong password",
        &quick().cluster(&wrong_cluster).await,
    );

    // Let background tasks (renewals, reconnections, subscriptions) log.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (key, _, _, _) in snapshotter.snapshot().into_vec() {
        shown.debug("metric", &key);
    }
    let traced = String::from_utf8_lossy(&TRACED.lock().unwrap_or_else(PoisonError::into_inner))
        .into_owned();

    assert!(shown.errors >= 50, "only {} errors seen", shown.errors);
    assert!(traced.contains("TRACE"), "nothing traced at TRACE level");
    let leaks: Vec<&String> = shown
        .texts
        .iter()
        .filter(|text| text.contains(PASSWORD))
        .collect();
    assert!(leaks.is_empty(), "the password leaked in: {leaks:#?}");
    let leaked_lines: Vec<&str> = traced
        .lines()
        .filter(|line| line.contains(PASSWORD))
        .collect();
    assert!(
        leaked_lines.is_empty(),
        "the password leaked into tracing: {leaked_lines:#?}"
    );
    assert!(
        shown.texts.iter().any(|text| text.contains(":***@")),
        "no redacted URL was shown: the inputs did not reach the messages"
    );
}
