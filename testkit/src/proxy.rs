//! [`FaultProxy`]: a loopback TCP proxy in front of one server whose network
//! faults (cut, blackhole, delay) a test switches at any time.
//!
//! One acceptor thread polls a non-blocking listener; every proxied
//! connection has one pump thread per direction. Every blocking call is
//! bounded by [`TICK`] or a timeout, so all threads notice a closed
//! connection or a dropped proxy within a few milliseconds.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::ports::PortReservation;
use crate::process::{self, addr, START_TIMEOUT};

/// Longest pause of any proxy thread between two looks at its stop condition.
const TICK: Duration = Duration::from_millis(5);
/// Bound on connecting to the target for one accepted connection.
const TARGET_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on one write to a peer that does not read; the connection is closed after it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes read at most in one chunk.
const CHUNK: usize = 16 * 1024;
/// Ports tried at most when [`FaultProxy::start`] loses the race for a free one.
const MAX_BIND_ATTEMPTS: usize = 5;

/// What the proxy currently does with connections and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Cut,
    Blackhole,
    Delay(Duration),
}

/// A TCP proxy on a free `127.0.0.1` port that forwards every connection to
/// one target, and injects network faults on command.
///
/// Each accepted connection gets its own connection to the target and bytes
/// are copied both ways as they arrive. The fault methods take effect at once
/// for connections already open *and* for new ones, and can be called in any
/// order, any number of times:
///
/// | method | open connections | new connections | bytes |
/// | --- | --- | --- | --- |
/// | [`restore`](Self::restore) | kept | accepted | forwarded at once |
/// | [`cut`](Self::cut) | closed | refused | — |
/// | [`blackhole`](Self::blackhole) | kept while it lasts; those it dropped bytes of are closed when it ends | accepted | dropped silently |
/// | [`delay`](Self::delay) | kept | accepted | forwarded after `d` |
/// | [`reset_connections`](Self::reset_connections) | closed | (mode unchanged) | (mode unchanged) |
///
/// When either peer closes its end (or its socket fails), the proxy closes
/// the other end too, in every mode, after delivering the bytes that were
/// still waiting out a [`delay`](Self::delay). If the target refuses a
/// connection, the accepted one is closed at once.
///
/// Dropping the proxy closes its listener and every connection on both
/// sides and joins all its threads; it returns within milliseconds.
#[must_use = "the proxy stops as soon as it is dropped"]
pub struct FaultProxy {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    port: PortReservation,
}

