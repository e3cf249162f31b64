//! The [`FaultProxy`] in front of a real `redis-server`: plain forwarding, and
//! each fault as seen by a raw TCP client speaking inline RESP.
//!
//! Every read is bounded by a timeout, so a broken proxy fails a test instead
//! of hanging it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use leasehold_testkit::{poll_until, FaultProxy, RedisServer, RespValue};

/// How long a silent connection must stay silent to count as blackholed.
const SILENCE: Duration = Duration::from_millis(300);
/// Bound on any reply or close that must happen.
const PROMPTLY: Duration = Duration::from_secs(2);
const PONG: &[u8] = b"+PONG\r\n";

/// What a client saw within a time limit.
#[derive(Debug, PartialEq)]
enum Seen {
    /// These bytes, up to and including the first `\r\n`.
    Line(Vec<u8>),
    /// End-of-stream or a reset: the connection was closed.
    Closed,
    /// Nothing at all.
    Silence,
}

/// A raw client connection.
struct Client(TcpStream);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, PROMPTLY)
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Client(stream)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).expect("send");
    }

    /// Sends `bytes` unless the connection is known to be closed (the
    /// write fails): what comes back tells either way.
    fn send_unless_closed(&mut self, bytes: &[u8]) {
        // A failed write means the proxy closed the connection, which the
        // next read reports as `Seen::Closed`.
        let _ = self.0.write_all(bytes);
    }

    /// Reads one reply line, waiting at most `limit`.
    fn line_within(&mut self, limit: Duration) -> Seen {
        let deadline = Instant::now() + limit;
        let mut line = Vec::new();
        let mut byte = [0; 1];
        while !line.ends_with(b"\r\n") {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Seen::Silence;
            }
            self.0.set_read_timeout(Some(left)).expect("set timeout");
            match self.0.read(&mut byte) {
                Ok(0) => return Seen::Closed,
                Ok(_) => line.push(byte[0]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Seen::Silence
                }
                Err(_) => return Seen::Closed,
            }
        }
        Seen::Line(line)
    }

    /// Sends `PING` and returns what came back within `limit`.
    fn ping_within(&mut self, limit: Duration) -> Seen {
        self.send(b"PING\r\n");
        self.line_within(limit)
    }

    #[track_caller]
    fn assert_pong(&mut self) {
        assert_eq!(self.ping_within(PROMPTLY), Seen::Line(PONG.to_vec()));
    }
}

fn refuses_connections(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, PROMPTLY)
        .is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
}

#[test]
fn forwards_commands_and_replies_both_ways() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.addr().port(), proxy.port());
    assert_ne!(proxy.port(), server.port());
    assert_eq!(proxy.target(), server.addr());

    let mut client = Client::connect(proxy.addr());
    client.assert_pong();
    client.send(b"SET through proxy\r\n");
    assert_eq!(
        client.line_within(PROMPTLY),
        Seen::Line(b"+OK\r\n".to_vec())
    );
    assert_eq!(
        server.command(&["GET", "through"]),
        Ok(RespValue::Bulk(b"proxy".to_vec()))
    );
    let mut second = Client::connect(proxy.addr());
    second.assert_pong();
}

#[test]
fn cut_closes_open_connections_and_refuses_new_ones_until_restore_on_the_same_port() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let port = proxy.port();
    let mut open = Client::connect(proxy.addr());
    open.assert_pong();

    proxy.cut();
    assert_eq!(open.line_within(PROMPTLY), Seen::Closed);
    assert!(refuses_connections(proxy.addr()));
    assert!(
        server.command(&["PING"]).is_ok(),
        "the server itself is fine"
    );

    proxy.restore();
    assert_eq!(proxy.port(), port);
    Client::connect(proxy.addr()).assert_pong();

    proxy.cut();
    assert!(
        refuses_connections(proxy.addr()),
        "a second cut refuses too"
    );
    proxy.restore();
    Client::connect(proxy.addr()).assert_pong();
}

#[test]
fn blackhole_swallows_bytes_silently_and_closes_what_it_swallowed_when_it_ends() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut open = Client::connect(proxy.addr());
    open.assert_pong();
    let mut idle = Client::connect(proxy.addr());
    idle.assert_pong();

    proxy.blackhole();
    assert_eq!(open.ping_within(SILENCE), Seen::Silence, "open connection");
    let mut during = Client::connect(proxy.addr());
    assert_eq!(during.ping_within(SILENCE), Seen::Silence, "new connection");

    proxy.restore();
    for (client, which) in [(&mut open, "open"), (&mut during, "new")] {
        client.send_unless_closed(b"ECHO after\r\n");
        let first = client.line_within(PROMPTLY);
        assert_ne!(
            first,
            Seen::Line(b"$5\r\n".to_vec()),
            "the {which} connection read the reply of the ECHO sent after the blackhole where the swallowed PING's belongs"
        );
        // The PING's own reply only if the proxy had not yet read it when
        // the blackhole ended (a starved pump): then nothing was dropped.
        if first != Seen::Line(PONG.to_vec()) {
            assert_eq!(
                first,
                Seen::Closed,
                "the {which} connection, whose PING was dropped"
            );
        }
    }
    idle.assert_pong();
    Client::connect(proxy.addr()).assert_pong();
}

