//! [`RedisLock`]: the lock on a single Redis node.

use std::sync::Arc;

use crate::config::LockConfig;
use crate::error::LockError;
use crate::lock::impl_distributed_lock;
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
    coordinator: Arc<Coordinator>,
}

impl RedisLock {
    /// A lock on the Redis server at `url`, connected and checked at once as
    /// [`Redlock::connect`](crate::Redlock::connect) does (a server that is down now counts
    /// as failed until it comes back), and reconnected when lost.
    pub async fn connect(url: &str, config: LockConfig) -> Result<Self, LockError> {
        let clients = crate::node::clients_for_urls(
            [url],
            #[cfg(feature = "tls")]
            None,
        )?;
        Self::connect_clients(clients, config).await
    }

    /// [`connect`](Self::connect) with `tls` for a `rediss://` URL; see
    /// [`Redlock::connect_tls`](crate::Redlock::connect_tls).
    #[cfg(feature = "tls")]
    pub async fn connect_tls(
        url: &str,
        tls: &crate::TlsOptions,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        let clients = crate::node::clients_for_urls([url], Some(tls))?;
        Self::connect_clients(clients, config).await
    }

    /// A lock on a client you built yourself, connected and checked as
    /// [`connect`](Self::connect) does; see
    /// [`Redlock::from_clients`](crate::Redlock::from_clients) for naming and timeouts.
    pub async fn from_client(client: redis::Client, config: LockConfig) -> Result<Self, LockError> {
        Self::connect_clients(crate::node::named_clients([client]), config).await
    }

    async fn connect_clients(
        clients: Vec<(String, redis::Client)>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Ok(RedisLock {
            coordinator: Arc::new(Coordinator::connected(clients, config).await?),
        })
    }

    /// A lock on a node of any kind, such as an in-memory node for tests.
    pub fn from_node(node: Arc<dyn LockNode>, config: LockConfig) -> Result<Self, LockError> {
        Ok(RedisLock {
            coordinator: Arc::new(Coordinator::new(vec![node], config)?),
        })
    }

    /// The node's name (its URL without credentials).
    pub fn node_name(&self) -> &str {
        self.coordinator.nodes()[0].name()
    }
}

impl std::fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLock")
            .field("node", &self.node_name())
            .field("config", self.coordinator.config())
            .finish()
    }
}

impl_distributed_lock!(RedisLock);