impl FaultProxy {
    /// Starts a proxy forwarding to `target` on a free loopback port, which
    /// no [`RedisServer`](crate::RedisServer) of this process will take while
    /// the proxy lives. Returns once the port accepts connections.
    ///
    /// Panics if no port can be bound after 5 tries or the acceptor thread
    /// cannot be spawned.
    #[track_caller]
    pub fn start(target: SocketAddr) -> FaultProxy {
        let (port, listener) = bind_free_port()
            .unwrap_or_else(|e| panic!("cannot start a fault proxy for {target}: {e}"));
        let shared = Arc::new(Shared {
            target,
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                mode: Mode::Forward,
                listener: Some(listener),
                links: HashMap::new(),
                next_id: 0,
                generation: 0,
            }),
            pumps: Mutex::new(Vec::new()),
        });
        let acceptor = thread::Builder::new()
            .name(format!("fault-proxy-{}", port.port()))
            .spawn({
                let shared = Arc::clone(&shared);
                move || shared.accept_loop()
            })
            .unwrap_or_else(|e| panic!("cannot spawn the fault proxy's thread: {e}"));
        FaultProxy {
            shared,
            acceptor: Some(acceptor),
            port,
        }
    }

    /// `redis://127.0.0.1:PORT`, the proxy's own address; unchanged by every
    /// fault, [`cut`](Self::cut) included.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        addr(self.port())
    }

    /// The port clients connect to, fixed for the proxy's whole life.
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The address every connection is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Takes the proxy off the network until [`restore`](Self::restore) (or
    /// [`blackhole`](Self::blackhole), [`delay`](Self::delay)).
    ///
    /// When this returns, every open connection has been shut down on both
    /// sides (each peer reads end-of-stream, and bytes still waiting out a
    /// delay are dropped), and the listening socket is closed, so a new
    /// `connect` to [`port`](Self::port) fails at once with "connection
    /// refused".
    pub fn cut(&self) {
        let mut state = self.shared.state();
        state.mode = Mode::Cut;
        state.listener = None;
        state.close_links();
    }

    /// Makes the proxy a silent partition until another mode is chosen.
    ///
    /// Open connections stay open and new ones are accepted (and connected to
    /// the target), but every byte read from either side afterwards is
    /// discarded, as are bytes still waiting out a delay: nothing is buffered
    /// to be delivered later, and neither peer gets an error or
    /// end-of-stream, so they only notice through their own timeouts.
    ///
    /// When the blackhole ends (any other mode), every connection it dropped
    /// bytes of is closed on both sides, as [`cut`](Self::cut) closes them;
    /// those it dropped nothing of (idle throughout) carry bytes again. No
    /// network resumes a TCP connection with bytes missing from its middle:
    /// TCP delivers them late and in order, or the connection dies. Resuming
    /// would shift every later reply of a pipelined client (RESP matches
    /// replies to requests by order) onto the wrong request; a closed
    /// connection makes it fail its requests in flight and connect again.
    ///
    /// Panics, like [`restore`](Self::restore), if it ends a [`cut`](Self::cut)
    /// and the port cannot be bound again.
    #[track_caller]
    pub fn blackhole(&self) {
        self.shared.set_mode(Mode::Blackhole, self.port());
    }

    /// Forwards every chunk of bytes `d` after the proxy read it, in each
    /// direction (so a request-reply round trip takes at least `2 * d`), in
    /// the order read. Open connections stay open and new ones are accepted.
    ///
    /// Each chunk keeps the delay in force when it was read: chunks already
    /// waiting when the mode changes are delivered at their original time
    /// (dropped by [`blackhole`](Self::blackhole) and [`cut`](Self::cut)),
    /// and later chunks never overtake them.
    ///
    /// Panics, like [`restore`](Self::restore), if it ends a [`cut`](Self::cut)
    /// and the port cannot be bound again.
    #[track_caller]
    pub fn delay(&self, d: Duration) {
        self.shared.set_mode(Mode::Delay(d), self.port());
    }

    /// Back to plain forwarding: open connections carry bytes again at once
    /// (after a [`blackhole`](Self::blackhole), those it dropped bytes of are
    /// closed instead) and new ones are accepted. After [`cut`](Self::cut)
    /// the proxy listens again on the same port, ready for `connect` when
    /// this returns.
    ///
    /// Panics if that port cannot be bound again within 10 s (another
    /// process took it during the cut).
    #[track_caller]
    pub fn restore(&self) {
        self.shared.set_mode(Mode::Forward, self.port());
    }

    /// Shuts down every open connection on both sides, as [`cut`](Self::cut)
    /// does, but keeps the current mode, so new connections are accepted
    /// (unless the proxy is cut).
    pub fn reset_connections(&self) {
        self.shared.state().close_links();
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr())
            .field("target", &self.shared.target)
            .field("mode", &self.shared.mode())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // A panicked acceptor has nothing left to clean up.
            let _ = acceptor.join();
        }
        {
            let mut state = self.shared.state();
            state.listener = None;
            state.close_links();
        }
        let pumps = std::mem::take(&mut *self.shared.pumps());
        for pump in pumps {
            let _ = pump.join();
        }
    }
}

/// State shared by the proxy handle and its threads.
struct Shared {
    target: SocketAddr,
    /// Set once by drop: the acceptor stops.
    stop: AtomicBool,
    state: Mutex<State>,
    /// Pump threads not yet known to have finished.
    pumps: Mutex<Vec<JoinHandle<()>>>,
}

/// The mode, the listener and the open connections, changed together under one lock.
struct State {
    mode: Mode,
    /// `None` exactly while cut (or after drop).
    listener: Option<TcpListener>,
    links: HashMap<u64, Arc<Link>>,
    next_id: u64,
    /// Bumped whenever open connections are closed, so that one accepted
    /// before but registered after is closed too.
    generation: u64,
}

