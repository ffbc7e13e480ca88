//! [`RedisLock`]: the lock on a single Redis node.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::LockConfig;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::lock::{DistributedLock, Lock};
use crate::metrics::{LockMetrics, NodeMetrics};
use crate::node::LockNode;
use crate::quorum::Coordinator;

/// A lock on one Redis server: `SET key token NX PX ttl` to acquire, a Lua
/// compare-and-delete to release, a Lua compare-and-pexpire to refresh.
///
/// It keeps the same contract as [`Redlock`](crate::Redlock) (the same validity
/// computation, token checks and error types) and runs on the same code, as a quorum of
/// one. It is as available as its one server: when that server is down, no lock can be
/// taken, and if it restarts without persistence, a held lock is lost. Use `Redlock` over
/// several independent servers where that matters.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{DistributedLock, LockConfig, RedisLock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let lock = RedisLock::connect("redis://127.0.0.1:6379", LockConfig::default()).await?;
/// let guard = lock.acquire("stock:sku-42").await?;
/// // ... read, change and write the stock ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisLock {
    lock: Lock,
}

impl RedisLock {
    /// A lock on the Redis server (or Cluster, or Sentinel-managed master) of `node`,
    /// connected and checked at once as [`Redlock::connect`](crate::Redlock::connect)
    /// does (a server that is down now counts as failed until it comes back), and
    /// reconnected when lost.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the lock before it exists: connecting writes no lock
    /// key, and the connections made so far are dropped with it.
    pub async fn connect(
        node: impl crate::backend::IntoNodes,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        let nodes = node.into_nodes()?;
        Ok(RedisLock {
            lock: Lock::new(Coordinator::connected(&nodes, config).await?),
        })
    }

    /// A lock on a node of any kind, such as an in-memory node for tests.
    pub fn from_node(node: Arc<dyn LockNode>, config: LockConfig) -> Result<Self, LockError> {
        Ok(RedisLock {
            lock: Lock::new(Coordinator::new(vec![node], config)?),
        })
    }

    /// The node's name (its URL without credentials).
    pub fn node_name(&self) -> &str {
        self.lock.coordinator().nodes()[0].name()
    }

    /// One attempt, no waiting; see [`DistributedLock::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::try_acquire`]: dropping the future leaves no lock behind.
    pub async fn try_acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock.try_acquire(&[resource]).await
    }

    /// Bounded attempts with jittered waits; see [`DistributedLock::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::acquire`]: dropping the future leaves no lock behind, and
    /// gives its place in line back.
    pub async fn acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock.acquire(&[resource]).await
    }

    /// One attempt over several resources; see [`DistributedLock::try_acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_many(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        self.lock.try_acquire(resources).await
    }

    /// Bounded attempts over several resources; see [`DistributedLock::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_many(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        self.lock.acquire(resources).await
    }

    /// Bounded attempts within `timeout`; see [`DistributedLock::acquire_timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.lock.acquire_timeout(&[resource], timeout).await
    }

    /// Runs `work` under the lock, auto-extended; see [`DistributedLock::with`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::with`]: dropping the future cancels `work` and releases the
    /// lock in the background.
    pub async fn with<F, Fut, T>(&self, resource: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock.with(resource, work).await
    }

    /// The configuration this lock runs with.
    pub fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    /// What the locks on these connections did so far; see [`LockMetrics`].
    pub fn metrics(&self) -> LockMetrics {
        self.lock.metrics()
    }

    /// Each node's counters (replies, errors, timeouts, latency, last error), in node
    /// order; see [`NodeMetrics`].
    pub fn node_metrics(&self) -> Vec<NodeMetrics> {
        self.lock.node_metrics()
    }
}

impl std::fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLock")
            .field("node", &self.node_name())
            .field("config", self.lock.coordinator().config())
            .finish()
    }
}

impl DistributedLock for RedisLock {
    fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    fn with_config(&self, config: LockConfig) -> Self {
        RedisLock {
            lock: self.lock.with_config(config),
        }
    }

    async fn try_acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock.try_acquire(&[resource]).await
    }

    async fn acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock.acquire(&[resource]).await
    }

    async fn try_acquire_many(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        self.lock.try_acquire(resources).await
    }

    async fn acquire_many(&self, resources: &[&str]) -> Result<LockGuard, LockError> {
        self.lock.acquire(resources).await
    }

    async fn acquire_timeout(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.lock.acquire_timeout(&[resource], timeout).await
    }

    async fn release(&self, guard: &mut LockGuard) -> Result<(), LockError> {
        self.lock.release(guard).await
    }

    async fn is_acquired(&self, guard: &LockGuard) -> Result<bool, LockError> {
        self.lock.is_acquired(guard).await
    }

    async fn refresh(&self, guard: &mut LockGuard) -> Result<Duration, LockError> {
        self.lock.refresh(guard).await
    }
}

impl crate::quorum_lock::sealed::Sealed for RedisLock {
    #[allow(private_interfaces)] // the trait is sealed: only this crate can call it
    fn inner(&self) -> &Lock {
        &self.lock
    }
}

impl crate::quorum_lock::QuorumLock for RedisLock {}
