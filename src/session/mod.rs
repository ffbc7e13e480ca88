//! [`Session`]: one keep-alive for many held locks.
//!
//! A guard's watchdog ([`LockGuard::auto_extend`]) extends its one lock: a service holding
//! ten thousand locks runs ten thousand watchdogs, and sends each node ten thousand
//! extensions per interval. A session keeps all its locks alive with one task and one
//! request per node per interval (per chunk of [`SessionOptions::chunk`] locks), each lock
//! still extended, lost and counted on its own. etcd's `concurrency.Session` is the model:
//! one lease for the locks and elections of a client, one signal when it is gone.
//!
//! - `members`: the list of leases a session keeps, and when its next round is due;
//! - `keeper`: the task that runs the rounds (the rounds themselves are the
//!   coordinator's: `quorum::renewal`).

mod keeper;
pub(crate) mod members;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::members::Cadence;
use self::members::Members;
use crate::error::{ConfigError, LockError, SessionEnd};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::watchdog::AutoExtend;

/// How a [`Session`] keeps its locks alive.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{ConfigError, LockConfig, SessionOptions};
///
/// let options = SessionOptions::default().every(Duration::from_secs(5)).chunk(512);
/// assert!(options.check(&LockConfig::default()).is_ok());
/// let refused = SessionOptions::default().chunk(0).check(&LockConfig::default());
/// assert!(matches!(refused, Err(ConfigError::InvalidSessionChunk { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    interval: Option<Duration>,
    chunk: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            interval: None,
            chunk: Self::DEFAULT_CHUNK,
        }
    }
}

impl SessionOptions {
    /// The default chunk: 256 locks per request, some 20 KB of keys and tokens, which a
    /// Redis server runs in well under a millisecond.
    pub const DEFAULT_CHUNK: usize = 256;

    /// The largest chunk: 4,096 locks per request. A node runs one script at a time, and
    /// a larger one would keep every other client of the node waiting for milliseconds.
    pub const MAX_CHUNK: usize = 4096;

    /// Extends each lock within `interval` of its last extension (or of its acquisition),
    /// instead of within a third of the TTL. Clamped to at most half the TTL; at least
    /// [`AutoExtend::min_interval`] of the lock's configuration.
    ///
    /// Rounds start a little more often than that: each one early by twice as long as it
    /// is expected to take (the last round's length, scaled to the locks kept now), plus
    /// one retry (two node timeouts) and a node timeout, at most a quarter of the interval
    /// (the whole quarter before the first round), so that a lock in a round's last chunk,
    /// or one a round sent again once, is still extended in time.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Sends at most `locks` locks' extensions per request.
    pub fn chunk(mut self, locks: usize) -> Self {
        self.chunk = locks;
        self
    }

    /// Checks these options against the configuration of the lock they are for.
    pub fn check(&self, config: &crate::LockConfig) -> Result<(), ConfigError> {
        if !(1..=Self::MAX_CHUNK).contains(&self.chunk) {
            return Err(ConfigError::InvalidSessionChunk {
                chunk: self.chunk,
                max: Self::MAX_CHUNK,
            });
        }
        let mut interval = AutoExtend::default();
        if let Some(every) = self.interval {
            interval = interval.every(every);
        }
        interval.check(config)
    }

    fn cadence(&self, config: &crate::LockConfig) -> Cadence {
        let ttl = config.ttl();
        let interval = self.interval.unwrap_or(ttl / 3).min(ttl / 2);
        Cadence {
            interval,
            chunk: self.chunk,
            request_timeout: config.node_timeout().max(interval / 20),
            node_timeout: config.node_timeout(),
        }
    }
}

