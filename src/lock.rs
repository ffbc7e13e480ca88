//! [`DistributedLock`]: the contract both lock kinds keep.

use std::future::Future;
use std::time::Duration;

use crate::config::LockConfig;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;

/// A lock that many processes share through Redis.
///
/// Implemented by [`Redlock`](crate::Redlock) (a quorum of independent nodes) and
/// [`RedisLock`](crate::RedisLock) (one node), so code can be written once for both:
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
    fn try_acquire(
        &self,
        resource: &str,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// Attempts up to `1 + retry_count` times, waiting `retry_delay ± retry_jitter` between
    /// attempts; returns the first success or the last attempt's error. With an
    /// [`acquire_timeout`](LockConfig::acquire_timeout) configured, gives up at that
    /// deadline as [`acquire_timeout`](Self::acquire_timeout) does.
    ///
    /// Dropping the returned future at any point leaves no key behind: an attempt in flight
    /// is unlocked in the background.
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
    fn try_acquire_many(
        &self,
        resources: &[&str],
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// [`try_acquire_many`](Self::try_acquire_many) with the retries of
    /// [`acquire`](Self::acquire).
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
    fn acquire_timeout(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send;

    /// Releases the guard's lock on every node. Releasing a guard twice is harmless: the
    /// second call returns `Ok(())` without touching the nodes.
    fn release(&self, guard: &mut LockGuard) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Whether the guard still holds its lock: within its deadline and confirmed by a quorum.
    fn is_acquired(
        &self,
        guard: &LockGuard,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Extends the guard's lock to the full TTL and returns the new validity.
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

/// Implements [`DistributedLock`] for a lock kind that wraps an `Arc<Coordinator>` in a
/// field named `coordinator`: both kinds differ only in how they are built.
///
/// The acquisition methods are also inherent, so the common case needs no trait import.
macro_rules! impl_distributed_lock {
    ($kind:ty) => {
        impl $kind {
            /// One attempt, no waiting; see [`DistributedLock::try_acquire`](crate::DistributedLock::try_acquire).
            pub async fn try_acquire(
                &self,
                resource: &str,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                self.coordinator.try_acquire(&[resource]).await
            }

            /// Bounded attempts with jittered waits; see [`DistributedLock::acquire`](crate::DistributedLock::acquire).
            pub async fn acquire(
                &self,
                resource: &str,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                let deadline = self
                    .config()
                    .acquire_deadline(::tokio::time::Instant::now());
                self.coordinator.acquire(&[resource], deadline).await
            }

            /// One attempt over several resources; see [`DistributedLock::try_acquire_many`](crate::DistributedLock::try_acquire_many).
            pub async fn try_acquire_many(
                &self,
                resources: &[&str],
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                self.coordinator.try_acquire(resources).await
            }

            /// Bounded attempts over several resources; see [`DistributedLock::acquire_many`](crate::DistributedLock::acquire_many).
            pub async fn acquire_many(
                &self,
                resources: &[&str],
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                let deadline = self
                    .config()
                    .acquire_deadline(::tokio::time::Instant::now());
                self.coordinator.acquire(resources, deadline).await
            }

            /// Bounded attempts within `timeout`; see [`DistributedLock::acquire_timeout`](crate::DistributedLock::acquire_timeout).
            pub async fn acquire_timeout(
                &self,
                resource: &str,
                timeout: ::std::time::Duration,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                let now = ::tokio::time::Instant::now();
                // A timeout too long to represent falls back to the configured one, which
                // validation keeps representable: with a huge retry count allowed by that
                // deadline, no deadline at all would retry for months.
                let deadline = now
                    .checked_add(timeout)
                    .or_else(|| self.config().acquire_deadline(now));
                self.coordinator.acquire(&[resource], deadline).await
            }

            /// Runs `work` under the lock, auto-extended; see [`DistributedLock::with`](crate::DistributedLock::with).
            pub async fn with<F, Fut, T>(
                &self,
                resource: &str,
                work: F,
            ) -> Result<T, $crate::LockError>
            where
                F: FnOnce($crate::LostSignal) -> Fut,
                Fut: ::std::future::Future<Output = T>,
            {
                let deadline = self
                    .config()
                    .acquire_deadline(::tokio::time::Instant::now());
                let guard = self.coordinator.acquire(&[resource], deadline).await?;
                $crate::scoped::run_locked(guard, work).await
            }

            /// The configuration this lock runs with.
            pub fn config(&self) -> &$crate::LockConfig {
                self.coordinator.config()
            }

            /// What the locks on these connections did so far; see [`LockMetrics`]($crate::LockMetrics).
            pub fn metrics(&self) -> $crate::LockMetrics {
                self.coordinator.counters().snapshot()
            }

            /// Each node's counters (replies, errors, timeouts, latency, last error), in
            /// node order; see [`NodeMetrics`]($crate::NodeMetrics).
            pub fn node_metrics(&self) -> Vec<$crate::NodeMetrics> {
                self.coordinator.node_metrics()
            }
        }

        impl $crate::DistributedLock for $kind {
            fn config(&self) -> &$crate::LockConfig {
                self.coordinator.config()
            }

            fn with_config(&self, config: $crate::LockConfig) -> Self {
                Self {
                    coordinator: ::std::sync::Arc::new(self.coordinator.with_config(config)),
                }
            }

            async fn try_acquire(
                &self,
                resource: &str,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                <$kind>::try_acquire(self, resource).await
            }

            async fn acquire(
                &self,
                resource: &str,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                <$kind>::acquire(self, resource).await
            }

            async fn try_acquire_many(
                &self,
                resources: &[&str],
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                <$kind>::try_acquire_many(self, resources).await
            }

            async fn acquire_many(
                &self,
                resources: &[&str],
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                <$kind>::acquire_many(self, resources).await
            }

            async fn acquire_timeout(
                &self,
                resource: &str,
                timeout: ::std::time::Duration,
            ) -> Result<$crate::LockGuard, $crate::LockError> {
                <$kind>::acquire_timeout(self, resource, timeout).await
            }

            async fn release(
                &self,
                guard: &mut $crate::LockGuard,
            ) -> Result<(), $crate::LockError> {
                $crate::lock::check_origin(&self.coordinator, guard)?;
                guard.release_in_place().await
            }

            async fn is_acquired(
                &self,
                guard: &$crate::LockGuard,
            ) -> Result<bool, $crate::LockError> {
                $crate::lock::check_origin(&self.coordinator, guard)?;
                guard.is_acquired().await
            }

            async fn refresh(
                &self,
                guard: &mut $crate::LockGuard,
            ) -> Result<::std::time::Duration, $crate::LockError> {
                $crate::lock::check_origin(&self.coordinator, guard)?;
                guard.refresh().await
            }
        }
    };
}
pub(crate) use impl_distributed_lock;

/// Rejects guards that came from a lock on other node connections.
pub(crate) fn check_origin(
    coordinator: &crate::quorum::Coordinator,
    guard: &LockGuard,
) -> Result<(), LockError> {
    if guard.belongs_to(coordinator) {
        Ok(())
    } else {
        Err(LockError::ForeignGuard {
            resource: guard.resource().to_owned(),
        })
    }
}
