//! The nodes a command talks to, the lock over them, and the key a name maps to.

use std::time::Duration;

use quorumlock::node::redact_url;
use quorumlock::{LockConfig, LockError, LockGuard, RedisLock, Redlock};

use crate::args::GlobalArgs;
use crate::exit::{CliError, Kind};

/// Splits the node list given with `--nodes` or `QUORUMLOCK_NODES` into URLs.
pub fn node_urls(global: &GlobalArgs) -> Result<Vec<String>, CliError> {
    let urls = split_urls(global.nodes.as_deref().unwrap_or(""));
    if urls.is_empty() {
        return Err(CliError::new(Kind::Config, "no nodes given").hint(
            "pass --nodes redis://host:port,... or set QUORUMLOCK_NODES \
             (comma-separated redis:// URLs; 3 or 5 independent servers)",
        ));
    }
    Ok(urls)
}

/// The non-empty, trimmed entries of a comma-separated list.
fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The quorum of `nodes` nodes: `nodes / 2 + 1`.
pub fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The Redis key of `resource` under the key prefix, by the library's own rule
/// ([`LockConfig::key_for`]), for the commands that talk to the nodes directly. Fails on a
/// name that cannot be a lock.
pub fn lock_key(global: &GlobalArgs, resource: &str) -> Result<String, CliError> {
    let mut config = LockConfig::builder();
    if let Some(prefix) = &global.key_prefix {
        config = config.key_prefix(prefix.clone());
    }
    let config = config
        .build()
        .map_err(|error| CliError::from_lock(&LockError::Config(error)))?;
    config
        .key_for(resource)
        .map_err(|error| CliError::from_lock(&error))
}

/// Checks every URL up front, so that a malformed one is a configuration error (exit 78)
/// before any node is asked anything.
pub fn check_urls(urls: &[String]) -> Result<Vec<redis::Client>, CliError> {
    urls.iter()
        .map(|url| {
            redis::Client::open(url.as_str()).map_err(|error| {
                CliError::from_lock(&LockError::InvalidNode {
                    node: redact_url(url),
                    reason: error.to_string(),
                })
            })
        })
        .collect()
}

/// The per-node budget of the operator commands (`status`, `release`): `--node-timeout`,
/// or 1 s, which covers opening a connection as well as the command.
pub fn operator_timeout(global: &GlobalArgs) -> Duration {
    global.node_timeout.unwrap_or(Duration::from_secs(1))
}

/// The lock `run` takes: on one node, or a quorum of several.
pub enum AnyLock {
    /// One URL.
    Single(RedisLock),
    /// Several URLs.
    Quorum(Redlock),
}

impl AnyLock {
    /// Prepares the lock on `urls` (connections are made on first use).
    pub async fn connect(urls: &[String], config: LockConfig) -> Result<Self, CliError> {
        check_urls(urls)?;
        let lock = match urls {
            [url] => RedisLock::connect(url, config).await.map(AnyLock::Single),
            _ => Redlock::connect(urls, config).await.map(AnyLock::Quorum),
        };
        lock.map_err(|error| CliError::from_lock(&error))
    }

    /// One attempt.
    pub async fn try_acquire(&self, resource: &str) -> Result<LockGuard, LockError> {
        match self {
            AnyLock::Single(lock) => lock.try_acquire(resource).await,
            AnyLock::Quorum(lock) => lock.try_acquire(resource).await,
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(nodes: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            nodes: nodes.map(str::to_owned),
            key_prefix: None,
            node_timeout: None,
            connect_timeout: None,
            json: false,
            verbose: false,
        }
    }

    #[test]
    fn node_lists_are_split_and_trimmed() {
        let urls = node_urls(&global(Some(" redis://a:1, redis://b:2,,redis://c:3 ,"))).unwrap();
        assert_eq!(urls, ["redis://a:1", "redis://b:2", "redis://c:3"]);
    }

    #[test]
    fn no_nodes_is_a_config_error_that_says_what_to_do() {
        for nodes in [None, Some(""), Some(" , ")] {
            let err = node_urls(&global(nodes)).unwrap_err();
            assert_eq!(err.code(), 78);
            let text = err.to_string();
            assert!(text.contains("--nodes") && text.contains("QUORUMLOCK_NODES"));
        }
    }

    #[test]
    fn malformed_urls_are_config_errors_without_passwords() {
        let err = check_urls(&["redis://:hunter2@host:notaport".to_owned()]).unwrap_err();
        assert_eq!(err.code(), 78);
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn keys_follow_the_prefix_rule() {
        let mut args = global(None);
        assert_eq!(lock_key(&args, "job").unwrap(), "job");
        args.key_prefix = Some("locks:".to_owned());
        assert_eq!(lock_key(&args, "job").unwrap(), "locks:job");
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn names_are_checked() {
        let args = global(None);
        assert_eq!(lock_key(&args, "").unwrap_err().code(), 64);
        assert_eq!(lock_key(&args, &"x".repeat(1025)).unwrap_err().code(), 64);
        assert!(lock_key(&args, "job").is_ok());
    }
}
