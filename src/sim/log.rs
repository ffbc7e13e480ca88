//! What a [`SimNode`](super::SimNode) logs: each request ([`OpRecord`]), its command
//! ([`Op`]), and what became of it ([`Outcome`]), down to the keys' values before and
//! after.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::NodeError;
use crate::token::LockToken;

/// A request as the node logged it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpRecord {
    /// The client the request came through
    /// ([`SimNode::for_client`](super::SimNode::for_client)), if any.
    pub client: Option<Arc<str>>,
    /// The command.
    pub op: Op,
    /// The keys it names, in the order sent.
    pub keys: Vec<String>,
    /// The token it carries (none for the counter commands).
    pub token: Option<LockToken>,
    /// When the client sent it, on tokio's clock.
    pub sent_at: Instant,
    /// What became of it.
    pub outcome: Outcome,
}

/// One of the commands of a lock node ([`NodeRequest`](crate::node::NodeRequest)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`NodeRequest::Lock`](crate::node::NodeRequest::Lock): `SET key token NX PX ttl` on
    /// every key, all or none.
    Lock {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::Unlock`](crate::node::NodeRequest::Unlock): compare-and-delete on
    /// each key.
    Unlock,
    /// [`NodeRequest::Extend`](crate::node::NodeRequest::Extend): compare-and-pexpire on
    /// every key, all or none.
    Extend {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::Holds`](crate::node::NodeRequest::Holds): whether every key holds the
    /// token.
    Holds,
    /// [`NodeRequest::ReadCounter`](crate::node::NodeRequest::ReadCounter): the highest of
    /// the fencing counters.
    ReadCounter,
    /// [`NodeRequest::RaiseCounter`](crate::node::NodeRequest::RaiseCounter): raise each
    /// fencing counter to at least `value`.
    RaiseCounter {
        /// The value asked for.
        value: u64,
    },
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// Sent, and not yet at the node (a request delay).
    InFlight,
    /// Not applied: the node was down, or refused the command; the client got `error`.
    Failed {
        /// When the node refused it, on tokio's clock.
        at: Instant,
        /// What the client was told.
        error: NodeError,
    },
    /// Not applied and never answered: lost on the way
    /// ([`SimNode::lose_replies`](super::SimNode::lose_replies)).
    Dropped {
        /// When it would have reached the node, on tokio's clock.
        at: Instant,
    },
    /// The node ran the command.
    Applied(Applied),
}

/// A command the node ran.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Applied {
    /// When it ran, on tokio's clock.
    pub at: Instant,
    /// When it ran, on the node's clock.
    pub node_time: Duration,
    /// The answer of a lock command: `true` when it took, deleted, extended or matched.
    /// Always `true` for the counter commands, which cannot refuse.
    pub result: bool,
    /// The answer of a counter command: the highest counter read, or the lowest counter
    /// after a raise.
    pub count: Option<u64>,
    /// The live lock value under each key just before (lock commands; empty otherwise).
    pub before: Vec<Option<Stored>>,
    /// The live lock value under each key just after (lock commands; empty otherwise).
    pub after: Vec<Option<Stored>>,
    /// Each counter just before (counter commands; empty otherwise; 0 when absent).
    pub counters_before: Vec<u64>,
    /// Each counter just after (counter commands; empty otherwise).
    pub counters_after: Vec<u64>,
    /// What became of the answer.
    pub reply: Reply,
}

/// A live value: the token stored under a key and when it expires on the node's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The token.
    pub token: LockToken,
    /// The node-clock reading at which the key expires.
    pub expires_at: Duration,
}

/// What became of the answer to an applied command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Not sent: the reply delay has not passed, or the client stopped waiting first.
    Pending,
    /// Sent to the client.
    Sent {
        /// When, on tokio's clock.
        at: Instant,
    },
    /// Never sent
    /// ([`SimNode::apply_but_lose_reply`](super::SimNode::apply_but_lose_reply)).
    Lost,
    /// The connection was reset before it could be sent (the node crashed or restarted);
    /// the client got a connection error.
    Reset {
        /// When the client got the error, on tokio's clock.
        at: Instant,
    },
}
