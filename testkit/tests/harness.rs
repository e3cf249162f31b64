//! Starts real `redis-server` processes and checks the harness's guarantees.

use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::panic::{self, AssertUnwindSafe};
use std::process::Command;
use std::time::Duration;

use leasehold_testkit::{
    poll_until, Engine, PostgresServer, RedisServer, RespValue, REDIS8_BIN_ENV, VALKEY_BIN_ENV,
};

/// Set in the environment of a child process running a test on its own.
const CHILD_MARKER: &str = "LEASEHOLD_TESTKIT_CHILD";

fn ok(value: &str) -> RespValue {
    RespValue::Simple(value.to_owned())
}

fn get(server: &RedisServer, key: &str) -> RespValue {
    server.command(&["GET", key]).expect("GET")
}

fn refuses_connections(server_port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", server_port)).is_err()
}

#[test]
fn two_servers_run_at_once_on_different_ports() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    assert_ne!(first.port(), second.port());
    for server in [&first, &second] {
        assert!(server.is_running());
        assert_eq!(server.command(&["PING"]), Ok(ok("PONG")));
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(
            server.addr().to_string(),
            format!("127.0.0.1:{}", server.port())
        );
    }
}

#[test]
fn set_then_get_round_trips() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["SET", "key", "value"]), Ok(ok("OK")));
    assert_eq!(get(&server, "key"), RespValue::Bulk(b"value".to_vec()));
    assert_eq!(get(&server, "missing"), RespValue::Nil);
    assert_eq!(
        server.command(&["PEXPIRE", "key", "60000"]),
        Ok(RespValue::Integer(1))
    );
    let pttl = server
        .command(&["PTTL", "key"])
        .unwrap()
        .as_integer()
        .unwrap();
    assert!((1..=60_000).contains(&pttl), "PTTL {pttl}");
}

#[test]
fn error_replies_are_errors_and_nested_arrays_parse() {
    let server = RedisServer::start();
    let error = server.command(&["NO-SUCH-COMMAND"]).unwrap_err();
    assert!(error.contains("ERR"), "{error}");
    let nested = server.command(&["EVAL", "return {1, {'a', 2}}", "0"]);
    let expected = RespValue::Array(vec![
        RespValue::Integer(1),
        RespValue::Array(vec![RespValue::Bulk(b"a".to_vec()), RespValue::Integer(2)]),
    ]);
    assert_eq!(nested, Ok(expected));
}

#[test]
fn kill_stops_the_server_and_commands_fail() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    assert!(!server.is_running());
    assert!(server.command(&["PING"]).is_err());
    assert!(refuses_connections(server.port()));
    assert_eq!(server.url(), url);
    server.kill();
}

#[test]
fn restart_empty_comes_back_on_the_same_port_without_data() {
    let mut server = RedisServer::start();
    let port = server.port();
    server.command(&["SET", "key", "value"]).unwrap();
    server.command(&["SAVE"]).unwrap();
    server.restart_empty();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["PING"]), Ok(ok("PONG")));
    assert_eq!(get(&server, "key"), RespValue::Nil);

    server.kill();
    server.restart_empty();
    assert_eq!(server.command(&["DBSIZE"]), Ok(RespValue::Integer(0)));
}

#[test]
fn three_independent_servers_have_distinct_ports() {
    let nodes = RedisServer::start_independent(3);
    let ports: HashSet<u16> = nodes.iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), 3);
    assert!(nodes
        .iter()
        .all(|node| node.command(&["PING"]) == Ok(ok("PONG"))));
}

#[test]
fn info_commandstats_counts_calls() {
    let server = RedisServer::start();
    for _ in 0..3 {
        get(&server, "key");
    }
    let stats = server.info_commandstats();
    assert_eq!(stats.get("get"), Some(&3));
    assert_eq!(stats.get("evalsha"), None);
}

#[test]
fn replica_of_replicates_and_promote_makes_writable() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replica_of(&primary);
    primary.command(&["SET", "key", "value"]).unwrap();
    let replicated = poll_until(Duration::from_secs(5), || {
        get(&replica, "key") == RespValue::Bulk(b"value".to_vec())
    });
    assert!(replicated, "key not replicated within 5 s");
    assert!(
        replica.command(&["SET", "other", "x"]).is_err(),
        "replicas are read-only"
    );
    replica.promote();
    assert_eq!(replica.command(&["SET", "other", "x"]), Ok(ok("OK")));
}

#[test]
fn builder_passes_extra_args() {
    let server = RedisServer::builder().arg("--maxmemory").arg("1mb").start();
    let reply = server.command(&["CONFIG", "GET", "maxmemory"]).unwrap();
    let expected = RespValue::Array(vec![
        RespValue::Bulk(b"maxmemory".to_vec()),
        RespValue::Bulk(b"1048576".to_vec()),
    ]);
    assert_eq!(reply, expected);
}

#[test]
fn builder_uses_the_requested_port() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let server = RedisServer::builder().port(port).start();
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["PING"]), Ok(ok("PONG")));
}

#[test]
fn drop_kills_the_server_even_when_a_test_panics() {
    let mut port = 0;
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let server = RedisServer::start();
        port = server.port();
        panic!("simulated test failure");
    }));
    assert!(outcome.is_err());
    assert!(refuses_connections(port));
}

#[test]
fn is_running_notices_a_shutdown() {
    let server = RedisServer::start();
    assert!(
        server.command(&["SHUTDOWN", "NOSAVE"]).is_err(),
        "SHUTDOWN closes the connection"
    );
    assert!(poll_until(Duration::from_secs(5), || !server.is_running()));
}

