//! The node abstraction: the requests the lock algorithms send to one lock node.
//!
//! The quorum coordinator only ever talks to a [`LockNode`], so the same code runs on real
//! Redis ([`RedisNode`]) and on any other implementation, such as an in-memory node for
//! tests. A node answers one [`NodeRequest`] at a time with a [`NodeReply`]; both enums
//! are `#[non_exhaustive]`, so that a new kind of request (and its reply) can be added
//! without breaking the nodes written before it, which answer it
//! [`Unsupported`](NodeReply::Unsupported). The typed calls on `dyn LockNode`
//! ([`try_lock`](NodeRequest::Lock), [`unlock`](NodeRequest::Unlock), ...; see the
//! implementations on `dyn LockNode` below the trait) send a request and read its reply,
//! and give an unsupported optional request its plain meaning: a queued or watching lock
//! attempt is a plain one, leaving a queue does nothing, and a watch is not started.
//!
//! An implementation must keep the contract of each request: every delete and every
//! expiry change is conditional on the caller's token, nothing but a lock request ever
//! creates a lock key, and a lock over several keys is taken or extended on one node for
//! all of them or for none.

mod connect;
mod identity;
mod link;
mod redis;
mod releases;
mod request;
mod scripts;
mod silence;
mod unawaited;
mod watch;

use std::fmt;

use futures::future::BoxFuture;

use crate::error::NodeError;

pub use self::connect::{client_name, redact_url};
pub(crate) use self::connect::{clients_for_urls, connect_checked, named_clients};
pub use self::redis::RedisNode;
pub use self::request::{NodeReply, NodeRequest, QueuePlace};
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

    /// Sends `request` to the node and answers with the node's reply: the reply its
    /// variant documents, or [`Unsupported`](NodeReply::Unsupported) for a request this
    /// node does not implement.
    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>>;
}

/// Hints about how a node handles requests, which let the coordinator save work. Nothing
/// depends on them for correctness: [`NodeHints::new`] claims nothing, and is always right.
///
/// ```
/// # use quorumlock::node::NodeHints;
/// let hints = NodeHints::new().sends_when_polled(true);
/// assert!(hints.sends_when_polled);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHints {
    /// Whether a request to this node goes out when its future is first polled, and then
    /// takes effect on the node whether or not anybody awaits its answer: true for a
    /// connected Redis node, whose request is one command queued on the open connection.
    ///
    /// The coordinator then leaves the requests whose answers it no longer needs (the
    /// last nodes of a decided lock or unlock round) unawaited, instead of driving them to
    /// the end in a background task.
    pub sends_when_polled: bool,
}

impl NodeHints {
    /// Hints that claim nothing.
    pub const fn new() -> Self {
        NodeHints {
            sends_when_polled: false,
        }
    }

    /// These hints, with [`sends_when_polled`](Self::sends_when_polled) set to `sends`.
    pub const fn sends_when_polled(mut self, sends: bool) -> Self {
        self.sends_when_polled = sends;
        self
    }
}
