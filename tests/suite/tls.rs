//! TLS (`rediss://`, the `tls` feature) against a real `redis-server` with a
//! throwaway CA: locking and waking a waiter over TLS, and refusing a server
//! whose certificate does not chain to a trusted root.
//!
//! The CA and the server certificate are made by the `openssl` command line
//! tool (installed with `redis-server` by `scripts/ensure-redis`), in a
//! temporary directory per test: no certificate crate to build. The server
//! keeps its plain port, on which the harness checks that it is up, and
//! listens for TLS on a second reserved port.

#![cfg(feature = "tls")]

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::{ExtraPort, RedisServer, RespValue, TempDir};
use support::{assert_subscribed_soon, NO_HANG};
use tokio::time::timeout;

/// A CA and a server certificate for `IP:127.0.0.1` signed by it, in a
/// directory that is deleted on drop.
struct Certificates {
    dir: TempDir,
}

impl Certificates {
    /// Runs `openssl` to make `ca.crt`, `server.key` and `server.crt`.
    fn generate() -> Certificates {
        let dir = TempDir::new("tls").expect("create a temp dir for the certificates");
        let certificates = Certificates { dir };
        fs::write(
            certificates.path("server.ext"),
            "subjectAltName = IP:127.0.0.1\n",
        )
        .unwrap();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        certificates.openssl(&[
            &["req", "-x509", "-nodes", "-days", "1"],
            &ec[..],
            &[
                "-subj",
                "/CN=leasehold test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        ]);
        certificates.openssl(&[
            &["req", "-nodes"],
            &ec[..],
            &[
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        ]);
        certificates.openssl(&[&[
            "x509",
            "-req",
            "-days",
            "1",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ]]);
        certificates
    }

    /// Runs `openssl` in the directory with the concatenated arguments.
    fn openssl(&self, args: &[&[&str]]) {
        let output = Command::new("openssl")
            .args(args.concat())
            .current_dir(self.dir.path())
            .output()
            .expect("openssl not found: install it with `apt-get install -y openssl`");
        assert!(
            output.status.success(),
            "openssl {:?} failed: {}",
            args.concat(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate, PEM.
    fn ca_pem(&self) -> Vec<u8> {
        fs::read(self.path("ca.crt")).unwrap()
    }

    /// Starts a server that speaks TLS on `tls_port` (and plain RESP on its
    /// own port), without asking clients for certificates.
    fn start_server(&self, tls_port: &ExtraPort) -> RedisServer {
        let file = |name: &str| path_arg(&self.path(name));
        RedisServer::builder()
            .arg("--tls-port")
            .arg(tls_port.port().to_string())
            .arg("--tls-cert-file")
            .arg(file("server.crt"))
            .arg("--tls-key-file")
            .arg(file("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(file("ca.crt"))
            .arg("--tls-auth-clients")
            .arg("no")
            .start()
    }
}

fn path_arg(path: &Path) -> String {
    path.to_str().expect("temp dir path is UTF-8").to_owned()
}

fn rediss_url(tls_port: &ExtraPort) -> String {
    format!("rediss://127.0.0.1:{}", tls_port.port())
}

async fn connect_trusting(ca: Vec<u8>, url: &str) -> LockManager {
    timeout(
        NO_HANG,
        LockManager::builder().tls_root_certificate(ca).connect(url),
    )
    .await
    .expect("connect hung")
    .unwrap_or_else(|err| panic!("connect to {url}: {err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_over_tls_is_taken_waited_for_and_released() {
    let certificates = Certificates::generate();
    let tls_port = ExtraPort::reserve();
    let server = certificates.start_server(&tls_port);
    let url = rediss_url(&tls_port);
    let a = connect_trusting(certificates.ca_pem(), &url).await;
    let b = connect_trusting(certificates.ca_pem(), &url).await;

    let ttl = LockOptions::new().ttl(Duration::from_secs(30));
    let guard = a.acquire("tls:item", ttl.clone()).await.unwrap();
    // The lock is in the server behind the TLS port.
    assert_eq!(
        server.command(&["EXISTS", "lock:tls:item"]).unwrap(),
        RespValue::Integer(1)
    );

    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        let guard = b
            .acquire("tls:item", ttl.wait(NO_HANG))
            .await
            .expect("the waiter gets the lock after the release");
        let waited = asked.elapsed();
        guard.release().await.unwrap();
        waited
    });
    // The waiter subscribed to the release channel, over TLS.
    assert_subscribed_soon(&server, "lock:tls:item").await;
    assert!(!waiter.is_finished(), "the waiter took a held lock");

    let released = Instant::now();
    guard.release().await.unwrap();
    let waited = timeout(NO_HANG, waiter)
        .await
        .expect("waiter hung")
        .unwrap();
    // The holder's TTL was 30 s: only the release message can have woken it.
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the waiter was not woken by the release (waited {waited:?})"
    );
    assert_eq!(
        server.command(&["EXISTS", "lock:tls:item"]).unwrap(),
        RespValue::Integer(0)
    );
}

#[tokio::test]
async fn redlock_over_tls_uses_the_root_certificate() {
    let certificates = Certificates::generate();
    let tls_port = ExtraPort::reserve();
    let server = certificates.start_server(&tls_port);
    let locks = timeout(
        NO_HANG,
        LockManager::builder()
            .tls_root_certificate(certificates.ca_pem())
            .redlock([rediss_url(&tls_port)]),
    )
    .await
    .expect("redlock connect hung")
    .unwrap();

    let guard = locks.acquire("tls:node", LockOptions::new()).await.unwrap();
    assert_eq!(
        server.command(&["EXISTS", "lock:tls:node"]).unwrap(),
        RespValue::Integer(1)
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn server_not_signed_by_a_trusted_root_is_a_tls_error_naming_the_certificate() {
    let certificates = Certificates::generate();
    let tls_port = ExtraPort::reserve();
    let _server = certificates.start_server(&tls_port);
    let url = rediss_url(&tls_port);

    // The system's trust store does not know the throwaway CA.
    let refused = timeout(NO_HANG, LockManager::connect(&url))
        .await
        .expect("connect hung");
    match refused {
        Err(err @ LockError::Tls { .. }) => {
            let message = err.to_string();
            assert!(
                message.contains("certificate") && !message.contains("Redis is running"),
                "the error does not say it is the certificate: {message}"
            );
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }

    // Trusting another CA is no better.
    let other = Certificates::generate();
    let refused = timeout(
        NO_HANG,
        LockManager::builder()
            .tls_root_certificate(other.ca_pem())
            .connect(&url),
    )
    .await
    .expect("connect hung");
    assert!(matches!(refused, Err(LockError::Tls { .. })), "{refused:?}");
}

#[tokio::test]
async fn unparsable_root_certificate_is_refused_as_invalid_options() {
    let refused = LockManager::builder()
        .tls_root_certificate(
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".to_vec(),
        )
        .connect("rediss://127.0.0.1:1")
        .await;
    assert!(
        matches!(refused, Err(LockError::InvalidOptions(_))),
        "{refused:?}"
    );
}
