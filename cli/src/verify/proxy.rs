//! The fault proxy of a `verify` worker: a loopback TCP relay in front of
//! one node, which the worker's managers reach the node through, so faults
//! need no rights on the servers. It passes bytes, delays them (in order),
//! swallows them (a blackhole), refuses connections (closing each at once,
//! as a node that went down), or resets every connection; the end of a
//! blackhole closes the connections it swallowed bytes of, as a network
//! would (TCP resends in order or gives up), so no client ever reads a
//! reply meant for another command.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the bytes it relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Relays them at once.
    Pass,
    /// Relays each chunk after this long, in order.
    Delay(Duration),
    /// Drops them.
    Blackhole,
    /// Closes every connection, and each new one at once.
    Refuse,
}

/// A relay from a loopback port to one node; dropped, it stops accepting.
pub struct Proxy {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    /// Bumped to close every open connection.
    generation: watch::Sender<u64>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts relaying connections to `upstream` from a free loopback port.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let (generation, _) = watch::channel(0);
        let accepting = {
            let (mode, generation) = (Arc::clone(&mode), generation.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *mode.lock().unwrap_or_else(PoisonError::into_inner) == Mode::Refuse {
                        drop(client);
                        continue;
                    }
                    let (mode, closed) = (Arc::clone(&mode), generation.subscribe());
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(upstream).await {
                            relay(client, server, mode, closed).await;
                        }
                    });
                }
            })
        };
        Ok(Proxy {
            port,
            mode,
            generation,
            accepting,
        })
    }

    /// The loopback port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Relays as `mode` says from now on; refusing, and leaving a
    /// blackhole, close every connection (see the module's documentation).
    pub fn set(&self, mode: Mode) {
        let previous = std::mem::replace(
            &mut *self.mode.lock().unwrap_or_else(PoisonError::into_inner),
            mode,
        );
        if mode == Mode::Refuse || (previous == Mode::Blackhole && mode != Mode::Blackhole) {
            self.reset();
        }
    }

    /// Closes every open connection; new ones are relayed as before.
    pub fn reset(&self) {
        self.generation.send_modify(|generation| *generation += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.reset();
    }
}

/// Relays between `client` and `server` until either closes or the
/// generation changes.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    mode: Arc<Mutex<Mode>>,
    mut closed: watch::Receiver<u64>,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, Arc::clone(&mode));
    let down = pump(server_read, client_write, mode);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = closed.changed() => {}
    }
}

/// Copies `from` into `to` as the mode says, until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<Mutex<Mode>>,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let now = *mode.lock().unwrap_or_else(PoisonError::into_inner);
        match now {
            Mode::Blackhole => continue,
            Mode::Refuse => return,
            Mode::Delay(delay) => tokio::time::sleep(delay).await,
            Mode::Pass => {}
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(bytes).await?;
        let mut got = vec![0; bytes.len()];
        tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut got))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok(got)
    }

    #[tokio::test]
    async fn relays_then_swallows_then_closes_what_it_swallowed() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut stream, b"one").await.unwrap(), b"one");
        proxy.set(Mode::Blackhole);
        assert!(round_trip(&mut stream, b"two").await.is_err());
        proxy.set(Mode::Pass);
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the swallowed connection is closed"
        );
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut fresh, b"three").await.unwrap(), b"three");
    }
}
