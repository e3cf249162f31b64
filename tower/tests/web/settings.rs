//! Issue 42, item 2: the layer's settings from a real TOML file, read by
//! the `toml` crate; the layer built from them answers as they say. Bad
//! values name the field, the value and the accepted forms.

use std::time::Duration;

use axum::routing::post;
use axum::Router;
use http::header::RETRY_AFTER;
use http::StatusCode;
use leasehold_runtime::LockOptions;
use leasehold_tower::{LayerSettings, LockLayer};
use serde::Deserialize;

use crate::support::{send, Redis, Server};

#[derive(Deserialize)]
struct Service {
    payments: LayerSettings,
}

/// The settings read from `text`, written to a file and read back first.
fn read(name: &str, text: &str) -> Result<Service, toml::de::Error> {
    let path = std::env::temp_dir().join(format!(
        "leasehold-layer-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write the settings file");
    let read = std::fs::read_to_string(&path).expect("read the settings file");
    let _ = std::fs::remove_file(&path);
    toml::from_str(&read)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_built_from_a_toml_file_answers_as_it_says() {
    let service = read(
        "good",
        r#"
[payments]
key = "payment:{header.idempotency-key}"
on_busy = "too_many_requests"
retry_after = "3s"
options = { ttl = "20s", wait = "0ms", label = "payments" }
"#,
    )
    .expect("the file parses");
    let redis = Redis::start().await;
    let layer = LockLayer::builder(redis.locks.clone())
        .settings(&service.payments)
        .build()
        .expect("a valid layer");
    let app = Router::new().route("/pay", post(|| async { "paid" }).route_layer(layer));
    let server = Server::start(app).await;
    let _holder = redis
        .locks
        .acquire(
            "payment:k1",
            LockOptions::new().ttl(Duration::from_secs(20)),
        )
        .await
        .expect("the holder's lock");
    let answer = send(server.post("/pay").header("idempotency-key", "k1")).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert_eq!(
        answer
            .headers
            .get(RETRY_AFTER)
            .map(|value| value.as_bytes()),
        Some(&b"3"[..]),
        "{answer:?}"
    );
}

#[test]
fn bad_values_name_the_field_the_value_and_the_accepted_forms() {
    for (name, line, says) in [
        (
            "on_busy",
            r#"on_busy = "teapot""#,
            r#"`on_busy` = "teapot" is not one of "conflict", "too_many_requests""#,
        ),
        (
            "hold",
            r#"hold = "forever""#,
            r#"`hold` = "forever" is not one of "until_response", "until_body_ends""#,
        ),
        (
            "retry",
            r#"retry_after = "soon""#,
            r#"`retry_after` = "soon" is neither "recent_holds" nor a duration; accepted durations: "250ms""#,
        ),
        (
            "ttl",
            r#"options = { ttl = "30 parsecs" }"#,
            r#"`ttl` = "30 parsecs" is not a duration"#,
        ),
    ] {
        let text = format!("[payments]\nkey = \"k\"\n{line}\n");
        let message = read(name, &text).err().expect(line).to_string();
        assert!(message.contains(says), "{line}: {message}");
    }
}
