//! [`FaultProxy`]: an in-process TCP proxy that injects network faults between
//! clients and one node, and [`ProxiedCluster`]: a [`RedisCluster`] with one
//! proxy in front of each node.

use std::collections::HashMap;
use std::fmt;
use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rand::Rng;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::cluster::{NodeOptions, NodeState, RedisCluster, RedisProcess, TestkitError};

/// How long the proxy waits to connect to its upstream before resetting the client.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long fault changes that must be confirmed (listener closed or reopened,
/// connections ended) may take.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long re-opening the listening port is retried before giving up (where
/// it has to be bound anew).
#[cfg(not(target_os = "linux"))]
const REBIND_BUDGET: Duration = Duration::from_secs(2);
/// The listening socket's backlog.
const LISTEN_BACKLOG: u32 = 1024;
/// For [`ResetWhen::AfterForwarding`]: how long to wait for the node's reply
/// before resetting anyway.
const REPLY_WAIT: Duration = Duration::from_secs(1);
/// How long a restarted node may take to load its data.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read per chunk.
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction (read but not yet delivered) before reading pauses.
const QUEUE: usize = 256;
/// Patterns are found across chunk boundaries when at most this long.
const MAX_PATTERN: usize = 1024;

/// A direction of traffic through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to node: requests.
    ToServer,
    /// Node to client: replies.
    ToClient,
    /// Both directions.
    Both,
}

impl Direction {
    fn indices(self) -> &'static [usize] {
        match self {
            Direction::ToServer => &[UP],
            Direction::ToClient => &[DOWN],
            Direction::Both => &[UP, DOWN],
        }
    }
}

/// Index of the client-to-node direction in per-direction arrays.
const UP: usize = 0;
/// Index of the node-to-client direction in per-direction arrays.
const DOWN: usize = 1;

/// When a [`reset_on`](FaultProxy::reset_on) rule resets the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResetWhen {
    /// As soon as the pattern is read from the client, without forwarding the
    /// chunk that holds it: the node never runs the command.
    BeforeForwarding,
    /// After forwarding the chunk and seeing the node's reply (or after 1 s),
    /// which is not delivered: the node ran the command, the client never
    /// learns the outcome. The node's side of the connection is closed
    /// normally, so the node finishes every command it received.
    AfterForwarding,
}

/// A delay applied to every chunk of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Latency {
    delay: Duration,
    jitter: Duration,
}

impl Latency {
    fn sample(&self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let jitter_nanos = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let extra = rand::rng().random_range(0..=jitter_nanos);
        self.delay.saturating_add(Duration::from_nanos(extra))
    }
}

/// A pending [`reset_on`](FaultProxy::reset_on) rule.
#[derive(Clone, Debug)]
struct Rule {
    pattern: Vec<u8>,
    when: ResetWhen,
}

/// The fault settings, read by every task before each chunk.
#[derive(Clone, Debug, Default)]
struct Faults {
    latency: [Latency; 2],
    blackhole: bool,
    refuse_new: bool,
    rules: Vec<Rule>,
    /// Bumped by `reset_all`: connections born under an older value are reset.
    reset_epoch: u64,
    /// Bumped by `close_all`: connections born under an older value are closed.
    close_epoch: u64,
    /// Bumped by `strand_open`: connections born under an older value never deliver again.
    strand_epoch: u64,
}

/// What the accept loop is doing with the listening socket.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Listening {
    Open,
    Closed,
    Failed(String),
}

/// A pattern counter; see [`FaultProxy::tap`].
#[derive(Debug)]
struct TapInner {
    pattern: Vec<u8>,
    count: AtomicUsize,
}

/// State shared by the proxy handle and its tasks.
struct Shared {
    upstream: SocketAddr,
    faults: watch::Sender<Faults>,
    listening: watch::Sender<Listening>,
    /// Open connections and the reset and close epochs they were born under.
    live: Mutex<HashMap<u64, (u64, u64)>>,
    next_id: AtomicU64,
    accepted: AtomicUsize,
    resets: AtomicUsize,
    taps: Mutex<Vec<Weak<TapInner>>>,
}