/// One keep-alive for many held locks: locks, read-write locks' sides, permits and
/// leaderships that join it are extended together, with one request per node per
/// interval (and per [`chunk`](SessionOptions::chunk) of them), by one background task.
///
/// Each lock stays a lock of its own: its guard's [`validity`](LockGuard::validity) is
/// counted from when the requests that extended it were sent, less the drift allowance,
/// as a refresh's is; when the nodes say it is gone (expired, deleted, taken over by
/// another owner), that lock alone ends, and its [`lost`](LockGuard::lost) signal fires
/// with the reason. When the session can no longer confirm its locks on a quorum before
/// they run out (too many nodes down), it ends: every lock it kept is declared lost, and
/// its own signal ([`ended`](Self::ended), [`end`](Self::end)) fires.
///
/// - A lock joins with [`keep`](Self::keep) (or [`acquire`](Self::acquire)
///   here), which stops its watchdog, and leaves with [`LockGuard::leave_session`]; a
///   guard released or dropped leaves by itself.
/// - Dropping the session lets go of its locks: they are no longer extended, and each
///   expires at its deadline (its guard still releases it when dropped).
///   [`close`](Self::close) releases them all instead.
///
/// Locks of one session share its nodes and its TTL: a guard of another lock instance's
/// nodes, or of another TTL, is refused.
///
/// ```no_run
/// use quorumlock::{LockConfig, Redlock, Session};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let lock = Redlock::connect(["redis://127.0.0.1:6379"], LockConfig::default()).await?;
/// let session = Session::new(&lock);
/// let mut tenants = Vec::new();
/// for tenant in 0..10_000 {
///     // Each one kept alive by the session: one request per node per 10 s, not 10,000.
///     tenants.push(session.acquire(&format!("tenant:{tenant}")).await?);
/// }
/// tokio::select! {
///     end = session.end() => eprintln!("stop serving every tenant: {end}"),
///     () = serve(&tenants) => session.close().await?,
/// }
/// # Ok(())
/// # }
/// # async fn serve(_: &[quorumlock::LockGuard]) {}
/// ```
pub struct Session {
    lock: Lock,
    members: Arc<Members>,
    keeper: JoinHandle<()>,
}

impl Session {
    /// A session for the locks of `lock`, extending every third of the TTL. Needs a tokio
    /// runtime: its task is spawned on the current one.
    pub fn new(lock: &crate::Redlock) -> Session {
        Self::with_options(lock, SessionOptions::default())
            .expect("the default session options are always valid")
    }

    /// A session for the locks of `lock`, with `options` (checked against its
    /// configuration: [`SessionOptions::check`]). Needs a tokio runtime.
    pub fn with_options(
        lock: &crate::Redlock,
        options: SessionOptions,
    ) -> Result<Session, ConfigError> {
        let lock = lock.inner().clone();
        let coordinator = lock.shared_coordinator();
        options.check(coordinator.config())?;
        let cadence = options.cadence(coordinator.config());
        let far = Instant::now()
            .checked_add(cadence.interval)
            .unwrap_or_else(Instant::now);
        let members = Arc::new(Members::new(coordinator, cadence, far));
        let keeper = tokio::spawn(keeper::keep(Arc::clone(&members)));
        Ok(Session {
            lock,
            members,
            keeper,
        })
    }

