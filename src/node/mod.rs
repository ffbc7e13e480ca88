//! The node contract: the requests the lock algorithms send to one lock node, and what a
//! node must answer.
//!
//! The quorum coordinator only ever talks to a [`LockNode`], so the same code runs on real
//! Redis ([`RedisNode`](crate::backend::RedisNode)) and on any other implementation, such
//! as the in-memory node of the simulation (`sim`, feature `test-util`). This module is
//! the floor they all stand on: it names no backend, and how a request is carried out on
//! a Redis server is the [`protocol`](crate::protocol)'s. A node answers one [`NodeRequest`] at a time with a [`NodeReply`]; both enums
//! are `#[non_exhaustive]`, so that a new kind of request (and its reply) can be added
//! without breaking the nodes written before it, which answer it
//! [`Unsupported`](NodeReply::Unsupported). The typed calls on `dyn LockNode` (`try_lock`,
//! `unlock`, ...: see the implementations on `dyn LockNode` below the trait's methods)
//! send a request and read its reply, and give an unsupported optional request its plain
//! meaning: a queued or watching lock attempt is a plain one, leaving a queue does
//! nothing, and a watch is not started.
//!
//! An implementation must keep the contract of each request: every delete and every
//! expiry change is conditional on the caller's token, nothing but a lock request ever
//! creates a lock key, and a lock over several keys is taken or extended on one node for
//! all of them or for none.

mod grant_stamp;
mod hints;
mod request;
mod shared_encoding;
mod watch;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::error::NodeError;
use crate::token::LockToken;

pub use self::grant_stamp::GrantStamp;
pub use self::hints::NodeHints;
pub use self::request::{Beside, NodeReply, NodeRequest, QueuePlace, Renewal};
pub use self::shared_encoding::SharedEncoding;
pub(crate) use self::watch::WatchedChannels;
pub use self::watch::{Announcement, ReleaseWatch};

/// One independent lock node, as the lock algorithms see it: a name, hints, and one call
/// that answers a [`NodeRequest`].
///
/// A lock request, unlock, extension or holds check answers
/// [`Done(true)`](NodeReply::Done) when the node did what was asked,
/// [`Done(false)`](NodeReply::Done) when it answered but refused (the key is absent or
/// holds another token), and `Err` when it did not answer properly. Implementations need
/// no timeouts of their own: the coordinator bounds every call by the configured per-node
/// timeout.
///
/// ```
/// use futures::future::BoxFuture;
/// use futures::FutureExt;
/// use quorumlock::node::{LockNode, NodeReply, NodeRequest};
/// use quorumlock::NodeError;
///
/// /// A node that stays out of every lock: it answers, and refuses.
/// #[derive(Debug)]
/// struct Abstainer;
///
/// impl LockNode for Abstainer {
///     fn name(&self) -> &str {
///         "abstainer"
///     }
///
///     fn call<'a>(
///         &'a self,
///         request: NodeRequest<'a>,
///     ) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
///         let reply = match request {
///             NodeRequest::Lock { .. } | NodeRequest::Unlock { .. } => NodeReply::Done(false),
///             NodeRequest::Extend { .. } | NodeRequest::Holds { .. } => NodeReply::Done(false),
///             NodeRequest::ReadCounter { .. } => NodeReply::Counter(0),
///             // No queue, no announcements, no fencing: the typed calls know what to do.
///             _ => NodeReply::Unsupported,
///         };
///         async move { Ok(reply) }.boxed()
///     }
/// }
/// ```
pub trait LockNode: Send + Sync + fmt::Debug {
    /// A name for logs and errors, such as the node's URL. It must never contain a
    /// password.
    fn name(&self) -> &str;

    /// What the coordinator may assume about how this node handles requests, read before
    /// each use. The default, [`NodeHints::new`], assumes nothing and is always correct.
    fn hints(&self) -> NodeHints {
        NodeHints::new()
    }

