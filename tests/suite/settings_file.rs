//! Issue 42, item 2: settings from a configuration file. A real TOML file,
//! read by the `toml` crate into `LockOptions`, `SemaphoreSettings` and
//! `LeaderSettings`, in the attribute's duration syntax and humantime's;
//! the options take effect on a real server; bad values are errors that
//! name the field, the value and the accepted forms.

use std::time::Duration;

use leasehold::{LeaderSettings, LockManager, LockOptions, OnLost, SemaphoreSettings};
use leasehold_testkit::RedisServer;
use serde::Deserialize;

/// What the service's file holds.
#[derive(Debug, Deserialize)]
struct Service {
    report: LockOptions,
    exports: SemaphoreSettings,
    scheduler: LeaderSettings,
}

const FILE: &str = r#"
[report]
ttl = "1m30s"
wait = "250ms"
hold_at_least = "1h 30m"
on_lost = "continue"
label = "reports::nightly"

[exports]
key = "exports"
permits = 2
options = { ttl = "2days 3h", wait = 1500 }

[scheduler]
key = "scheduler"
options = { ttl = "10s", renew = true }
"#;

/// The settings read from `text`, written to a file first and read back
/// from it, as a service reads its configuration.
fn read(name: &str, text: &str) -> Result<Service, toml::de::Error> {
    let path = std::env::temp_dir().join(format!(
        "leasehold-settings-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write the settings file");
    let read = std::fs::read_to_string(&path).expect("read the settings file");
    let _ = std::fs::remove_file(&path);
    toml::from_str(&read)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toml_file_configures_locks_semaphores_and_leaders() {
    let service = read("good", FILE).expect("the file parses");
    assert_eq!(
        service.report,
        LockOptions::new()
            .ttl(Duration::from_secs(90))
            .wait(Duration::from_millis(250))
            .hold_at_least(Duration::from_secs(5_400))
            .on_lost(OnLost::Continue)
            .label("reports::nightly")
    );
    assert_eq!(service.exports.key, "exports");
    assert_eq!(service.exports.permits, 2);
    assert_eq!(
        service.exports.options,
        LockOptions::new()
            .ttl(Duration::from_secs(2 * 86_400 + 3 * 3_600))
            .wait(Duration::from_millis(1_500))
    );
    assert_eq!(service.scheduler.key, "scheduler");
    assert_eq!(
        service.scheduler.options,
        LockOptions::new().ttl(Duration::from_secs(10))
    );

    // The options read take effect: the lease's ttl and label as the
    // server records them, and the semaphore's permits.
    let server = RedisServer::start();
    let manager = LockManager::connect(&server.url()).await.expect("connect");
    let report = manager
        .acquire("report", service.report.clone())
        .await
        .expect("free");
    let holder = manager
        .inspect("report")
        .await
        .expect("inspect")
        .holder
        .expect("named");
    assert_eq!(holder.ttl, Duration::from_secs(90));
    assert_eq!(holder.label.as_deref(), Some("reports::nightly"));
    drop(report);
    let exports = manager.semaphore(&service.exports.key, service.exports.permits);
    let no_wait = service.exports.options.clone().wait(Duration::ZERO);
    let first = exports.acquire(no_wait.clone()).await.expect("a permit");
    let second = exports.acquire(no_wait.clone()).await.expect("a permit");
    assert!(exports.try_acquire(no_wait).await.expect("asked").is_none());
    drop((first, second));
}

#[test]
fn bad_values_name_the_field_the_value_and_the_accepted_forms() {
    let with_report = |report: &str| {
        format!(
            "[report]\n{report}\n[exports]\nkey = \"e\"\npermits = 1\n[scheduler]\nkey = \"s\"\n"
        )
    };
    for (name, report, says) in [
        (
            "unit",
            r#"ttl = "30 parsecs""#,
            vec!["`ttl` = \"30 parsecs\"", "`parsecs` is not a unit"],
        ),
        (
            "order",
            r#"wait = "30s1m""#,
            vec!["`wait` = \"30s1m\"", "largest to smallest"],
        ),
        (
            "bare",
            r#"hold_at_least = "90""#,
            vec!["`hold_at_least` = \"90\"", "followed by a unit"],
        ),
        ("zero", r#"ttl = "0s""#, vec!["`ttl`", "at least 1 ms"]),
        (
            "on_lost",
            r#"on_lost = "retry""#,
            vec!["`on_lost` = \"retry\"", "\"cancel\", \"continue\""],
        ),
        ("unknown", r#"ttl_ms = 30000"#, vec!["ttl_ms"]),
        (
            "replicas",
            r#"replica_timeout = "1s""#,
            vec!["`replica_timeout` needs `min_replicas`"],
        ),
    ] {
        let message = read(name, &with_report(report))
            .expect_err(report)
            .to_string();
        for part in says {
            assert!(message.contains(part), "{report}: {message}");
        }
        if name != "unknown" && name != "replicas" && name != "zero" && name != "on_lost" {
            assert!(message.contains(r#""1m30s""#), "{report}: {message}");
            assert!(
                message.contains("whole milliseconds"),
                "{report}: {message}"
            );
        }
    }
}