/// The pitfall of a proxy that drops bytes and then resumes the same
/// connection: a pipelined client (RESP pairs replies with requests by
/// their order) reads the reply to its next request as the reply to the
/// dropped one. Here `GET a` is swallowed and `GET b` sent once the
/// blackhole ends: the first reply must be `a`'s value or the end of the
/// connection, never `b`'s. The same for a blackhole that ends in a delay.
#[test]
fn pipelined_client_never_reads_another_commands_reply_after_a_blackhole() {
    let server = RedisServer::start();
    for key in ["a", "b"] {
        server
            .command(&["SET", key, &format!("value-of-{key}")])
            .expect("SET");
    }
    let proxy = FaultProxy::start(server.addr());
    for end in ["restore", "delay"] {
        let mut client = Client::connect(proxy.addr());
        client.assert_pong();
        proxy.blackhole();
        client.send(b"GET a\r\n");
        assert_eq!(client.line_within(SILENCE), Seen::Silence, "{end}");
        match end {
            "restore" => proxy.restore(),
            _ => proxy.delay(Duration::from_millis(10)),
        }
        client.send_unless_closed(b"GET b\r\n");
        let mut replies = Vec::new();
        while let Seen::Line(line) = client.line_within(PROMPTLY) {
            replies.push(String::from_utf8_lossy(&line).into_owned());
            if replies.len() == 4 {
                break;
            }
        }
        let answers: Vec<&String> = replies.iter().filter(|r| r.starts_with("value")).collect();
        assert!(
            answers
                .first()
                .is_none_or(|first| first.as_str() == "value-of-a\r\n"),
            "after a blackhole that ended in {end}, the first reply was {replies:?}"
        );
        proxy.restore();
    }
}

#[test]
fn delay_holds_back_each_direction_and_keeps_order() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut client = Client::connect(proxy.addr());
    client.assert_pong();
    let delay = Duration::from_millis(200);

    proxy.delay(delay);
    let sent = Instant::now();
    client.assert_pong();
    let round_trip = sent.elapsed();
    assert!(
        round_trip >= 2 * delay,
        "a round trip took {round_trip:?}, less than twice the {delay:?} delay"
    );

    for value in ["1", "2", "3"] {
        client.send(format!("ECHO {value}\r\n").as_bytes());
    }
    for value in ["1", "2", "3"] {
        let expected = format!("${}\r\n", value.len()).into_bytes();
        assert_eq!(client.line_within(PROMPTLY), Seen::Line(expected));
        assert_eq!(
            client.line_within(PROMPTLY),
            Seen::Line(format!("{value}\r\n").into_bytes())
        );
    }

    proxy.restore();
    Client::connect(proxy.addr()).assert_pong();
}

#[test]
fn reset_connections_closes_open_ones_and_accepts_new_ones() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut open = Client::connect(proxy.addr());
    open.assert_pong();

    proxy.reset_connections();
    assert_eq!(open.line_within(PROMPTLY), Seen::Closed);
    Client::connect(proxy.addr()).assert_pong();
}

#[test]
fn leaving_a_cut_for_another_fault_listens_again() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    proxy.cut();
    proxy.blackhole();
    let mut client = Client::connect(proxy.addr());
    assert_eq!(client.ping_within(SILENCE), Seen::Silence);
    proxy.cut();
    proxy.delay(Duration::from_millis(10));
    Client::connect(proxy.addr()).assert_pong();
}

#[test]
fn closing_either_side_closes_the_other() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut client = Client::connect(proxy.addr());
    client.send(b"CLIENT SETNAME via-proxy\r\n");
    assert_eq!(
        client.line_within(PROMPTLY),
        Seen::Line(b"+OK\r\n".to_vec())
    );
    let named = |server: &RedisServer| {
        let clients = server.command(&["CLIENT", "LIST"]).expect("CLIENT LIST");
        clients.as_str().unwrap_or_default().contains("via-proxy")
    };
    assert!(named(&server));
    drop(client);
    let server_side_closed = poll_until(PROMPTLY, || !named(&server));
    assert!(
        server_side_closed,
        "the server still has the client's connection"
    );

    let mut client = Client::connect(proxy.addr());
    client.assert_pong();
    server.kill();
    assert_eq!(client.line_within(PROMPTLY), Seen::Closed, "server gone");
}

#[test]
fn dropping_the_proxy_closes_its_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut open = Client::connect(proxy.addr());
    open.assert_pong();
    let dropped = Instant::now();
    drop(proxy);
    assert!(
        dropped.elapsed() < PROMPTLY,
        "drop must not wait for the connection's peers"
    );
    assert_eq!(open.line_within(PROMPTLY), Seen::Closed);
}