#[test]
fn servers_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisServer>();
    let server = RedisServer::start();
    std::thread::scope(|scope| {
        scope.spawn(|| server.command(&["DEBUG", "SLEEP", "0.2"]).unwrap());
        scope.spawn(|| server.command(&["SET", "key", "value"]).unwrap());
    });
    assert_eq!(get(&server, "key"), RespValue::Bulk(b"value".to_vec()));
}

/// Runs this very test in a child process with `env` applied and returns its
/// combined output; in the child, tries to start a server.
fn start_in_child_process(test: &str, env: &[(&str, Option<&str>)]) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", test, "--nocapture"])
        .env(CHILD_MARKER, "1");
    for (name, value) in env {
        match value {
            Some(value) => child.env(name, value),
            None => child.env_remove(name),
        };
    }
    let output = child.output().unwrap();
    assert!(
        !output.status.success(),
        "starting a server should have panicked"
    );
    String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout)
}

#[test]
fn missing_binary_panics_with_install_instructions() {
    if std::env::var_os(CHILD_MARKER).is_some() {
        let _server = RedisServer::start();
        return;
    }
    let test = "missing_binary_panics_with_install_instructions";
    let no_path = [("PATH", Some("/nonexistent")), ("REDIS_SERVER_BIN", None)];
    let output = start_in_child_process(test, &no_path);
    let expected = "redis-server not found on PATH: install it with \
        `apt-get install -y redis-server` (Debian) or run scripts/test, which installs it";
    assert!(output.contains(expected), "{output}");

    let bad_override = [("REDIS_SERVER_BIN", Some("/nonexistent/redis-server"))];
    let output = start_in_child_process(test, &bad_override);
    assert!(
        output.contains("REDIS_SERVER_BIN=\"/nonexistent/redis-server\" does not exist"),
        "{output}"
    );
}

/// A built engine starts with the harness's options and clean-up: its
/// version is the one `version_field` names, DEBUG from loopback works, no
/// snapshots are taken, and the port is free again after the drop.
fn built_engine_starts_with_the_same_options_and_cleanup(engine: Engine, version_field: &str) {
    let mut server = RedisServer::builder().engine(engine).start();
    assert_eq!(server.engine(), engine);
    let info = server.command(&["INFO", "server"]).unwrap();
    let info = info.as_str().expect("INFO is text");
    assert!(info.contains(version_field), "{info}");
    assert_eq!(server.command(&["DEBUG", "SLEEP", "0"]), Ok(ok("OK")));
    let save = server.command(&["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(
        save,
        RespValue::Array(vec![
            RespValue::Bulk(b"save".to_vec()),
            RespValue::Bulk(Vec::new())
        ])
    );
    server.command(&["SET", "key", "value"]).unwrap();
    server.restart_empty();
    assert_eq!(get(&server, "key"), RespValue::Nil);
    let port = server.port();
    drop(server);
    assert!(refuses_connections(port));
}

#[test]
fn valkey_engine_starts_valkey_9_1_with_the_same_options_and_cleanup() {
    built_engine_starts_with_the_same_options_and_cleanup(Engine::Valkey, "valkey_version:9.1.");
}

#[test]
fn redis8_engine_starts_redis_8_6_with_the_same_options_and_cleanup() {
    built_engine_starts_with_the_same_options_and_cleanup(Engine::Redis8, "redis_version:8.6.");
}

/// In a child process (the test `test`), starting `engine` with its
/// variable `var` unset, then naming a missing file, panics with what to do.
fn built_engine_without_its_binary_panics_with_what_to_run(
    test: &str,
    engine: Engine,
    var: &str,
    expected: &str,
) {
    if std::env::var_os(CHILD_MARKER).is_some() {
        let _server = RedisServer::builder().engine(engine).start();
        return;
    }
    let output = start_in_child_process(test, &[(var, None)]);
    assert!(output.contains(expected), "{output}");

    let bad = [(var, Some("/nonexistent/server"))];
    let output = start_in_child_process(test, &bad);
    assert!(
        output.contains(&format!("{var}=\"/nonexistent/server\" does not exist")),
        "{output}"
    );
}

#[test]
fn valkey_without_its_binary_panics_with_what_to_run() {
    built_engine_without_its_binary_panics_with_what_to_run(
        "valkey_without_its_binary_panics_with_what_to_run",
        Engine::Valkey,
        VALKEY_BIN_ENV,
        "LEASEHOLD_VALKEY_SERVER is not set, so this Valkey 9.1 test has no valkey-server \
         to start: run `export LEASEHOLD_VALKEY_SERVER=$(scripts/ensure-valkey)`",
    );
}

#[test]
fn redis8_without_its_binary_panics_with_what_to_run() {
    built_engine_without_its_binary_panics_with_what_to_run(
        "redis8_without_its_binary_panics_with_what_to_run",
        Engine::Redis8,
        REDIS8_BIN_ENV,
        "LEASEHOLD_REDIS8_SERVER is not set, so this Redis 8.6 test has no redis-server \
         to start: run `export LEASEHOLD_REDIS8_SERVER=$(scripts/ensure-redis8)`",
    );
}

#[test]
fn postgres_server_listens_on_loopback_until_dropped() {
    let first = PostgresServer::start();
    let second = PostgresServer::start();
    assert_ne!(first.port(), second.port());
    assert!(!refuses_connections(first.port()));
    assert_eq!(
        first.url(),
        format!("postgres://leasehold@127.0.0.1:{}/postgres", first.port())
    );
    let port = first.port();
    drop(first);
    assert!(refuses_connections(port), "stopped on drop");
    assert!(
        !refuses_connections(second.port()),
        "the other one still runs"
    );
}
