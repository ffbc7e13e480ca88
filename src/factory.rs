//! [`LockFactory`]: locks by resource name, sharing one set of connections and defaults.

use std::future::Future;
use std::time::Duration;

use crate::config::LockConfig;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::lock::DistributedLock;
use crate::resource;

/// Creates [`NamedLock`]s by resource name from one lock (and so one set of node
/// connections) and its default configuration, with an optional TTL per lock.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{LockConfig, LockFactory, Redlock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let urls = ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"];
/// let factory = LockFactory::new(Redlock::connect(urls, LockConfig::default()).await?);
///
/// let orders = factory.create("order-processing")?;              // default TTL (30 s)
/// let report = factory.create_with_ttl("daily-report", Duration::from_secs(600))?;
///
/// let guard = orders.acquire().await?;
/// // ... process the order ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockFactory<L> {
    lock: L,
}

impl<L: DistributedLock + Clone> LockFactory<L> {
    /// A factory handing out locks that share `lock`'s connections and configuration.
    pub fn new(lock: L) -> Self {
        LockFactory { lock }
    }

    /// The default configuration of the locks this factory creates.
    pub fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    /// A lock on `resource` with the default configuration. Fails on an invalid name.
    pub fn create(&self, resource: &str) -> Result<NamedLock<L>, LockError> {
        resource::validate(resource)?;
        Ok(NamedLock {
            lock: self.lock.clone(),
            resource: resource.to_owned(),
        })
    }

    /// A lock on `resource` whose TTL overrides the default. The resulting configuration is
    /// validated again, so a TTL too short for the per-node timeout is rejected here rather
    /// than at the first acquisition.
    pub fn create_with_ttl(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> Result<NamedLock<L>, LockError> {
        resource::validate(resource)?;
        let config = self.lock.config().with_ttl(ttl)?;
        Ok(NamedLock {
            lock: self.lock.with_config(config),
            resource: resource.to_owned(),
        })
    }
}

/// A lock bound to one resource name, made by a [`LockFactory`].
#[derive(Debug, Clone)]
pub struct NamedLock<L> {
    lock: L,
    resource: String,
}

impl<L: DistributedLock> NamedLock<L> {
    /// The resource this lock guards.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The configuration this lock runs with (the factory's, or its own TTL override).
    pub fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    /// One attempt, no waiting.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::try_acquire`]: dropping the future leaves no lock behind.
    pub async fn try_acquire(&self) -> Result<LockGuard, LockError> {
        self.lock.try_acquire(&self.resource).await
    }

    /// Bounded attempts with jittered waits.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::acquire`]: dropping the future leaves no lock behind.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.lock.acquire(&self.resource).await
    }

    /// Bounded attempts within `timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::acquire_timeout`]: dropping the future leaves no lock behind.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard, LockError> {
        self.lock.acquire_timeout(&self.resource, timeout).await
    }

    /// Runs `work` under this lock, auto-extended; see [`DistributedLock::with`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::with`]: dropping the future cancels `work` and releases the
    /// lock in the background.
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.lock.with(&self.resource, work).await
    }

    /// The underlying lock, for the guard operations of [`DistributedLock`].
    pub fn lock(&self) -> &L {
        &self.lock
    }
}
