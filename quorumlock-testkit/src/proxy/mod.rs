//! [`FaultProxy`]: an in-process TCP proxy that injects network faults between clients
//! and one node, and [`ProxiedCluster`]: a [`RedisCluster`](crate::RedisCluster) with one
//! proxy in front of each node.
//!
//! The handle (here) changes the [rules](rules) that every connection reads; the
//! [gate](gate) opens and closes the listening socket and accepts; the [pump](pump)
//! carries each connection; [`ProxiedCluster`] pairs proxies with nodes.

mod gate;
mod proxied;
mod pump;
mod rules;
mod shared;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::gate::{accept_loop, bind_listener};
pub use self::proxied::ProxiedCluster;
pub use self::rules::{Direction, ResetWhen};
use self::rules::{Faults, Latency, Rule};
use self::shared::{Listening, Shared, TapInner};
use crate::error::TestkitError;

/// How long fault changes that must be confirmed (listener closed or reopened,
/// connections ended) may take.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

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
/// | [`redirect`](Self::redirect) | new connections reach another server; open ones stay where they are |
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
/// use quorumlock_testkit::{Direction, FaultProxy, RedisCluster};
///
/// # async fn demo() -> Result<(), quorumlock_testkit::TestkitError> {
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
            .field("upstream", &self.shared.upstream())
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
            upstream: Mutex::new(upstream),
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

    /// The address the proxy forwards new connections to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream()
    }

    /// Forwards the connections accepted from now on to `upstream`; open ones stay with the
    /// server they reached: what a client sees when the name or virtual IP it connects to
    /// moves to another server (a DNS change, a VIP failover), which only its next
    /// connection follows.
    pub fn redirect(&self, upstream: SocketAddr) {
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = upstream;
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