    /// Why the node counts as failed on every request now without being asked, if it
    /// does: its server was refused (a replica, say), for
    /// [`NodeMetrics::excluded`](crate::NodeMetrics::excluded). The default says nothing.
    fn excluded(&self) -> Option<String> {
        None
    }

    /// Sends `request` to the node and answers with the node's reply: the reply its
    /// variant documents, or [`Unsupported`](NodeReply::Unsupported) for a request this
    /// node does not implement.
    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>>;
}

/// The typed requests: each sends one [`NodeRequest`] and reads the reply it expects. A
/// reply of another kind is an error, and so is an unsupported core request; an
/// unsupported optional request falls back to its plain meaning.
impl<'n> dyn LockNode + 'n {
    /// [`NodeRequest::Lock`]: whether the lock was taken.
    pub fn try_lock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::Lock { keys, token, ttl }, done)
    }

    /// [`NodeRequest::Unlock`]: whether every key held `token` and was deleted.
    pub fn unlock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::Unlock { keys, token }, done)
    }

    /// [`NodeRequest::Extend`]: whether the TTLs were set.
    pub fn extend<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::Extend { keys, token, ttl }, done)
    }

    /// [`NodeRequest::ExtendListed`], or a plain [`NodeRequest::Extend`] on a node that
    /// does not support it: whether the TTLs were set.
    pub fn extend_listed<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        name: &'a str,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        let request = NodeRequest::ExtendListed {
            keys,
            token,
            ttl,
            name,
        };
        self.or_plain_extend(request, (keys, token, ttl))
    }

    /// [`NodeRequest::ExtendLeader`], or a plain [`NodeRequest::Extend`] on a node that
    /// does not support it: whether the TTLs were set.
    pub fn extend_leader<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        let request = NodeRequest::ExtendLeader { keys, token, ttl };
        self.or_plain_extend(request, (keys, token, ttl))
    }

    /// [`NodeRequest::ExtendMany`]: for each renewal, whether its TTLs were set. On a node
    /// that does not support it, each renewal goes as its own request, all at once, and
    /// the first failure fails the whole (the caller counts the node as failed for every
    /// renewal, which only costs it a retry). `encoding` is shared with the other nodes
    /// the same renewals go to.
    pub fn extend_many<'a>(
        &'a self,
        renewals: &'a [Renewal<'a>],
        ttl: Duration,
        encoding: &'a SharedEncoding,
    ) -> impl Future<Output = Result<Vec<bool>, NodeError>> + Send + 'a {
        async move {
            let request = NodeRequest::ExtendMany {
                renewals,
                ttl,
                encoding,
            };
            match self.call(request).await? {
                NodeReply::Renewed(flags) if flags.len() == renewals.len() => Ok(flags),
                NodeReply::Unsupported => {
                    let one = |renewal: &'a Renewal<'a>| {
                        let Renewal { keys, token, .. } = *renewal;
                        match renewal.beside {
                            Beside::HolderList(name) => {
                                self.extend_listed(keys, token, ttl, name).boxed()
                            }
                            Beside::LeaderRecord => self.extend_leader(keys, token, ttl).boxed(),
                            _ => self.extend(keys, token, ttl).boxed(),
                        }
                    };
                    futures::future::try_join_all(renewals.iter().map(one)).await
                }
                other => Err(unexpected(request.what(), &other)),
            }
        }
    }

    /// [`NodeRequest::Holds`]: whether every key holds `token`.
    pub fn holds<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::Holds { keys, token }, done)
    }

    /// [`NodeRequest::ReadCounter`]: the highest of the counters.
    pub fn read_counter<'a>(
        &'a self,
        keys: &'a [Arc<str>],
    ) -> impl Future<Output = Result<u64, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::ReadCounter { keys }, counter)
    }

    /// [`NodeRequest::RaiseCounter`]: the lowest of the counters after the raise.
    pub fn raise_counter<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        value: u64,
    ) -> impl Future<Output = Result<u64, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::RaiseCounter { keys, value }, counter)
    }

    /// [`NodeRequest::LockWatching`], or a plain [`NodeRequest::Lock`] on a node
    /// that does not support it.
    pub fn try_lock_watching<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        interest: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        let request = NodeRequest::LockWatching {
            keys,
            token,
            ttl,
            interest,
        };
        self.or_plain_lock(request, (keys, token, ttl))
    }

    /// [`NodeRequest::LockQueued`], or a plain [`NodeRequest::Lock`] on a node
    /// without a queue. With a `stamp`, the place takes grants.
    pub fn try_lock_queued<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        place: &'a QueuePlace,
        stamp: Option<u64>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        let request = NodeRequest::LockQueued {
            keys,
            token,
            ttl,
            place,
            stamp,
        };
        self.or_plain_lock(request, (keys, token, ttl))
    }

    /// [`NodeRequest::LeaveQueue`]; nothing to do on a node without a queue.
    pub fn leave_queue<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        waiter: &'a LockToken,
    ) -> impl Future<Output = Result<(), NodeError>> + Send + Unpin + 'a {
        let request = NodeRequest::LeaveQueue { keys, waiter };
        self.call(request).map(move |reply| match reply? {
            NodeReply::Done(_) | NodeReply::Unsupported => Ok(()),
            other => Err(unexpected(request.what(), &other)),
        })
    }

    /// [`NodeRequest::WatchReleases`]; `None` when the node cannot announce releases (or
    /// failed to start the watch), and waiters rely on their retry delay.
    pub fn watch_releases<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        self.watch(NodeRequest::WatchReleases { key })
    }

    /// [`NodeRequest::WatchReservations`]; `None` when the node cannot announce
    /// reservations (or failed to start the watch), and queued waiters claim them on their
    /// retry delay.
    pub fn watch_reservations<'a>(
        &'a self,
        client: &'a str,
    ) -> BoxFuture<'a, Option<ReleaseWatch>> {
        self.watch(NodeRequest::WatchReservations { client })
    }

    /// [`NodeRequest::LockShared`]: whether the reader's entry was taken; a name held in
    /// another mode is [`NodeError::HeldAs`]. Unsupported, an error: a node that cannot
    /// keep readers out of a writer's way must not grant either.
    pub fn try_lock_shared<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        writer: &'a str,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        let request = NodeRequest::LockShared {
            keys,
            token,
            ttl,
            writer,
        };
        self.claim(request)
    }

    /// [`NodeRequest::LockPermit`]: whether the permit's slot was taken; a name held in
    /// another mode is [`NodeError::HeldAs`]. Unsupported, an error, as for
    /// `try_lock_shared`.
    pub fn try_lock_permit<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        name: &'a str,
        permits: u32,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        let request = NodeRequest::LockPermit {
            keys,
            token,
            ttl,
            name,
            permits,
        };
        self.claim(request)
    }

    /// Sends a shared claim: its refusal for another mode comes back as the error that
    /// names the mode, which the round counts as a refusal (not as a failed node).
    fn claim<'a>(
        &'a self,
        request: NodeRequest<'a>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        let what = request.what();
        self.call(request).map(move |reply| match reply? {
            NodeReply::Done(done) => Ok(done),
            NodeReply::HeldAs(mode) => Err(NodeError::HeldAs(mode)),
            other => Err(unexpected(what, &other)),
        })
    }

    /// [`NodeRequest::LockExclusive`]: whether the write side was taken. Unsupported, an
    /// error, as for `try_lock_shared`.
    pub fn try_lock_exclusive<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        waiting: Option<Duration>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        let request = NodeRequest::LockExclusive {
            keys,
            token,
            ttl,
            waiting,
        };
        self.expect(request, done)
    }

    /// [`NodeRequest::Proclaim`]: whether the record was written.
    pub fn proclaim<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        record: &'a str,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + Unpin + 'a {
        self.expect(
            NodeRequest::Proclaim {
                keys,
                token,
                record,
            },
            done,
        )
    }

    /// [`NodeRequest::ReadProclamation`]: the current leader's record, if any.
    pub fn read_proclamation<'a>(
        &'a self,
        keys: &'a [Arc<str>],
    ) -> impl Future<Output = Result<Option<String>, NodeError>> + Send + Unpin + 'a {
        self.expect(NodeRequest::ReadProclamation { keys }, text)
    }

    /// Whether the node's requests go out when first polled ([`NodeHints`]).
    pub(crate) fn sends_when_polled(&self) -> bool {
        self.hints().sends_when_polled
    }

    /// Whether the node applies requests in the order sent ([`NodeHints`]).
    pub(crate) fn applies_in_order(&self) -> bool {
        self.hints().applies_in_order
    }

    /// Sends `request` and reads its reply with `read`.
    ///
    /// The reading is mapped onto the node's own future rather than boxed again, so that a
    /// typed call costs the one allocation of [`call`](LockNode::call).
    fn expect<'a, T: 'a>(
        &'a self,
        request: NodeRequest<'a>,
        read: fn(NodeReply) -> Result<T, NodeReply>,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + Unpin + 'a {
        let what = request.what();
        self.call(request)
            .map(move |reply| read(reply?).map_err(|other| unexpected(what, &other)))
    }

    /// Sends the lock attempt `request` for `keys`; when unsupported, a plain
    /// [`NodeRequest::Lock`] instead.
    fn or_plain_lock<'a>(
        &'a self,
        request: NodeRequest<'a>,
        (keys, token, ttl): (&'a [Arc<str>], &'a LockToken, Duration),
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        self.or_plain(request, move || self.try_lock(keys, token, ttl))
    }

    /// Sends the extension `request` of `keys`; when unsupported, a plain
    /// [`NodeRequest::Extend`] instead.
    fn or_plain_extend<'a>(
        &'a self,
        request: NodeRequest<'a>,
        (keys, token, ttl): (&'a [Arc<str>], &'a LockToken, Duration),
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a {
        self.or_plain(request, move || self.extend(keys, token, ttl))
    }

    /// Sends `request`; when unsupported, what `plain` sends instead. Not boxed again:
    /// the node's own future is the one allocation of the request.
    fn or_plain<'a, P, F>(
        &'a self,
        request: NodeRequest<'a>,
        plain: P,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'a
    where
        P: FnOnce() -> F + Send + 'a,
        F: Future<Output = Result<bool, NodeError>> + Send + 'a,
    {
        async move {
            match self.call(request).await? {
                NodeReply::Unsupported => plain().await,
                reply => done(reply).map_err(|other| unexpected(request.what(), &other)),
            }
        }
    }

    /// Starts the watch `request`; `None` when the node does not give one.
    fn watch<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Option<ReleaseWatch>> {
        self.call(request)
            .map(|reply| match reply {
                Ok(NodeReply::Watch(watch)) => Some(watch),
                _ => None,
            })
            .boxed()
    }
}

/// The answer of a [`Done`](NodeReply::Done) reply.
fn done(reply: NodeReply) -> Result<bool, NodeReply> {
    match reply {
        NodeReply::Done(done) => Ok(done),
        other => Err(other),
    }
}

/// The text of a [`Text`](NodeReply::Text) reply.
fn text(reply: NodeReply) -> Result<Option<String>, NodeReply> {
    match reply {
        NodeReply::Text(text) => Ok(text),
        other => Err(other),
    }
}

/// The value of a [`Counter`](NodeReply::Counter) reply.
fn counter(reply: NodeReply) -> Result<u64, NodeReply> {
    match reply {
        NodeReply::Counter(value) => Ok(value),
        other => Err(other),
    }
}

/// The error for a `reply` that does not answer the request `what`.
fn unexpected(what: &'static str, reply: &NodeReply) -> NodeError {
    match reply {
        NodeReply::Unsupported => NodeError::Unsupported(what),
        other => NodeError::Redis(format!("unexpected reply to {what}: {other:?}")),
    }
}
