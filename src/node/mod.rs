//! The node abstraction: the commands the lock algorithms send to one Redis node.
//!
//! The quorum coordinator only ever talks to a [`LockNode`], so the same code runs on real
//! Redis ([`RedisNode`]) and on any other implementation, such as an in-memory node for
//! tests. An implementation must keep the contract of each method: every delete and every
//! expiry change is conditional on the caller's token, nothing but
//! [`try_lock`](LockNode::try_lock) ever creates a lock key, and a lock over several keys is
//! taken or extended on one node for all of them or for none.

mod redis;
mod releases;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;

use crate::error::NodeError;
use crate::token::LockToken;

pub use self::redis::RedisNode;

/// One independent lock node, as the lock algorithms see it.
///
/// Every method answers `Ok(true)` when the node did what was asked, `Ok(false)` when it
/// answered but refused (the key is absent or holds another token), and `Err` when it did
/// not answer properly. Implementations need no timeouts of their own: the coordinator
/// bounds every call by the configured per-node timeout.
pub trait LockNode: Send + Sync + fmt::Debug {
    /// A name for logs and errors, such as the node's URL. It must never contain a password.
    fn name(&self) -> &str;

    /// Sets every key to `token` with a TTL, only if none of them exists, atomically: all
    /// keys or none (`SET key token NX PX ttl` for one key). `Ok(true)` means the lock was
    /// taken.
    fn try_lock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>>;

    /// Deletes each key that holds `token` (compare-and-delete), leaving keys that hold
    /// another token alone. `Ok(true)` means every key held `token` and was deleted.
    fn unlock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>>;

    /// Sets the TTL of every key, only if all of them hold `token` (compare-and-pexpire):
    /// all keys or none. Never creates a key. `Ok(true)` means the TTLs were set.
    fn extend<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>>;

    /// Whether every key currently holds `token`.
    fn holds<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>>;

    /// Reads the fencing counters at `keys` and returns the highest (0 for a counter that
    /// does not exist).
    fn read_counter<'a>(&'a self, keys: &'a [Arc<str>]) -> BoxFuture<'a, Result<u64, NodeError>>;

    /// Raises each fencing counter at `keys` to `value` unless it is already higher, and
    /// returns the lowest value they hold afterwards. Never lowers a counter, never sets an
    /// expiry.
    fn raise_counter<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        value: u64,
    ) -> BoxFuture<'a, Result<u64, NodeError>>;

    /// Starts watching releases of `key` on this node, so that a waiter can retry as soon as
    /// the lock is free instead of sleeping out its retry delay. `None` (the default) means
    /// the node cannot announce releases; waiters then rely on the delay alone.
    fn watch_releases<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        let _ = key;
        async { None }.boxed()
    }
}

/// Announcements of a key's releases on one node; see [`LockNode::watch_releases`].
///
/// It wraps a [`watch`] channel whose value a node bumps on every release of the key, and a
/// registration that the node keeps while the watch is alive (dropped with it, for example
/// to unsubscribe).
pub struct ReleaseWatch {
    notifications: watch::Receiver<u64>,
    _registration: Box<dyn std::any::Any + Send + Sync>,
}

impl ReleaseWatch {
    /// A watch over `notifications`, keeping `registration` alive as long as the watch.
    pub fn new(
        notifications: watch::Receiver<u64>,
        registration: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        ReleaseWatch {
            notifications,
            _registration: registration,
        }
    }

    /// Forgets the releases announced so far.
    pub(crate) fn mark_seen(&mut self) {
        self.notifications.borrow_and_update();
    }

    /// Resolves at the first release announced since the last [`mark_seen`](Self::mark_seen);
    /// never, once the node stops announcing.
    pub(crate) fn next_release(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut notifications = self.notifications.clone();
        async move {
            if notifications.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseWatch").finish_non_exhaustive()
    }
}

/// A URL with any user name, password and query removed, fit for logs and errors.
///
/// ```
/// # use quorumlock::node::redact_url;
/// assert_eq!(redact_url("redis://:s3cret@10.0.0.1:6379/2"), "redis://10.0.0.1:6379/2");
/// assert_eq!(redact_url("rediss://user:pw@host:6380?password=x"), "rediss://host:6380");
/// assert_eq!(redact_url("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
/// ```
pub fn redact_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = without_query.split_once("://") else {
        // Not a URL we understand: show only what cannot be a credential.
        return "<unparseable node address>".to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redaction_removes_every_credential() {
        for (url, expected) in [
            ("redis://127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://:pw@127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://user:p@ss@host:1/0", "redis://host:1/0"),
            ("redis://host:1/0?password=pw", "redis://host:1/0"),
            (
                "redis+unix:///tmp/redis.sock",
                "redis+unix:///tmp/redis.sock",
            ),
            ("no-scheme:pw@host", "<unparseable node address>"),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }
}