impl State {
    fn close_links(&mut self) {
        self.generation += 1;
        for (_, link) in self.links.drain() {
            link.close();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pumps(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.pumps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mode(&self) -> Mode {
        self.state().mode
    }

    /// Switches to `mode`, listening on `port` again if the proxy was cut,
    /// and closing the connections a blackhole that ends dropped bytes of.
    #[track_caller]
    fn set_mode(&self, mode: Mode, port: u16) {
        let mut state = self.state();
        if state.listener.is_none() {
            let listener = process::poll(START_TIMEOUT, || bind(port).ok()).unwrap_or_else(|| {
                panic!("fault proxy cannot listen on port {port} again within {START_TIMEOUT:?}")
            });
            state.listener = Some(listener);
        }
        if state.mode == Mode::Blackhole && mode != Mode::Blackhole {
            state.links.retain(|_, link| {
                if link.swallowed.load(Ordering::SeqCst) {
                    link.close();
                }
                !link.is_closed()
            });
        }
        state.mode = mode;
    }

    /// How long bytes of `link` read now wait before they are delivered;
    /// `None` when they are dropped, in which case a blackhole marks the
    /// link, under the same lock as it reads the mode, so that the end of
    /// the blackhole closes it.
    fn admit(&self, link: &Link) -> Option<Duration> {
        match self.state().mode {
            Mode::Forward => Some(Duration::ZERO),
            Mode::Delay(d) => Some(d),
            Mode::Blackhole => {
                link.swallowed.store(true, Ordering::SeqCst);
                None
            }
            Mode::Cut => None,
        }
    }

    /// Accepts connections until the proxy is dropped.
    fn accept_loop(self: Arc<Self>) {
        while !self.stop.load(Ordering::SeqCst) {
            match self.accept_one() {
                Some((client, generation)) => self.open_link(client, generation),
                None => thread::sleep(TICK),
            }
        }
    }

    /// One pending connection and the generation it was accepted in, if any.
    fn accept_one(&self) -> Option<(TcpStream, u64)> {
        let state = self.state();
        let (client, _) = state.listener.as_ref()?.accept().ok()?;
        Some((client, state.generation))
    }

    /// Connects `client` to the target and starts its two pumps, unless the
    /// connections of `generation` were closed meanwhile.
    fn open_link(self: &Arc<Self>, client: TcpStream, generation: u64) {
        let Ok(server) = TcpStream::connect_timeout(&self.target, TARGET_CONNECT_TIMEOUT) else {
            return;
        };
        let Ok(link) = Link::new(client, server) else {
            return;
        };
        let link = Arc::new(link);
        let id = {
            let mut state = self.state();
            if state.generation != generation {
                return;
            }
            let id = state.next_id;
            state.next_id += 1;
            state.links.insert(id, Arc::clone(&link));
            id
        };
        let mut pumps = self.pumps();
        pumps.retain(|pump| !pump.is_finished());
        for upstream in [true, false] {
            match self.pump(&link, id, upstream) {
                Ok(handle) => pumps.push(handle),
                Err(_) => {
                    link.close();
                    return;
                }
            }
        }
    }

    /// Spawns the thread copying client → target (`upstream`) or target → client.
    fn pump(
        self: &Arc<Self>,
        link: &Arc<Link>,
        id: u64,
        upstream: bool,
    ) -> io::Result<JoinHandle<()>> {
        let (from, to) = if upstream {
            (&link.client, &link.server)
        } else {
            (&link.server, &link.client)
        };
        let pump = Pump {
            shared: Arc::clone(self),
            link: Arc::clone(link),
            id,
            from: from.try_clone()?,
            to: to.try_clone()?,
            queue: VecDeque::new(),
        };
        thread::Builder::new()
            .name(format!("fault-proxy-pump-{id}"))
            .spawn(move || pump.run())
    }

    fn forget(&self, id: u64) {
        self.state().links.remove(&id);
    }
}

/// The two sockets of one proxied connection.
struct Link {
    client: TcpStream,
    server: TcpStream,
    closed: AtomicBool,
    /// Whether a blackhole dropped bytes of it (either way): closed when the
    /// blackhole ends.
    swallowed: AtomicBool,
}

impl Link {
    fn new(client: TcpStream, server: TcpStream) -> io::Result<Link> {
        for stream in [&client, &server] {
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        }
        Ok(Link {
            client,
            server,
            closed: AtomicBool::new(false),
            swallowed: AtomicBool::new(false),
        })
    }

    /// Shuts both sockets down both ways; blocked reads and writes on them
    /// return at once and both peers read end-of-stream.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Fails only if the socket is already disconnected: nothing to do then.
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// Copies one direction of one connection, applying the current mode.
struct Pump {
    shared: Arc<Shared>,
    link: Arc<Link>,
    id: u64,
    from: TcpStream,
    to: TcpStream,
    /// Chunks read and not yet written, with the instant each is due.
    queue: VecDeque<(Instant, Vec<u8>)>,
}

impl Pump {
    /// Runs until the link is closed, or `from` ended and every queued chunk
    /// was delivered; then closes the link.
    fn run(mut self) {
        let mut buf = vec![0; CHUNK];
        let mut source_open = true;
        while !self.link.is_closed() && (source_open || !self.queue.is_empty()) {
            let wait = self.until_next_due();
            if source_open {
                source_open = self.read_chunk(&mut buf, wait);
            } else {
                thread::sleep(wait);
            }
            if self.deliver_due().is_err() {
                break;
            }
        }
        self.link.close();
        self.shared.forget(self.id);
    }

    /// How long to wait for bytes before the next queued chunk is due, at
    /// least 1 ms and at most [`TICK`].
    fn until_next_due(&self) -> Duration {
        let until = self.queue.front().map_or(TICK, |(due, _)| {
            due.saturating_duration_since(Instant::now())
        });
        until.clamp(Duration::from_millis(1), TICK)
    }

    /// Reads one chunk within `wait` and queues it as the mode says; returns
    /// whether `from` is still open.
    fn read_chunk(&mut self, buf: &mut [u8], wait: Duration) -> bool {
        if self.from.set_read_timeout(Some(wait)).is_err() {
            return false;
        }
        let read = match self.from.read(buf) {
            Ok(0) => return false,
            Ok(read) => read,
            Err(e) if is_idle(&e) => return true,
            Err(_) => return false,
        };
        let now = Instant::now();
        if let Some(delay) = self.shared.admit(&self.link) {
            self.queue.push_back((now + delay, buf[..read].to_vec()));
        }
        true
    }

    /// Writes every queued chunk that is due, in order; drops them all while
    /// blackholed. `Err` when the peer cannot take them.
    fn deliver_due(&mut self) -> io::Result<()> {
        if self.queue.is_empty() {
            return Ok(());
        }
        if self.shared.admit(&self.link).is_none() {
            self.queue.clear();
            return Ok(());
        }
        let now = Instant::now();
        while self.queue.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, chunk)) = self.queue.pop_front() {
                self.to.write_all(&chunk)?;
            }
        }
        Ok(())
    }
}

/// Whether a read error only means that no bytes came in time.
fn is_idle(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// A non-blocking listener on loopback `port`.
fn bind(port: u16) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr(port))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A reserved free port and a listener on it. The port is one the kernel
/// never hands out for port 0 (see [`PortReservation::unassignable`]): a
/// cut closes the listener, and another process binding port 0 meanwhile
/// must not be given it, or the cut proxy would seem to accept connections
/// and could not listen again on restore.
fn bind_free_port() -> Result<(PortReservation, TcpListener), String> {
    let mut last = String::new();
    for _ in 0..MAX_BIND_ATTEMPTS {
        let port = PortReservation::unassignable().map_err(|e| format!("{e:?}"))?;
        match bind(port.port()) {
            Ok(listener) => return Ok((port, listener)),
            Err(e) => last = format!("binding port {}: {e}", port.port()),
        }
    }
    Err(format!(
        "gave up after {MAX_BIND_ATTEMPTS} ports; last: {last}"
    ))
}
