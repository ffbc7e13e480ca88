//! The node abstraction: the commands the lock algorithms send to one Redis node.
//!
//! The quorum coordinator only ever talks to a [`LockNode`], so the same code runs on real
//! Redis ([`RedisNode`]) and on any other implementation, such as an in-memory node for
//! tests. An implementation must keep the contract of each method: every delete and every
//! expiry change is conditional on the caller's token, nothing but
//! [`try_lock`](LockNode::try_lock) ever creates a lock key, and a lock over several keys is
//! taken or extended on one node for all of them or for none.

mod identity;
mod link;
mod redis;
mod releases;
pub(crate) mod scripts;
mod unawaited;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::broadcast;

use crate::error::NodeError;
use crate::token::LockToken;

pub use self::redis::{client_name, RedisNode};
pub(crate) use self::redis::{clients_for_urls, connect_checked, named_clients};

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

    /// Starts watching the announcements of keys reserved for the queued waiters of
    /// `client` ([`QueuePlace::waiter`] begins with `client` and a colon), so that a
    /// release wakes the one waiter it was handed to, and no other. `None` (the default)
    /// means the node cannot announce reservations; queued waiters then claim them on their
    /// retry delay.
    fn watch_reservations<'a>(&'a self, client: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        let _ = client;
        async { None }.boxed()
    }

    /// Whether a request to this node goes out when its future is first polled, and then
    /// takes effect on the node whether or not anybody awaits its answer: true for a
    /// connected Redis node, whose request is one command queued on the open connection.
    ///
    /// The coordinator then leaves the requests whose answers it no longer needs (the
    /// last nodes of a decided lock or unlock round) unawaited, instead of driving them to
    /// the end in a background task. The default, `false`, is always correct.
    fn sends_when_polled(&self) -> bool {
        false
    }

    /// Like [`try_lock`](Self::try_lock), for a waiter that races for `keys` and watches
    /// releases of `keys[0]` (see [`watch_releases`](Self::watch_releases)): when the node
    /// refuses, it is asked to announce the key's releases for the next `interest`.
    ///
    /// A node that announces releases may skip the announcement when nobody asked for it
    /// lately, so that an uncontended release costs no `PUBLISH`; a waiter renews its
    /// interest with each attempt. The default is `try_lock`: a node whose announcements
    /// cost nothing need not be asked.
    fn try_lock_watching<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        interest: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        let _ = interest;
        self.try_lock(keys, token, ttl)
    }

    /// Like [`try_lock`](Self::try_lock), for a waiter that keeps a `place` in the node's
    /// queue of one of `keys`, the one it is blocked on (held, or reserved for another
    /// waiter): the keys may also be taken when the node reserved them for this waiter, and
    /// when the node refuses, the waiter is queued (or its place refreshed or moved), and a
    /// key reserved for it that it cannot use yet goes to the next in that key's line.
    ///
    /// A node with a queue reserves a released key for the first live waiter in line, so
    /// that waiters get the lock in the order they came (see [`QueuePlace`]). The default
    /// has no queue: it is `try_lock`, and waiters race as with other Redlock clients.
    fn try_lock_queued<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        place: &'a QueuePlace,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        let _ = place;
        self.try_lock(keys, token, ttl)
    }

    /// Removes `waiter` from the queue of each of `keys`, and hands each reservation it had
    /// to the next waiter in that key's line: for a waiter that gave up or won the lock
    /// elsewhere. The default (no queue) does nothing.
    fn leave_queue<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        waiter: &'a LockToken,
    ) -> BoxFuture<'a, Result<(), NodeError>> {
        let _ = (keys, waiter);
        async { Ok(()) }.boxed()
    }
}

/// A blocking acquisition's place in the nodes' queues of a contended lock.
///
/// With [`LockConfig::fair`](crate::LockConfig::fair) on (the default), a blocking acquire
/// that finds the lock held joins a queue on every node, ordered by `ticket` (the same on
/// every node, so the nodes agree on who is first). A release hands the key to the first
/// live waiter in line by *reserving* it for that waiter: a reserved key is not free, so
/// neither a newcomer nor the holder that just released can take it; only the waiter it
/// is reserved for can, by [`LockNode::try_lock_queued`]. The release announcement names
/// that waiter, so it alone wakes and attempts.
///
/// Places are soft state, never needed for safety (a reserved key is only ever taken
/// with `NX` semantics, under the quorum rule): a place lapses `lifetime` after the
/// waiter last refreshed it, and a reservation lapses when the place would have, so a
/// waiter that died holds the line up for at most `lifetime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlace {
    /// Identifies the waiter in the queue: `<client>:<random>`, where `client` names the
    /// lock client whose [`watch_reservations`](LockNode::watch_reservations) hears of it,
    /// and the random part is drawn once per blocking acquisition.
    pub waiter: LockToken,
    /// The waiter's position: lower goes first. The wall-clock time, in microseconds, at
    /// which the acquisition began, so waiters of different processes queue first come
    /// first served (as far as their clocks agree; ties go by `waiter`).
    pub ticket: u64,
    /// How long the place lasts without being refreshed; every queued attempt refreshes it.
    pub lifetime: Duration,
}

/// A release that a node announced; see [`ReleaseWatch`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// The waiter the released key is now reserved for ([`QueuePlace::waiter`]), or `None`
    /// when it is free for anybody.
    pub next_waiter: Option<Arc<str>>,
}

/// Announcements of releases on one node; see [`LockNode::watch_releases`] and
/// [`LockNode::watch_reservations`].
///
/// It wraps a [`broadcast`] receiver of the node's [`Announcement`]s, and a registration
/// that the node keeps while any watch sharing it is alive (dropped with the last of them,
/// for example to unsubscribe). Cloning a watch shares the registration and sees only the
/// announcements made after the clone.
pub struct ReleaseWatch {
    announcements: broadcast::Receiver<Announcement>,
    registration: Arc<dyn std::any::Any + Send + Sync>,
}

impl ReleaseWatch {
    /// A watch over `announcements`, keeping `registration` alive as long as the watch.
    pub fn new(
        announcements: broadcast::Receiver<Announcement>,
        registration: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        ReleaseWatch {
            announcements,
            registration: Arc::from(registration),
        }
    }

    /// Forgets the releases announced so far.
    pub(crate) fn mark_seen(&mut self) {
        self.announcements = self.announcements.resubscribe();
    }

    /// The next announcement not yet seen; never resolves once the node stops announcing.
    /// When announcements were missed (more arrived than the channel keeps), it answers
    /// "free for anybody", which makes the waiter try at once rather than sleep.
    pub(crate) async fn next_release(&mut self) -> Announcement {
        match self.announcements.recv().await {
            Ok(announcement) => announcement,
            Err(broadcast::error::RecvError::Lagged(_)) => Announcement::default(),
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

impl Clone for ReleaseWatch {
    fn clone(&self) -> Self {
        ReleaseWatch {
            announcements: self.announcements.resubscribe(),
            registration: Arc::clone(&self.registration),
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
