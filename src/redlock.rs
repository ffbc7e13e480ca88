//! [`Redlock`]: the lock over N independent Redis nodes, and [`RedisLock`], the same
//! lock on one server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::IntoNodes;
use crate::config::LockConfig;
use crate::error::{LockError, Tally};
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::lock::{DistributedLock, Lock};
use crate::metrics::{LockMetrics, NodeMetrics};
use crate::node::LockNode;
use crate::quorum::Coordinator;
use crate::token::LockToken;

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
/// The nodes must be independent masters (not replicas of each other). With one node it
/// is the single-server lock, [`RedisLock`]: a quorum of one. `Redlock` is cheap to
/// clone; clones share the node connections.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{DistributedLock, LockConfig, LockError, Redlock};
///
/// # async fn run() -> Result<(), LockError> {
/// let config = LockConfig::builder().ttl(Duration::from_secs(10)).build()?;
/// let urls: Vec<String> = (1..=5).map(|i| format!("redis://127.0.0.1:700{i}")).collect();
/// let lock = Redlock::connect(urls, config).await?;
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

/// A lock on one Redis server: a [`Redlock`] of one node (quorum 1 of 1). `SET key token
/// NX PX ttl` to acquire, a Lua compare-and-delete to release, a Lua compare-and-pexpire
/// to refresh.
///
/// It is the same type, so it has the same contract (the same validity computation, token
/// checks and error types) and every method of `Redlock`. It is as available as its one
/// server: when that server is down, no lock can be taken, and if it restarts without
/// persistence, a held lock is lost. Use `Redlock` over several independent servers where
/// that matters. Its node may also be a Redis Cluster (`redis+cluster://`, one vote) or a
/// Sentinel-managed master (`redis+sentinel://`).
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{DistributedLock, LockConfig, RedisLock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let lock = RedisLock::connect("redis://127.0.0.1:6379", LockConfig::default()).await?;
/// assert_eq!(lock.quorum(), 1);
/// let guard = lock.acquire("stock:sku-42").await?;
/// // ... read, change and write the stock ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub type RedisLock = Redlock;

impl Redlock {
    /// A lock on the Redis nodes of `nodes`: a node set ([`Nodes`](crate::Nodes), with its
    /// TLS options and deployment facts), one address (a URL, a [`redis::Client`], a
    /// [`NodeAddress`](crate::NodeAddress)), or a list of them (see [`IntoNodes`]).
    ///
    /// Connects to every node at once, each within the node set's
    /// [`connect_timeout`](crate::Nodes::connect_timeout), asks each server what it is, and
    /// returns as soon as a quorum of them is connected and checked: the others go on
    /// connecting in the background, and count as failed until their server is checked.
    ///
    /// Fails with [`LockError::InvalidNode`] when an address does not read (the error says
    /// which part is wrong), when there are no nodes, when TLS options would be ignored,
    /// when a Sentinel-managed master is one member of several without
    /// [`Nodes::sentinel_members`](crate::Nodes::sentinel_members), and when two addresses
    /// reach the same server (`localhost` and `127.0.0.1`, another database number:
    /// servers are told apart by their `run_id`, not by URL). A server that answered but
    /// cannot be a lock node (a replica, a Redis Cluster node given as a server, something
    /// other than Redis, a database it does not have, a scheme that does not fit it, or,
    /// with fencing, a server that keeps no append-only file) counts as failed, with an
    /// error-level event and [`NodeMetrics::excluded`] saying why; it fails `connect` only
    /// when too few members are left for a quorum, or, with
    /// [`Nodes::strict_members`](crate::Nodes::strict_members), always. Fails with
    /// [`LockError::Config`] when the node set's settings do not fit `config` (replica
    /// acknowledgements not below the per-node timeout, a zero connect timeout).
    ///
    /// Nodes that cannot be reached now only count as failed until they come back, and are
    /// checked then: a server that turns out to be another node's, or a replica, still
    /// counts as failed (and says why in an error-level event).
    ///
    /// The nodes are named after their URLs, or their clients' addresses, without
    /// credentials (`redis://host:port[/db]`, `rediss://...`; see
    /// [`client_name`](crate::backend::client_name)). The connection and response
    /// timeouts of a client's own configuration are not used: the node set's connect
    /// timeout and the lock's [`node_timeout`](LockConfig::node_timeout) apply. For a
    /// [`redis::ConnectionInfo`], build its client with `redis::Client::open(info)`.
    ///
    /// ```no_run
    /// use quorumlock::{redis, LockConfig, Nodes, Redlock};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // Clients you built (TLS settings, a username, RESP3, a custom resolver...):
    /// let clients = ["redis://a:6379", "redis://b:6379", "redis://c:6379"]
    ///     .into_iter()
    ///     .map(redis::Client::open)
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let lock = Redlock::connect(clients, LockConfig::default()).await?;
    ///
    /// // A node set with settings of its deployment:
    /// let nodes = Nodes::new(["redis://a:6379", "redis://b:6379", "redis://c:6379"])?
    ///     .fencing_on_volatile_nodes(true);
    /// let fenced = LockConfig::builder().fencing(true).build()?;
    /// let lock = Redlock::connect(nodes, fenced).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the lock before it exists: connecting writes no lock
    /// key, and the connections made so far are dropped with it.
    pub async fn connect(nodes: impl IntoNodes, config: LockConfig) -> Result<Self, LockError> {
        let nodes = nodes.into_nodes()?;
        Ok(Redlock {
            lock: Lock::new(Coordinator::connected(&nodes, config).await?),
        })
    }

    /// A lock on nodes of any kind, such as the in-memory nodes of the module `sim`
    /// (feature `test-util`) for tests, or a node of your own.
    pub fn from_nodes(
        nodes: impl IntoIterator<Item = Arc<dyn LockNode>>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Ok(Redlock {
            lock: Lock::new(Coordinator::new(nodes.into_iter().collect(), config)?),
        })
    }

    /// How many nodes must agree: `N/2 + 1` ([`quorum_of`](crate::quorum_of)).
    pub fn quorum(&self) -> usize {
        self.lock.coordinator().quorum()
    }

    /// The nodes' names (URLs without credentials), in the order given; an iterator, which
    /// borrows the lock: `.collect::<Vec<_>>()` makes a list of it.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.lock
            .coordinator()
            .nodes()
            .iter()
            .map(|node| node.name())
    }

    /// The node's name (its URL without credentials), for a lock on one node (a
    /// [`RedisLock`]); with several, the first one's (see [`node_names`](Self::node_names)).
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

    /// Deletes the lock on `resource` on every node where its key holds `token`, by the
    /// compare-and-delete a guard's release sends: for an operator who has a holder's
    /// token but not its guard (`quorumlock release`). Another owner's lock is never
    /// touched; the holder finds out at its next refresh or check.
    ///
    /// It hears every node out, each within the node timeout, and returns how they
    /// answered: [`granted`](Tally::granted) the nodes that deleted the key,
    /// [`refused`](Tally::refused) those where it was absent or held another token,
    /// [`failures`](Tally::failures) those that did not answer. The lock is free once a
    /// quorum deleted it ([`Tally::has_quorum`]); the token cannot have held it when
    /// deletions and failures together fall short of one. Fails only for a name that
    /// cannot be a lock.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the deletes already sent to finish on their nodes, as a
    /// dropped release does; sending it again is harmless.
    pub async fn release_token(
        &self,
        resource: &str,
        token: &LockToken,
    ) -> Result<Tally, LockError> {
        self.lock.release_token(resource, token).await
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

impl Redlock {
    /// The lock the read-write lock, the semaphore and the election run on.
    pub(crate) fn inner(&self) -> &Lock {
        &self.lock
    }
}
