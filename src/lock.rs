//! [`DistributedLock`]: the contract of a lock; and [`Lock`], its one implementation,
//! which [`Redlock`](crate::Redlock) wraps and delegates to.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::{LockError, Tally};
use crate::guard::LockGuard;
use crate::lease::{Lease, LostSignal};
use crate::metrics::{LockMetrics, NodeMetrics};
use crate::quorum::claim::Claim;
use crate::quorum::Coordinator;
use crate::resource::Resources;
use crate::token::LockToken;

/// A lock that many processes share through Redis.
///
/// Implemented by [`Redlock`](crate::Redlock), on a quorum of independent nodes or on one
/// ([`RedisLock`](crate::RedisLock)); code written against the trait also runs on a mock
/// of your own (and [`LockFactory`](crate::LockFactory) makes locks of either):
///
/// ```no_run
/// use quorumlock::{DistributedLock, LockError};
///
/// async fn charge_once<L: DistributedLock>(lock: &L, order: u64) -> Result<(), LockError> {
///     let guard = lock.acquire(&format!("order:{order}")).await?;
///     // ... the critical section, finished well within guard.validity() ...
///     guard.release().await
/// }
/// ```
///
/// A lock object holds no ownership state: every successful acquisition returns a
/// [`LockGuard`], and the other operations act on a guard.
pub trait DistributedLock: Send + Sync {
    /// The configuration this lock runs with.
    fn config(&self) -> &LockConfig;

    /// The same lock (sharing its node connections) with another configuration; used for
    /// per-lock overrides such as a different TTL.
    fn with_config(&self, config: LockConfig) -> Self
    where
        Self: Sized;

