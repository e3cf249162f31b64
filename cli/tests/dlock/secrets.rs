//! `dlock` keeps secrets (issue 27): one password, in the URLs of bad and
//! good targets on every deployment flag, never appears on stdout or
//! stderr (`--json` and `top`'s header included); the password can come
//! from `--password-file` or `DLOCK_PASSWORD` instead of argv; and an
//! operator's user with the README's ACL can list and release.

use std::fs;

use leasehold_testkit::{ExtraPort, RedisServer, TempDir};

use crate::support::{dlock_with_env, Run};

/// The one password of these tests.
const PASSWORD: &str = "Pw-LEAK-dlock-51e0";

/// Another password, where a server must refuse ours.
const OTHER: &str = "the-right-one";

/// A server that asks for `password`, set once it runs (the testkit checks
/// a new server with a password-less `PING`).
fn with_password(password: &str) -> RedisServer {
    let server = RedisServer::start();
    server
        .command(&["CONFIG", "SET", "requirepass", password])
        .expect("CONFIG SET requirepass");
    server
}

/// Panics if `run` printed the password anywhere.
#[track_caller]
fn assert_no_password(what: &str, run: &Run) {
    assert!(
        !run.stdout.contains(PASSWORD) && !run.stderr.contains(PASSWORD),
        "{what}: dlock printed the password: {run:#?}"
    );
}

/// Every subcommand that connects, as arguments after the target.
const SUBCOMMANDS: [&[&str]; 6] = [
    &["ls"],
    &["doctor", "--json"],
    &["ls", "--json"],
    &["show", "k", "--json"],
    &["release", "k", "--force", "--yes", "--json"],
    &["top", "--once"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_in_dlock_output_for_any_target() {
    let guarded = with_password(OTHER);
    let closed = ExtraPort::reserve();
    let bad = [
        format!("redis://:{PASSWORD}@127.0.0.1:notaport"),
        format!(":{PASSWORD}@127.0.0.1:6379"),
        format!("redis://svc:a@{PASSWORD}@127.0.0.1:x"),
        format!("redis://:{PASSWORD}@{}", guarded.addr()),
        format!("redis://:{PASSWORD}@127.0.0.1:{}", closed.port()),
        format!("rediss://:{PASSWORD}@{}", guarded.addr()),
    ];
    let mut failures = 0;
    for url in &bad {
        let targets: [Vec<&str>; 4] = [
            vec!["--url", url],
            vec!["--redlock", url],
            vec!["--cluster", url],
            vec!["--sentinel", "svc", url],
        ];
        for target in &targets {
            for subcommand in SUBCOMMANDS {
                let args = [&["--timeout", "300"][..], &target[..], subcommand].concat();
                let run = dlock_with_env(&args, &[], "").await;
                assert_no_password(&format!("dlock {args:?}"), &run);
                failures += usize::from(run.code != Some(0));
            }
        }
        // The URL from the environment, as the README advises.
        let run = dlock_with_env(&["ls"], &[("REDIS_URL", url)], "").await;
        assert_no_password("REDIS_URL", &run);
    }
    assert_eq!(
        failures,
        bad.len() * 4 * SUBCOMMANDS.len(),
        "every bad target fails"
    );
    let run = dlock_with_env(&["ls", "--url", &bad[0]], &[], "").await;
    run.expect_code(2);
    assert!(
        run.stderr.contains("redis://:***@127.0.0.1:notaport"),
        "{run:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_from_a_file_or_the_environment_and_never_shown() {
    let server = RedisServer::start();
    // A user `svc` too, made before the server asks every client for a password.
    let rule = format!(">{PASSWORD}");
    server
        .command(&["ACL", "SETUSER", "svc", "on", &rule, "~*", "&*", "+@all"])
        .expect("ACL SETUSER svc");
    server
        .command(&["CONFIG", "SET", "requirepass", PASSWORD])
        .expect("CONFIG SET requirepass");
    let url = format!("redis://{}", server.addr());
    // Without a password the server answers NOAUTH, found at connect.
    let noauth = dlock_with_env(&["ls"], &[("REDIS_URL", &url)], "").await;
    noauth.expect_code(5);
    assert!(noauth.stderr.contains("NOAUTH"), "{noauth:#?}");

    let from_env = dlock_with_env(
        &["ls", "--json"],
        &[("REDIS_URL", &url), ("DLOCK_PASSWORD", PASSWORD)],
        "",
    )
    .await;
    from_env.expect_code(0);

    let dir = TempDir::new("dlock-password").expect("a temp dir");
    let file = dir.path().join("password");
    fs::write(&file, format!("{PASSWORD}\n")).expect("write the password file");
    let file = file.to_str().expect("a UTF-8 path");
    let from_file = dlock_with_env(
        &["top", "--once", "--password-file", file],
        &[("REDIS_URL", &url)],
        "",
    )
    .await;
    from_file.expect_code(0);
    assert_no_password("--password-file", &from_file);

    // A password in the URL is masked in top's header.
    let in_url = format!("redis://svc:{PASSWORD}@{}", server.addr());
    let top = dlock_with_env(&["top", "--once"], &[("REDIS_URL", &in_url)], "").await;
    top.expect_code(0);
    assert_no_password("top header", &top);
    assert!(top.stdout.contains("redis://svc:***@"), "{top:#?}");

    // --help shows where the URL comes from, not what REDIS_URL holds.
    let help = dlock_with_env(&["--help"], &[("REDIS_URL", &in_url)], "").await;
    help.expect_code(0);
    assert_no_password("--help", &help);

    let missing = dlock_with_env(&["ls", "--password-file", "/nonexistent/pw"], &[], "").await;
    missing.expect_code(2);
    assert!(missing.stderr.contains("/nonexistent/pw"), "{missing:#?}");
}

/// The operator's ACL line of the guide's operating chapter, for the default namespace.
fn operator_acl() -> Vec<String> {
    let guide = include_str!("../../../src/guide/operating.md");
    let line = guide
        .lines()
        .find(|line| line.starts_with("ACL SETUSER ops "))
        .expect("the guide's operator ACL line");
    line.split(' ')
        .skip(2)
        .map(|word| word.replace("PASSWORD", PASSWORD))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_with_the_readme_acl_lists_and_releases() {
    let server = RedisServer::start();
    let acl = operator_acl();
    let command: Vec<&str> = ["ACL", "SETUSER"]
        .into_iter()
        .chain(acl.iter().map(String::as_str))
        .collect();
    server.command(&command).expect("the README's operator ACL");
    let url = format!("redis://{}", server.addr());
    let locks = leasehold::LockManager::connect(&url)
        .await
        .expect("connect");
    let _held = locks
        .acquire("stock:1", leasehold::LockOptions::new())
        .await
        .expect("lock");
    // dlock logs in as `ops`: the user name is in the URL, the password not.
    let ops_url = format!("redis://ops@{}", server.addr());
    let env_ops = [
        ("REDIS_URL", ops_url.as_str()),
        ("DLOCK_PASSWORD", PASSWORD),
    ];
    let ls = dlock_with_env(&["ls"], &env_ops, "").await;
    ls.expect_code(0);
    assert!(ls.stdout.contains("stock:1"), "{ls:#?}");
    let release = dlock_with_env(&["release", "stock:1", "--force", "--yes"], &env_ops, "").await;
    release.expect_code(0);
    assert_no_password("operator", &release);
}
