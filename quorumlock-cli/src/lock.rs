//! The lock `run` and `bench` take over the nodes: the library's single-server lock on one
//! URL, its quorum lock on several, behind one type so that each command is written once.

use std::time::Duration;

use quorumlock::{LockConfig, LockError, LockGuard, LockMetrics, RedisLock, Redlock};

use crate::args::GlobalArgs;
use crate::exit::CliError;
use crate::nodes::{check_urls, is_cluster, is_sentinel, tls_options};

/// The lock `run` takes: on one node, or a quorum of several.
pub enum AnyLock {
    /// One URL.
    Single(RedisLock),
    /// Several URLs.
    Quorum(Redlock),
}

impl AnyLock {
    /// Prepares the lock on `urls`, with the TLS options of `global`.
    pub async fn connect(
        global: &GlobalArgs,
        urls: &[String],
        config: LockConfig,
    ) -> Result<Self, CliError> {
        if urls.iter().any(|url| is_cluster(url) || is_sentinel(url)) {
            // The library makes the clients of cluster and Sentinel members itself.
            let tls = tls_options(global)?;
            let lock = match urls {
                [url] => RedisLock::connect_tls(url, &tls, config)
                    .await
                    .map(AnyLock::Single),
                _ => Redlock::connect_tls(urls, &tls, config)
                    .await
                    .map(AnyLock::Quorum),
            };
            return lock.map_err(|error| CliError::from_lock(&error));
        }
        let mut clients = check_urls(global, urls)?;
        let lock = match clients.len() {
            1 => RedisLock::from_client(clients.remove(0), config)
                .await
                .map(AnyLock::Single),
            _ => Redlock::from_clients(clients, config)
                .await
                .map(AnyLock::Quorum),
        };
        lock.map_err(|error| CliError::from_lock(&error))
    }

    /// Attempts until `timeout` (the configured retry count permitting).
    pub async fn acquire_timeout(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        match self {
            AnyLock::Single(lock) => lock.acquire_timeout(resource, timeout).await,
            AnyLock::Quorum(lock) => lock.acquire_timeout(resource, timeout).await,
        }
    }

    /// How many nodes must agree.
    pub fn quorum(&self) -> usize {
        match self {
            AnyLock::Single(_) => 1,
            AnyLock::Quorum(lock) => lock.quorum(),
        }
    }

    /// The lock's counters so far.
    pub fn metrics(&self) -> LockMetrics {
        match self {
            AnyLock::Single(lock) => lock.metrics(),
            AnyLock::Quorum(lock) => lock.metrics(),
        }
    }
}
