//! [`Redlock`]: the quorum lock over N independent Redis nodes.

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

/// The Redlock algorithm over N independent Redis masters: the lock survives the loss of
/// any minority of them.
///
/// Each acquisition sends `SET key token NX PX ttl` to every node at once, each request
/// bounded by the per-node timeout, and succeeds when at least `N/2 + 1` nodes granted it
/// and validity is left: `validity = ttl - elapsed - (ttl * drift_factor + 2 ms) > 0`,
/// measured on a monotonic clock. It returns as soon as a quorum has granted the lock (a
/// slow or frozen node does not delay it) and gives up as soon as a quorum has become
/// impossible. After any failed attempt it unlocks every node, including the ones that
/// failed or timed out, since their `SET` may have landed even though the reply was lost.
///
/// The nodes must be independent masters (not replicas of each other). `Redlock` is cheap
/// to clone; clones share the node connections.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{DistributedLock, LockConfig, LockError, Redlock};
///
/// # async fn run() -> Result<(), LockError> {
/// let config = LockConfig::builder().ttl(Duration::from_secs(10)).build()?;
/// let lock = Redlock::connect(
///     (1..=5).map(|i| format!("redis://127.0.0.1:700{i}")),
///     config,
/// )
/// .await?;
/// assert_eq!(lock.quorum(), 3);
///
/// match lock.try_acquire("cron:nightly-report").await {
///     Ok(guard) => {
///         // ... run the job, within guard.validity() ...
///         guard.release().await?;
///     }
///     Err(LockError::Held { .. }) => println!("another node runs the job"),
///     Err(other) => return Err(other),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    lock: Lock,
}

impl Redlock {
    /// A quorum lock on the Redis servers at `urls`.
    ///
    /// Connects to every node at once, each within the
    /// [`connect_timeout`](LockConfig::connect_timeout), and asks each server what it is.
    /// Fails with [`LockError::InvalidNode`] when a URL is malformed, when there are no
    /// URLs, and when a server that answered cannot be a lock node: when two URLs reach the
    /// same server (`localhost` and `127.0.0.1`, another database number: servers are told
    /// apart by their `run_id`, not by URL), a replica, a Redis Cluster node, something
    /// other than Redis, or, with fencing, a server that keeps no append-only file.
    ///
    /// Nodes that cannot be reached now only count as failed until they come back, and are
    /// checked then: a server that turns out to be another node's, or a replica, still
    /// counts as failed (and says why in a warning).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the lock before it exists: connecting writes no lock
    /// key, and the connections made so far are dropped with it.
    pub async fn connect<I, S>(urls: I, config: LockConfig) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let clients = crate::backend::clients_for_urls(
            urls,
            #[cfg(feature = "tls")]
            None,
        )?;
        Self::connect_clients(clients, config).await
    }

    /// [`connect`](Self::connect), with `tls` for the `rediss://` URLs: a private CA, a
    /// client certificate, or no verification (see [`TlsOptions`](crate::backend::tls::TlsOptions)).
    /// Giving options for a plain `redis://` URL is an [`InvalidNode`](LockError::InvalidNode)
    /// error, since they would be ignored.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect): dropping the future writes nothing to the nodes.
    #[cfg(feature = "tls")]
    pub async fn connect_tls<I, S>(
        urls: I,
        tls: &crate::backend::tls::TlsOptions,
        config: LockConfig,
    ) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let clients = crate::backend::clients_for_urls(urls, Some(tls))?;
        Self::connect_clients(clients, config).await
    }

    /// A quorum lock on clients you built yourself (TLS settings, a username, RESP3, a
    /// custom DNS resolver...), connected and checked as [`connect`](Self::connect) does.
    /// For a [`redis::ConnectionInfo`], build its client with `redis::Client::open(info)`.
    ///
    /// The nodes are named after the clients' addresses, without credentials
    /// (`redis://host:port[/db]`, `rediss://...`; see
    /// [`client_name`](crate::backend::client_name)). The connection and response timeouts of
    /// the clients' own configuration are not used: the lock's
    /// [`connect_timeout`](LockConfig::connect_timeout) and
    /// [`node_timeout`](LockConfig::node_timeout) apply.
    ///
    /// ```no_run
    /// use quorumlock::{redis, LockConfig, Redlock};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let clients = ["redis://a:6379", "redis://b:6379", "redis://c:6379"]
    ///     .into_iter()
    ///     .map(redis::Client::open)
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let lock = Redlock::from_clients(clients, LockConfig::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect): dropping the future writes nothing to the nodes.
    pub async fn from_clients(
        clients: impl IntoIterator<Item = redis::Client>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Self::connect_clients(crate::backend::named_clients(clients), config).await
    }

    async fn connect_clients(
        clients: Vec<(String, crate::backend::Target)>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Ok(Redlock {
            lock: Lock::new(Coordinator::connected(clients, config).await?),
        })
    }

    /// A quorum lock on nodes of any kind, such as an in-memory node for tests.
    pub fn from_nodes(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Ok(Redlock {
            lock: Lock::new(Coordinator::new(nodes, config)?),
        })
    }

    /// How many nodes must agree: `N/2 + 1` ([`quorum_of`](crate::quorum_of)).
    pub fn quorum(&self) -> usize {
        self.lock.coordinator().quorum()
    }

    /// The nodes' names (URLs without credentials), in the order given.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.lock
            .coordinator()
            .nodes()
            .iter()
            .map(|node| node.name())
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

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.node_names().collect::<Vec<_>>())
            .field("quorum", &self.quorum())
            .field("config", self.lock.coordinator().config())
            .finish()
    }
}

impl DistributedLock for Redlock {
    fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    fn with_config(&self, config: LockConfig) -> Self {
        Redlock {
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

impl crate::quorum_lock::sealed::Sealed for Redlock {
    #[allow(private_interfaces)] // the trait is sealed: only this crate can call it
    fn inner(&self) -> &Lock {
        &self.lock
    }
}

impl crate::quorum_lock::QuorumLock for Redlock {}