impl Shared {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, (u64, u64)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn taps(&self) -> Vec<Arc<TapInner>> {
        let mut taps = self.taps.lock().unwrap_or_else(PoisonError::into_inner);
        taps.retain(|tap| tap.strong_count() > 0);
        taps.iter().filter_map(Weak::upgrade).collect()
    }
}

/// Counts how often a byte pattern was forwarded from clients to the node;
/// made by [`FaultProxy::tap`].
#[derive(Clone, Debug)]
pub struct Tap {
    inner: Arc<TapInner>,
}

impl Tap {
    /// How many times the pattern was delivered to the node so far.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::SeqCst)
    }
}

/// A fault-injecting TCP proxy on `127.0.0.1`, in front of one upstream
/// address (typically one Redis node).
///
/// The proxy forwards bytes unchanged and in order, chunk by chunk, each
/// accepted connection over its own connection to the upstream. Before each
/// chunk it reads the current fault settings, so a fault set at any moment
/// applies at once to new *and* open connections:
///
/// | fault | what a client sees |
/// |---|---|
/// | [`set_latency`](Self::set_latency) | every chunk delayed (fixed plus random jitter), per direction; order is kept |
/// | [`blackhole`](Self::blackhole) | connections accepted and requests read, but nothing delivered either way: requests hang |
/// | [`refuse_new`](Self::refuse_new) | the listening socket stops listening: new connections are refused (`ECONNREFUSED`) |
/// | [`reset_all`](Self::reset_all) / [`close_all`](Self::close_all) | open connections end with a TCP reset (`RST`) / a normal close (`FIN`) |
/// | [`reset_on`](Self::reset_on) | the next connection whose client sends a pattern is reset, before forwarding it or after the node answered |
/// | [`partition`](Self::partition) | new connections refused and open ones reset: the node looks down |
/// | [`strand_open`](Self::strand_open) | open connections go silent for good, never closed (a forgotten NAT entry); new ones work |
/// | upstream down | a new connection is accepted, then reset at once |
///
/// [`heal`](Self::heal) removes every fault but stranding. Data held by a blackhole or a
/// latency is delivered, in order, once the fault is lifted, as TCP would
/// after a healed partition. Nothing is ever dropped from the middle of a
/// stream (that would make a Redis client match replies to the wrong
/// requests): data is lost only together with its connection.
///
/// All traffic stays on `127.0.0.1`. The proxy's tasks run on the tokio
/// runtime that started it, and are aborted, with every connection they
/// carry, when this value is dropped.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::testkit::{Direction, FaultProxy, RedisCluster};
///
/// # async fn demo() -> Result<(), quorumlock::testkit::TestkitError> {
/// let cluster = RedisCluster::start(1).await?;
/// let upstream = ([127, 0, 0, 1], cluster.node(0).port()).into();
/// let proxy = FaultProxy::start(upstream).await?;
/// let url = proxy.url(); // give this to the client under test
///
/// proxy.set_latency(Direction::Both, Duration::from_millis(20), Duration::from_millis(5));
/// proxy.blackhole(true); // requests now hang ...
/// proxy.heal().await?; // ... and are answered, in order, from here on
/// proxy.partition().await?; // new connections refused, open ones reset
/// proxy.heal().await?;
/// # let _ = url;
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("faults", &*self.shared.faults.borrow())
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1` (a free port) forwarding to `upstream`.
    ///
    /// Must be called inside a tokio runtime; the upstream need not be up yet
    /// (a client connecting while it is down is reset).
    pub async fn start(upstream: SocketAddr) -> Result<FaultProxy, TestkitError> {
        let listener = bind_listener().await?;
        let addr = listener.local_addr()?;
        let (faults, _) = watch::channel(Faults::default());
        let (listening, _) = watch::channel(Listening::Open);
        let shared = Arc::new(Shared {
            upstream,
            faults,
            listening,
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            accepted: AtomicUsize::new(0),
            resets: AtomicUsize::new(0),
            taps: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(accept_loop(listener, addr, Arc::clone(&shared)));
        Ok(FaultProxy { addr, shared, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// `redis://127.0.0.1:PORT`, the proxy's address as a Redis URL (without
    /// credentials; [`ProxiedCluster::urls`] adds a node's password).
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Delays every chunk in `direction` by `delay` plus a uniformly random
    /// extra in `[0, jitter]`, keeping the order of the bytes. Applies to
    /// chunks read from now on, on new and open connections;
    /// `Duration::ZERO` for both removes the latency.
    pub fn set_latency(&self, direction: Direction, delay: Duration, jitter: Duration) {
        self.shared.faults.send_modify(|faults| {
            for &i in direction.indices() {
                faults.latency[i] = Latency { delay, jitter };
            }
        });
    }

    /// While on, connections are accepted and requests read, but nothing is
    /// delivered in either direction: the node looks alive but never answers.
    /// Held data is delivered in order once the blackhole is lifted.
    pub fn blackhole(&self, on: bool) {
        self.shared.faults.send_if_modified(|faults| {
            let changed = faults.blackhole != on;
            faults.blackhole = on;
            changed
        });
    }

    /// Strands every connection open now: from now on it delivers nothing, either way,
    /// and is never closed, as after a NAT gateway or a firewall forgot it (data sent on
    /// it is lost). New connections work as usual; [`heal`](Self::heal) does not revive
    /// stranded ones.
    pub fn strand_open(&self) {
        self.shared
            .faults
            .send_modify(|faults| faults.strand_epoch += 1);
    }

    /// While on, the listening socket stops listening, so new connections are
    /// refused (`ECONNREFUSED`) as if nothing listened; open connections are
    /// left alone. Returns once the socket is closed or open again.
    ///
    /// On Linux the socket stays bound meanwhile, so no other socket can take
    /// the port. Elsewhere it is closed and bound again, which fails (with an
    /// error) if another socket took the port in the meantime.
    pub async fn refuse_new(&self, on: bool) -> Result<(), TestkitError> {
        self.shared.faults.send_if_modified(|faults| {
            let changed = faults.refuse_new != on;
            faults.refuse_new = on;
            changed
        });
        let want = if on {
            Listening::Closed
        } else {
            Listening::Open
        };
        let mut listening = self.shared.listening.subscribe();
        let outcome = tokio::time::timeout(
            CONFIRM_TIMEOUT,
            listening.wait_for(|state| *state == want || matches!(state, Listening::Failed(_))),
        )
        .await;
        match outcome {
            Ok(Ok(state)) => match &*state {
                Listening::Failed(reason) => Err(TestkitError::Io(io::Error::other(format!(
                    "proxy {} could not listen again: {reason}",
                    self.addr
                )))),
                _ => Ok(()),
            },
            Ok(Err(_)) => Err(self.stopped()),
            Err(_) => Err(self.timeout("refuse_new")),
        }
    }

    /// Ends every open connection with a TCP reset (`SO_LINGER` 0, then
    /// close), on both sides. Returns once they are all gone; connections
    /// opened afterwards are not affected.
    pub async fn reset_all(&self) -> Result<(), TestkitError> {
        let mut epoch = 0;
        self.shared.faults.send_modify(|faults| {
            faults.reset_epoch += 1;
            epoch = faults.reset_epoch;
        });
        self.wait_until_gone(|(reset, _)| reset < epoch, "reset_all")
            .await
    }

    /// Ends every open connection with a normal close (`FIN`), on both sides,
    /// as a node or a middlebox dropping idle connections would. Returns once
    /// they are all gone.
    pub async fn close_all(&self) -> Result<(), TestkitError> {
        let mut epoch = 0;
        self.shared.faults.send_modify(|faults| {
            faults.close_epoch += 1;
            epoch = faults.close_epoch;
        });
        self.wait_until_gone(|(_, close)| close < epoch, "close_all")
            .await
    }

    /// Resets the next connection whose client sends `pattern` (one time;
    /// call again for more), at the point given by `when`. Rules apply to
    /// open and new connections and are removed by [`heal`](Self::heal).
    ///
    /// Patterns up to 1 KiB are found even when split across reads.
    pub fn reset_on(&self, pattern: impl Into<Vec<u8>>, when: ResetWhen) {
        let pattern = pattern.into();
        self.shared.faults.send_modify(|faults| {
            faults.rules.push(Rule { pattern, when });
        });
    }

    /// Makes the node unreachable through this proxy: refuses new
    /// connections and resets the open ones (a crashed node or a firewall
    /// rejecting packets). Undone by [`heal`](Self::heal) or
    /// `refuse_new(false)`.
    pub async fn partition(&self) -> Result<(), TestkitError> {
        self.refuse_new(true).await?;
        self.reset_all().await
    }

    /// Removes every fault: no latency, no blackhole, no pending reset rules,
    /// new connections accepted again. Data held by a latency or a blackhole
    /// is delivered in order.
    pub async fn heal(&self) -> Result<(), TestkitError> {
        self.shared.faults.send_modify(|faults| {
            faults.latency = [Latency::default(); 2];
            faults.blackhole = false;
            faults.rules.clear();
        });
        self.refuse_new(false).await
    }

    /// Counts, from now on, how many times `pattern` is delivered from
    /// clients to the node (for example a resource name, to see which
    /// commands about it reached the node). Patterns up to 1 KiB are counted
    /// even when split across reads.
    pub fn tap(&self, pattern: impl Into<Vec<u8>>) -> Tap {
        let inner = Arc::new(TapInner {
            pattern: pattern.into(),
            count: AtomicUsize::new(0),
        });
        self.shared
            .taps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&inner));
        Tap { inner }
    }

    /// How many client connections the proxy accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// How many connections are open now.
    pub fn open_connections(&self) -> usize {
        self.shared.live().len()
    }

    /// How many connections the proxy ended with a reset so far (by
    /// [`reset_all`](Self::reset_all), [`reset_on`](Self::reset_on), a
    /// partition, or because the upstream was unreachable or reset).
    pub fn resets(&self) -> usize {
        self.shared.resets.load(Ordering::SeqCst)
    }

    /// Whether any fault is active (latency, blackhole, refusal or a pending
    /// reset rule).
    pub fn is_faulty(&self) -> bool {
        let faults = self.shared.faults.borrow();
        faults.blackhole
            || faults.refuse_new
            || !faults.rules.is_empty()
            || faults.latency.iter().any(|l| *l != Latency::default())
    }

    async fn wait_until_gone(
        &self,
        doomed: impl Fn((u64, u64)) -> bool,
        operation: &'static str,
    ) -> Result<(), TestkitError> {
        let deadline = Instant::now() + CONFIRM_TIMEOUT;
        loop {
            if !self.shared.live().values().any(|&epochs| doomed(epochs)) {
                return Ok(());
            }
            if self.task.is_finished() {
                return Err(self.stopped());
            }
            if Instant::now() >= deadline {
                return Err(self.timeout(operation));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn timeout(&self, operation: &'static str) -> TestkitError {
        TestkitError::Timeout {
            node: format!("proxy {}", self.addr),
            operation,
            timeout: CONFIRM_TIMEOUT,
        }
    }

    fn stopped(&self) -> TestkitError {
        TestkitError::Io(io::Error::other(format!(
            "proxy {} stopped (its runtime shut down?)",
            self.addr
        )))
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept task owns the connection tasks (a JoinSet), so aborting
        // it ends them all.
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------
// Tasks.
// ---------------------------------------------------------------------------

/// Accepts connections while not refusing, closes and re-opens the listening
/// socket as `refuse_new` changes, and owns every connection task.
async fn accept_loop(listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut gate = Gate::Open(listener);
    let mut faults = shared.faults.subscribe();
    let mut connections = JoinSet::new();
    loop {
        let refuse = faults.borrow_and_update().refuse_new;
        gate = match (refuse, gate) {
            (true, Gate::Open(listener)) => match close_gate(listener) {
                Ok(closed) => {
                    shared.listening.send_replace(Listening::Closed);
                    Gate::Closed(closed)
                }
                Err(err) => {
                    shared
                        .listening
                        .send_replace(Listening::Failed(err.to_string()));
                    Gate::Broken
                }
            },
            (false, Gate::Closed(closed)) => match open_gate(closed, addr).await {
                Ok(listener) => {
                    shared.listening.send_replace(Listening::Open);
                    Gate::Open(listener)
                }
                Err(err) => {
                    shared
                        .listening
                        .send_replace(Listening::Failed(err.to_string()));
                    Gate::Broken
                }
            },
            (_, gate) => gate,
        };
        tokio::select! {
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = gate.accept() => match accepted {
                Ok(client) => {
                    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                    let born = {
                        let current = shared.faults.borrow();
                        (current.reset_epoch, current.close_epoch)
                    };
                    shared.live().insert(id, born);
                    shared.accepted.fetch_add(1, Ordering::SeqCst);
                    let live = LiveEntry { shared: Arc::clone(&shared), id };
                    connections.spawn(serve(client, Arc::clone(&shared), born, live));
                }
                // Out of file descriptors and the like: do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The listening socket, open or closed to new connections.
enum Gate {
    /// Accepting.
    Open(TcpListener),
    /// Refusing: see [`close_gate`].
    Closed(ClosedGate),
    /// Closing or re-opening failed (reported through `Listening::Failed`).
    Broken,
}

impl Gate {
    async fn accept(&self) -> io::Result<TcpStream> {
        match self {
            Gate::Open(listener) => listener.accept().await.map(|(stream, _)| stream),
            Gate::Closed(_) | Gate::Broken => pending().await,
        }
    }
}

/// On Linux, a listening socket taken out of the reactor and out of the
/// listening state but still bound, so that no other socket can take its port
/// while connections are refused.
#[cfg(target_os = "linux")]
type ClosedGate = std::net::TcpListener;

/// Elsewhere, nothing: the listening socket is closed, and bound again later.
#[cfg(not(target_os = "linux"))]
type ClosedGate = ();

/// A listening socket on a free port of 127.0.0.1.
///
/// On Linux it is bound to an explicit port with `SO_REUSEPORT` and without
/// `SO_REUSEADDR`: the explicit port survives [`close_gate`] (an automatically
/// chosen one would be released), `SO_REUSEPORT` lets it listen again while
/// its accepted connections are open, and no ordinary socket can bind the port
/// meanwhile.
#[cfg(target_os = "linux")]
async fn bind_listener() -> io::Result<TcpListener> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseport(true)?;
        match socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            // Taken between the probe and the bind: try another port.
            Err(err) if err.kind() == io::ErrorKind::AddrInUse && attempt < 10 => {}
            Err(err) => return Err(err),
        }
    }
}

#[cfg(not(target_os = "linux"))]
async fn bind_listener() -> io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await
}

/// Stops accepting: new connections are refused, open ones are not affected.
///
/// On Linux, `connect(AF_UNSPEC)` on a listening socket takes it out of the
/// listening state without unbinding it. It is taken out of the reactor first:
/// a socket in that state reports a hang-up, which the reactor would remember.
#[cfg(target_os = "linux")]
fn close_gate(listener: TcpListener) -> io::Result<ClosedGate> {
    use std::os::fd::AsRawFd;
    let listener = listener.into_std()?;
    // SAFETY: an all-zero `sockaddr` is a valid value of that plain C struct.
    let mut unspecified: libc::sockaddr = unsafe { std::mem::zeroed() };
    unspecified.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr>())
        .map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `listener`, which is alive, and the
    // address points to a valid `sockaddr` of `len` bytes.
    let rc = unsafe { libc::connect(listener.as_raw_fd(), &unspecified, len) };
    if rc == 0 {
        Ok(listener)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn close_gate(listener: TcpListener) -> io::Result<ClosedGate> {
    drop(listener);
    Ok(())
}

/// Accepts again: `listen` on the same, still bound, socket.
#[cfg(target_os = "linux")]
async fn open_gate(closed: ClosedGate, _addr: SocketAddr) -> io::Result<TcpListener> {
    use std::os::fd::AsRawFd;
    let backlog = libc::c_int::try_from(LISTEN_BACKLOG).map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `closed`, which is alive.
    let rc = unsafe { libc::listen(closed.as_raw_fd(), backlog) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    TcpListener::from_std(closed)
}

/// Accepts again: binds the port anew, retrying briefly while it is still held.
#[cfg(not(target_os = "linux"))]
async fn open_gate(_closed: ClosedGate, addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + REBIND_BUDGET;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(err) if Instant::now() >= deadline => return Err(err),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Removes a connection from the live set when its task ends or is aborted.
struct LiveEntry {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        self.shared.live().remove(&self.id);
    }
}

/// How a connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// A normal close on both sides.
    Close,
    /// A reset to the client; the node's side is reset too unless `graceful_upstream`.
    Reset { graceful_upstream: bool },
}

/// Per-connection state shared by its two directions.
#[derive(Default)]
struct Connection {
    /// The strand epoch the connection was born under.
    born_strand: u64,
    /// Set by an `AfterForwarding` rule: replies are no longer delivered.
    muted: AtomicBool,
    /// Signalled when a reply arrives while muted.
    answered: Notify,
}

async fn serve(client: TcpStream, shared: Arc<Shared>, born: (u64, u64), live: LiveEntry) {
    let _live = live;
    let upstream = match tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        TcpStream::connect(shared.upstream),
    )
    .await
    {
        Ok(Ok(upstream)) => upstream,
        // The node is down or unreachable: the client sees its connection reset.
        _ => {
            abort(&client);
            shared.resets.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);

    let connection = Connection {
        born_strand: shared.faults.borrow().strand_epoch,
        ..Connection::default()
    };
    let end = tokio::select! {
        end = direction(&client, &upstream, UP, &shared, &connection) => end,
        end = direction(&upstream, &client, DOWN, &shared, &connection) => end,
        end = killed(shared.faults.subscribe(), born) => end,
    };
    if let End::Reset { graceful_upstream } = end {
        abort(&client);
        if !graceful_upstream {
            abort(&upstream);
        }
        shared.resets.fetch_add(1, Ordering::SeqCst);
    }
    // Dropping the streams closes them: a reset where SO_LINGER is 0, else a FIN.
}

/// Makes the next close of `stream` send a reset instead of a FIN.
fn abort(stream: &TcpStream) {
    // A zero linger never blocks; `set_zero_linger` is newer than the
    // minimum tokio this crate supports.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Resolves when `reset_all` or `close_all` was called after the connection was born.
async fn killed(mut faults: watch::Receiver<Faults>, born: (u64, u64)) -> End {
    let verdict = match faults
        .wait_for(|f| f.reset_epoch != born.0 || f.close_epoch != born.1)
        .await
    {
        Ok(current) if current.reset_epoch != born.0 => Some(End::Reset {
            graceful_upstream: false,
        }),
        Ok(_) => Some(End::Close),
        Err(_) => None,
    };
    match verdict {
        Some(end) => end,
        // The proxy is going away; its tasks are being aborted.
        None => pending().await,
    }
}

/// A chunk read and not yet delivered.
struct Chunk {
    bytes: Vec<u8>,
    deliver_at: Instant,
    reset_after: bool,
}

/// Forwards one direction until it ends: returns how the connection must end.
async fn direction(
    from: &TcpStream,
    to: &TcpStream,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> End {
    let (tx, rx) = mpsc::channel(QUEUE);
    let reader = read_side(from, tx, dir, shared, connection);
    let writer = write_side(to, rx, dir, shared, connection);
    tokio::pin!(reader, writer);
    tokio::select! {
        end = &mut writer => end,
        stopped = &mut reader => match stopped {
            Some(end) => end,
            // End of stream: deliver what was read, then close.
            None => writer.await,
        },
    }
}

/// Reads chunks and queues them with their delivery time. Returns `None` at
/// the end of the stream, or how the connection must end.
async fn read_side(
    from: &TcpStream,
    tx: mpsc::Sender<Chunk>,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> Option<End> {
    let mut faults = shared.faults.subscribe();
    let mut buf = vec![0; CHUNK];
    let mut tail = Vec::new();
    let mut last_delivery = Instant::now();
    loop {
        let n = match read_some(from, &mut buf).await {
            Ok(0) => return None,
            Ok(n) => n,
            Err(_) => {
                return Some(End::Reset {
                    graceful_upstream: false,
                })
            }
        };
        let bytes = buf[..n].to_vec();
        if dir == DOWN && connection.muted.load(Ordering::SeqCst) {
            // The connection is about to be reset; its replies are lost with it.
            connection.answered.notify_one();
            continue;
        }
        let latency = faults.borrow_and_update().latency[dir];
        let mut reset_after = false;
        if dir == UP {
            match fire_rule(shared, &tail, &bytes) {
                Some(ResetWhen::BeforeForwarding) => {
                    return Some(End::Reset {
                        graceful_upstream: false,
                    })
                }
                Some(ResetWhen::AfterForwarding) => {
                    connection.muted.store(true, Ordering::SeqCst);
                    reset_after = true;
                }
                None => {}
            }
            remember_tail(&mut tail, &bytes);
        }
        let deliver_at = (Instant::now() + latency.sample()).max(last_delivery);
        last_delivery = deliver_at;
        let chunk = Chunk {
            bytes,
            deliver_at,
            reset_after,
        };
        if tx.send(chunk).await.is_err() {
            return None;
        }
    }
}

/// Delivers queued chunks at their time, waiting out any blackhole.
async fn write_side(
    to: &TcpStream,
    mut rx: mpsc::Receiver<Chunk>,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> End {
    let mut faults = shared.faults.subscribe();
    let mut tail = Vec::new();
    while let Some(chunk) = rx.recv().await {
        tokio::time::sleep_until(chunk.deliver_at).await;
        let stranded = connection.born_strand;
        if faults
            .wait_for(|f| !f.blackhole && f.strand_epoch == stranded)
            .await
            .is_err()
        {
            return pending().await;
        }
        if dir == DOWN && connection.muted.load(Ordering::SeqCst) {
            continue;
        }
        if write_all(to, &chunk.bytes).await.is_err() {
            return End::Reset {
                graceful_upstream: false,
            };
        }
        if dir == UP {
            count_taps(shared, &tail, &chunk.bytes);
            remember_tail(&mut tail, &chunk.bytes);
        }
        if chunk.reset_after {
            let _ = tokio::time::timeout(REPLY_WAIT, connection.answered.notified()).await;
            return End::Reset {
                graceful_upstream: true,
            };
        }
    }
    End::Close
}

async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Keeps the last bytes of a stream, so that patterns split across two reads are found.
fn remember_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    let excess = tail.len().saturating_sub(MAX_PATTERN - 1);
    tail.drain(..excess);
}

/// Occurrences of `pattern` in `tail ++ bytes` that end inside `bytes` (those
/// ending inside `tail` were counted with the previous chunk).
fn occurrences(tail: &[u8], bytes: &[u8], pattern: &[u8]) -> usize {
    if pattern.is_empty() {
        return 0;
    }
    let mut joined = Vec::with_capacity(tail.len() + bytes.len());
    joined.extend_from_slice(tail);
    joined.extend_from_slice(bytes);
    joined
        .windows(pattern.len())
        .enumerate()
        .filter(|(start, window)| start + pattern.len() > tail.len() && *window == pattern)
        .count()
}

/// Consumes the first reset rule whose pattern the chunk completes.
fn fire_rule(shared: &Shared, tail: &[u8], bytes: &[u8]) -> Option<ResetWhen> {
    let mut fired = None;
    shared.faults.send_if_modified(|faults| {
        match faults
            .rules
            .iter()
            .position(|rule| occurrences(tail, bytes, &rule.pattern) > 0)
        {
            Some(index) => {
                fired = Some(faults.rules.remove(index).when);
                true
            }
            None => false,
        }
    });
    fired
}

fn count_taps(shared: &Shared, tail: &[u8], bytes: &[u8]) {
    for tap in shared.taps() {
        let n = occurrences(tail, bytes, &tap.pattern);
        if n > 0 {
            tap.count.fetch_add(n, Ordering::SeqCst);
        }
    }
}

// ---------------------------------------------------------------------------
// ProxiedCluster.
// ---------------------------------------------------------------------------

/// A [`RedisCluster`] with a [`FaultProxy`] in front of each node: network
/// faults through the proxies, process faults (kill, freeze, restart)
/// through the nodes.
///
/// Give clients [`urls`](Self::urls) (the proxies); use the nodes' own
/// helpers ([`node`](Self::node)`(i).get(..)`, [`RedisCluster::keys`]) for
/// direct assertions, which bypass the proxies. A node keeps its port across
/// restarts, so its proxy keeps working.
#[derive(Debug)]
pub struct ProxiedCluster {
    // Declared first so the proxies stop before the nodes are killed.
    proxies: Vec<FaultProxy>,
    cluster: RedisCluster,
}

impl ProxiedCluster {
    /// Starts `n` nodes with default [`NodeOptions`] and a proxy in front of each.
    pub async fn start(n: usize) -> Result<ProxiedCluster, TestkitError> {
        Self::start_with(n, NodeOptions::default()).await
    }

    /// Starts `n` nodes with `options` and a proxy in front of each.
    pub async fn start_with(
        n: usize,
        options: NodeOptions,
    ) -> Result<ProxiedCluster, TestkitError> {
        let cluster = RedisCluster::start_with(n, options).await?;
        Self::wrap(cluster).await
    }

    /// Puts a proxy in front of each node of a running cluster.
    pub async fn wrap(cluster: RedisCluster) -> Result<ProxiedCluster, TestkitError> {
        let mut proxies = Vec::with_capacity(cluster.len());
        for node in cluster.nodes() {
            let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, node.port()));
            proxies.push(FaultProxy::start(upstream).await?);
        }
        Ok(ProxiedCluster { proxies, cluster })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.cluster.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty()
    }

    /// The URLs of the proxies, in node order, with each node's password if
    /// it has one: what clients under test connect to.
    pub fn urls(&self) -> Vec<String> {
        self.proxies
            .iter()
            .zip(self.cluster.nodes())
            .map(|(proxy, node)| node.options().url("127.0.0.1", proxy.port()))
            .collect()
    }

    /// The nodes' own URLs, bypassing the proxies.
    pub fn direct_urls(&self) -> Vec<String> {
        self.cluster.urls()
    }

    /// The proxy in front of node `i`.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn proxy(&self, i: usize) -> &FaultProxy {
        &self.proxies[i]
    }

    /// Every proxy, in node order.
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }

    /// Node `i` (for direct assertions).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisProcess {
        self.cluster.node(i)
    }

    /// Node `i`, mutably (to kill, freeze, thaw or restart it).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisProcess {
        self.cluster.node_mut(i)
    }

    /// The nodes behind the proxies.
    pub fn cluster(&self) -> &RedisCluster {
        &self.cluster
    }

    /// The nodes behind the proxies, mutably.
    pub fn cluster_mut(&mut self) -> &mut RedisCluster {
        &mut self.cluster
    }

    /// Ends every fault: heals every proxy, thaws frozen nodes and restarts
    /// stopped ones, and waits until restarted nodes have loaded their data.
    pub async fn heal_all(&mut self) -> Result<(), TestkitError> {
        for proxy in &self.proxies {
            proxy.heal().await?;
        }
        for node in self.cluster.nodes_mut() {
            match node.state() {
                NodeState::Running => {}
                NodeState::Frozen => node.thaw().await?,
                NodeState::Stopped => {
                    node.restart().await?;
                    wait_until_loaded(node).await?;
                }
            }
        }
        Ok(())
    }
}

/// Waits until a freshly (re)started node serves reads: it answers `INFO` (the
/// harness's readiness probe) while it still loads its AOF, but refuses data
/// commands with `LOADING` until done.
pub(crate) async fn wait_until_loaded(node: &RedisProcess) -> Result<(), TestkitError> {
    let deadline = Instant::now() + LOAD_TIMEOUT;
    loop {
        match node.get("quorumlock:testkit:loaded-probe").await {
            Ok(_) => return Ok(()),
            Err(err) if err.to_string().to_lowercase().contains("loading") => {
                if Instant::now() >= deadline {
                    return Err(TestkitError::Timeout {
                        node: node.address(),
                        operation: "waiting for the dataset to load",
                        timeout: LOAD_TIMEOUT,
                    });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occurrences_span_chunk_boundaries_and_count_once() {
        assert_eq!(occurrences(b"", b"xxSETxxSET", b"SET"), 2);
        assert_eq!(occurrences(b"xxS", b"ETxx", b"SET"), 1);
        // Entirely inside the tail: counted with the previous chunk already.
        assert_eq!(occurrences(b"SETx", b"yy", b"SET"), 0);
        assert_eq!(occurrences(b"", b"abc", b""), 0);
    }

    #[test]
    fn tails_stay_bounded() {
        let mut tail = Vec::new();
        remember_tail(&mut tail, &[7; 5000]);
        assert_eq!(tail.len(), MAX_PATTERN - 1);
        remember_tail(&mut tail, b"abc");
        assert!(tail.ends_with(b"abc"));
        assert_eq!(tail.len(), MAX_PATTERN - 1);
    }

    #[test]
    fn latency_samples_stay_in_range() {
        let latency = Latency {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
        };
        for _ in 0..100 {
            let d = latency.sample();
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
        }
        assert_eq!(Latency::default().sample(), Duration::ZERO);
    }
}