    /// One attempt, no waiting: returns the guard, or why the lock could not be taken
    /// ([`LockError::Held`] when another owner has it).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no lock behind. Once its lock requests may have gone out,
    /// a drop unlocks every node in the background, by compare-and-delete with this
    /// attempt's token, on the current tokio runtime (outside a runtime nothing can be
    /// spawned, and the keys expire after the TTL). A drop while a fencing token is being
    /// minted may leave the counter raised on some nodes, which only skips a number.
    fn try_acquire(
        &self,
        resource: &str,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// Attempts up to `1 + retry_count` times, waiting `retry_delay ± retry_jitter` between
    /// attempts; returns the first success or the last attempt's error. With an
    /// [`acquire_timeout`](LockConfig::acquire_timeout) configured, gives up at that
    /// deadline as [`acquire_timeout`](Self::acquire_timeout) does.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves no lock behind: an attempt in flight is
    /// unlocked in the background as [`try_acquire`](Self::try_acquire)'s is, a place in
    /// the nodes' queue is given back in the background, and the next blocking acquisition
    /// of the same resources in this process gets its turn. Dropped while it waits between
    /// attempts, there is nothing to undo: each failed attempt was rolled back before its
    /// wait began. A lock a task of this process passed to it meanwhile (see
    /// [cohorts](crate#cohorts-tasks-of-one-process-pass-the-lock-on)) goes on to the next
    /// waiting task, or is released on the nodes.
    fn acquire(&self, resource: &str) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// One attempt to lock several resources at once: on each node all of their keys are
    /// taken or none (one script), the quorum rule applies over nodes, and one guard holds
    /// them all. Names are sorted, so clients naming them in any order contend fairly; a
    /// name given twice is rejected.
    ///
    /// ```no_run
    /// # async fn run(lock: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// use quorumlock::DistributedLock;
    ///
    /// // Move money between two accounts without deadlocking against a reverse transfer.
    /// let guard = lock.acquire_many(&["account:7", "account:3"]).await?;
    /// assert_eq!(guard.resource(), "account:3 + account:7");
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire): dropping the future leaves no lock behind.
    fn try_acquire_many(
        &self,
        resources: &[&str],
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// [`try_acquire_many`](Self::try_acquire_many) with the retries of
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): dropping the future leaves no lock behind.
    fn acquire_many(
        &self,
        resources: &[&str],
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// Like [`acquire`](Self::acquire), but gives up once `timeout` has passed, whatever
    /// retries remain: [`LockError::TimedOut`] if an attempt was still running then, or the
    /// last attempt's error if the next wait would have ended past it. `timeout` replaces
    /// the configured [`acquire_timeout`](LockConfig::acquire_timeout), if any; the retries
    /// still end it sooner when they run out.
    ///
    /// An acquisition that had joined the nodes' queue (see
    /// [`LockConfig::fair`](crate::LockConfig::fair)) gives its place back before it
    /// returns, which can add up to one node timeout after `timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): dropping the future leaves no lock behind. Reaching
    /// `timeout` mid-attempt drops that attempt in the same way.
    fn acquire_timeout(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// Releases the guard's lock on every node. Releasing a guard twice is harmless: the
    /// second call returns `Ok(())` without touching the nodes.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it finishes leaves the guard unreleased, though its lease
    /// already counts as ended (its [`lost`](LockGuard::lost) signal fired with
    /// [`LeaseEnd::Released`](crate::LeaseEnd::Released) and its watchdog stopped). The
    /// deletes that went out may have removed the lock from some nodes; the guard's drop
    /// (with [`auto_release`](LockConfig::auto_release)) or another `release` sends them
    /// again, which compare-and-delete makes harmless.
    fn release(&self, guard: &mut LockGuard) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Whether the guard still holds its lock: within its deadline and confirmed by a quorum.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the future changes nothing.
    fn is_acquired(
        &self,
        guard: &LockGuard,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Extends the guard's lock to the full TTL and returns the new validity.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the guard's deadline as it was: an extension counts only
    /// once a quorum confirmed it. The extensions already sent may have renewed the TTL on
    /// some nodes, which only keeps this holder's own keys longer, until it releases them
    /// or they expire.
    fn refresh(
        &self,
        guard: &mut LockGuard,
    ) -> impl Future<Output = Result<Duration, LockError>> + Send;

    /// Runs `work` under the lock: acquires it (with retries), keeps it alive with a
    /// watchdog while `work` runs, and releases it on every exit path, panics included.
    ///
    /// `work` receives the lock's [`LostSignal`]. If the lock is lost before `work`
    /// finishes, `work` is cancelled (its future dropped at its next await point) and
    /// [`LockError::Lost`] returned; otherwise its value is returned.
    ///
    /// ```no_run
    /// use quorumlock::{DistributedLock, LockError, Redlock};
    ///
    /// # async fn run(lock: Redlock) -> Result<(), LockError> {
    /// let rows = lock
    ///     .with("nightly-export", |_lost| async {
    ///         // ... a long job; the lock is extended while it runs ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while `work` runs drops `work` at its await point, and the guard:
    /// the watchdog stops and, with [`auto_release`](LockConfig::auto_release), the lock is
    /// released in the background. Dropped while it acquires, as [`acquire`](Self::acquire).
    fn with<F, Fut, T>(
        &self,
        resource: &str,
        work: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send
    where
        F: FnOnce(LostSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move { crate::scoped::run_locked(self.acquire(resource).await?, work).await }
    }
}

/// The lock a `Redlock` is: a coordinator over its nodes, with the entry points of
/// [`DistributedLock`]. It turns the leases the coordinator grants into guards, gives each
/// blocking acquire its deadline, and refuses guards of other connections.
#[derive(Clone)]
pub(crate) struct Lock {
    coordinator: Arc<Coordinator>,
}

impl Lock {
    pub(crate) fn new(coordinator: Coordinator) -> Self {
        Lock {
            coordinator: Arc::new(coordinator),
        }
    }

    pub(crate) fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// The coordinator, shared: for a session, whose task outlives a borrow.
    pub(crate) fn shared_coordinator(&self) -> Arc<Coordinator> {
        Arc::clone(&self.coordinator)
    }

    pub(crate) fn config(&self) -> &LockConfig {
        self.coordinator.config()
    }

    /// The same lock, on the same connections, with another configuration.
    pub(crate) fn with_config(&self, config: LockConfig) -> Self {
        Lock::new(self.coordinator.with_config(config))
    }

    pub(crate) fn metrics(&self) -> LockMetrics {
        self.coordinator.counters().snapshot()
    }

    pub(crate) fn node_metrics(&self) -> Vec<NodeMetrics> {
        self.coordinator.node_metrics()
    }

    /// One attempt over `resources`.
    pub(crate) async fn try_acquire(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        let lease = self.coordinator.try_acquire(resources).await?;
        Ok(self.guard(lease))
    }

    /// Attempts over `resources` with the retries, until the configured acquire timeout.
    pub(crate) async fn acquire(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        let deadline = self.config().acquire_deadline(Instant::now());
        self.acquire_until(resources, deadline).await
    }

    /// Attempts over `resources` with the retries, within `timeout`.
    pub(crate) async fn acquire_timeout(
        &self,
        resources: &[&str],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        let now = Instant::now();
        // A timeout too long to represent falls back to the configured one, which
        // validation keeps representable: with a huge retry count allowed by that deadline,
        // no deadline at all would retry for months.
        let deadline = now
            .checked_add(timeout)
            .or_else(|| self.config().acquire_deadline(now));
        self.acquire_until(resources, deadline).await
    }

    async fn acquire_until(
        &self,
        resources: &[&str],
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let lease = self.coordinator.acquire(resources, deadline).await?;
        Ok(self.guard(lease))
    }

    /// Runs `work` under the lock on `resource`; see [`DistributedLock::with`].
    pub(crate) async fn with<F, Fut, T>(&self, resource: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(&[resource]).await?;
        crate::scoped::run_locked(guard, work).await
    }

    pub(crate) async fn release(&self, guard: &mut LockGuard) -> Result<(), LockError> {
        self.check_origin(guard)?;
        guard.release_in_place().await
    }

    pub(crate) async fn is_acquired(&self, guard: &LockGuard) -> Result<bool, LockError> {
        self.check_origin(guard)?;
        guard.is_acquired().await
    }

    pub(crate) async fn refresh(&self, guard: &mut LockGuard) -> Result<Duration, LockError> {
        self.check_origin(guard)?;
        guard.refresh().await
    }

    /// Deletes the lock on `resource` wherever it holds `token`; see
    /// [`Redlock::release_token`](crate::Redlock::release_token).
    pub(crate) async fn release_token(
        &self,
        resource: &str,
        token: &LockToken,
    ) -> Result<Tally, LockError> {
        self.coordinator.release_token(resource, token).await
    }

    /// One attempt over `resources` by `claim` (a side of a read-write lock); the guard is
    /// a mutex guard of the keys the claim took.
    pub(crate) async fn try_claim(
        &self,
        resources: &Resources,
        claim: &Claim,
    ) -> Result<LockGuard, LockError> {
        let lease = self.coordinator.try_claim(resources, claim).await?;
        Ok(self.guard(lease))
    }

    /// The guard of a lease this lock's coordinator granted. Made in the same poll as the
    /// lease, so no await point lies between the grant and the guard that releases it.
    fn guard(&self, lease: Arc<Lease>) -> LockGuard {
        LockGuard::new(Arc::clone(&self.coordinator), lease)
    }

    /// Rejects guards that came from a lock on other node connections.
    fn check_origin(&self, guard: &LockGuard) -> Result<(), LockError> {
        if guard.belongs_to(&self.coordinator) {
            Ok(())
        } else {
            Err(LockError::ForeignGuard {
                resource: guard.resource().to_owned(),
            })
        }
    }
}