    /// [`Redlock::acquire`](crate::Redlock::acquire), and the guard joins this session.
    ///
    /// # Cancel safety
    ///
    /// As the acquisition's: dropped midway, it leaves no lock behind.
    pub async fn acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        let mut guard = self.lock.acquire(&[resource]).await?;
        self.keep(&mut guard)?;
        Ok(guard)
    }

    /// [`Redlock::try_acquire`](crate::Redlock::try_acquire), and the guard joins this
    /// session.
    ///
    /// # Cancel safety
    ///
    /// As the acquisition's: dropped midway, it leaves no lock behind.
    pub async fn try_acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        let mut guard = self.lock.try_acquire(&[resource]).await?;
        self.keep(&mut guard)?;
        Ok(guard)
    }

    /// How many locks the session keeps (counting those released since its last round).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the session keeps no lock.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How the session ended, if it has.
    pub fn ended(&self) -> Option<SessionEnd> {
        self.members.ended()
    }

    /// A signal that resolves when the session ends: see [`SessionSignal`].
    pub fn end(&self) -> SessionSignal {
        SessionSignal {
            members: Arc::clone(&self.members),
        }
    }

    /// Ends the session and releases every lock it kept, all at once: each guard then
    /// counts as released ([`release`](LockGuard::release) answers `Ok` without asking
    /// the nodes again). Returns the first release a quorum did not confirm, after trying
    /// them all.
    ///
    /// # Cancel safety
    ///
    /// The session has ended when the future is first polled. Dropped midway, the locks
    /// whose release had not been sent stay until their guards are dropped (which
    /// releases them) or their TTL.
    pub async fn close(self) -> Result<(), LockError> {
        let leases = self.members.end(SessionEnd::Closed);
        let coordinator = &self.members.coordinator;
        let releases = leases
            .iter()
            .filter(|lease| !lease.has_ended())
            .map(|lease| {
                lease.end(crate::error::LeaseEnd::Released);
                coordinator.release(lease)
            });
        let mut first_error = Ok(());
        let mut releases = futures::stream::iter(releases).buffer_unordered(64);
        while let Some(outcome) = releases.next().await {
            if first_error.is_ok() {
                first_error = outcome;
            }
        }
        first_error
    }

    /// Keeps `held` (a [`LockGuard`], a [`Permit`](crate::Permit), a
    /// [`Leadership`](crate::Leadership)) alive with the session's other locks, until it is
    /// released, dropped, or [leaves](LockGuard::leave_session), or the session ends. A
    /// watchdog started by [`auto_extend`](LockGuard::auto_extend) stops; the lock's
    /// [`lost`](LockGuard::lost) signal fires as with one, when the nodes say it is gone
    /// or the session can no longer keep a quorum for it. Keeping a lock the session
    /// keeps already does nothing.
    ///
    /// Refused with [`LockError::ForeignGuard`] for a lock of other nodes than the
    /// session's, and with [`LockError::Session`] for one of another TTL, one no longer
    /// held, or when the session ended; the lock is then kept as it was.
    ///
    /// ```no_run
    /// # async fn run(lock: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let session = quorumlock::Session::new(&lock);
    /// let mut guard = lock.acquire("device:42").await?;
    /// session.keep(&mut guard)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep(&self, held: &mut impl KeepAlive) -> Result<(), LockError> {
        held.guard_mut().keep_in(&self.members)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
        // Lets go of the leases: they keep their deadlines, and the list its memory no
        // longer.
        drop(self.members.end(SessionEnd::Dropped));
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("locks", &self.len())
            .field("interval", &self.members.cadence.interval)
            .field("chunk", &self.members.cadence.chunk)
            .field("ended", &self.ended())
            .finish()
    }
}

/// A held lock a [`Session`] can keep alive: a [`LockGuard`] (of a mutex, or a side of a
/// [`RwLock`](crate::RwLock)), a [`Permit`](crate::Permit), a
/// [`Leadership`](crate::Leadership). Sealed: the session keeps what it knows how to
/// extend.
pub trait KeepAlive: sealed::Sealed {
    #[doc(hidden)]
    fn guard_mut(&mut self) -> &mut LockGuard;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::LockGuard {}
    impl Sealed for crate::Permit {}
    impl Sealed for crate::Leadership {}
}

impl KeepAlive for LockGuard {
    fn guard_mut(&mut self) -> &mut LockGuard {
        self
    }
}

impl KeepAlive for crate::Permit {
    fn guard_mut(&mut self) -> &mut LockGuard {
        self.guard_mut()
    }
}

impl KeepAlive for crate::Leadership {
    fn guard_mut(&mut self) -> &mut LockGuard {
        self.guard_mut()
    }
}

/// Resolves when a [`Session`] ends: closed, dropped, or unable to keep a quorum for its
/// locks (see [`SessionEnd`]). Cheap to clone; outlives the session.
#[derive(Clone)]
pub struct SessionSignal {
    members: Arc<Members>,
}

impl SessionSignal {
    /// How the session ended, if it has.
    pub fn ended(&self) -> Option<SessionEnd> {
        self.members.ended()
    }

    /// Waits until the session ends, and says how.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future changes nothing.
    pub async fn wait(&self) -> SessionEnd {
        loop {
            let mut ending = std::pin::pin!(self.members.ending.notified());
            ending.as_mut().enable();
            if let Some(end) = self.members.ended() {
                return end;
            }
            ending.await;
        }
    }
}

impl IntoFuture for SessionSignal {
    type Output = SessionEnd;
    type IntoFuture = Pin<Box<dyn Future<Output = SessionEnd> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.wait().await })
    }
}

impl std::fmt::Debug for SessionSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSignal")
            .field("ended", &self.ended())
            .finish()
    }
}
