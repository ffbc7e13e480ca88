//! What a [`SimNode`](super::SimNode) logs: each request ([`OpRecord`]), its command
//! ([`Op`]), and what became of it ([`Outcome`]), down to the keys' values before and
//! after.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::NodeError;
use crate::node::NodeRequest;
use crate::protocol::keys::RESERVED_PREFIX;
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
    /// The token it carries (none for the counter commands and for leaving a queue).
    pub token: Option<LockToken>,
    /// The waiter it acts for: a queued lock attempt's place, or the waiter leaving the
    /// queues ([`QueuePlace::waiter`](crate::node::QueuePlace::waiter)).
    pub waiter: Option<LockToken>,
    /// When the client sent it, on tokio's clock.
    pub sent_at: Instant,
    /// What became of it: of its last sending, when the client sent it more than once.
    pub outcome: Outcome,
    /// What became of its earlier sendings, oldest first: a script call the node answered
    /// `NOSCRIPT` (then the client loaded the script and sent the call again), or one that
    /// failed on a broken connection before the client sent it again. Empty when the
    /// request went out once.
    pub earlier: Vec<Outcome>,
    /// How many times the client loaded the request's script (`SCRIPT LOAD`) after the
    /// node answered `NOSCRIPT`.
    pub script_loads: u32,
}

impl OpRecord {
    /// Every outcome of the request's sendings, oldest first: [`earlier`](Self::earlier),
    /// then [`outcome`](Self::outcome).
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        self.earlier.iter().chain(std::iter::once(&self.outcome))
    }
}

/// One of the requests of a lock node ([`NodeRequest`](crate::node::NodeRequest)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// [`NodeRequest::Lock`](crate::node::NodeRequest::Lock): `SET key token NX PX ttl` on
    /// every key, all or none.
    Lock {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::LockWatching`](crate::node::NodeRequest::LockWatching): a lock
    /// attempt that marks the key as watched when refused.
    LockWatching {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::LockQueued`](crate::node::NodeRequest::LockQueued): a queued waiter's
    /// lock attempt ([`OpRecord::waiter`] names the waiter).
    LockQueued {
        /// The TTL asked for.
        ttl: Duration,
        /// How long the waiter's place lasts from this attempt
        /// ([`QueuePlace::lifetime`](crate::node::QueuePlace::lifetime)).
        lifetime: Duration,
        /// The refresh's stamp as this node got it, for a waiter of the direct grant: the
        /// refresh's number and the node's index ([`GrantStamp`](crate::node::GrantStamp)).
        stamp: Option<u64>,
    },
    /// [`NodeRequest::LeaveQueue`](crate::node::NodeRequest::LeaveQueue): a waiter
    /// ([`OpRecord::waiter`]) leaves the keys' queues.
    LeaveQueue,
    /// [`NodeRequest::Unlock`](crate::node::NodeRequest::Unlock): compare-and-delete on
    /// each key.
    Unlock,
    /// [`NodeRequest::Extend`](crate::node::NodeRequest::Extend): compare-and-pexpire on
    /// every key, all or none; also the extensions that keep a holder list or a leader
    /// record beside the keys ([`ExtendListed`](crate::node::NodeRequest::ExtendListed),
    /// [`ExtendLeader`](crate::node::NodeRequest::ExtendLeader)).
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
    /// [`NodeRequest::LockShared`](crate::node::NodeRequest::LockShared): a reader's
    /// entry of a read-write lock.
    LockShared {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::LockExclusive`](crate::node::NodeRequest::LockExclusive): the write
    /// side of a read-write lock.
    LockExclusive {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::LockPermit`](crate::node::NodeRequest::LockPermit): a permit slot
    /// of a semaphore.
    LockPermit {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`NodeRequest::Proclaim`](crate::node::NodeRequest::Proclaim): an election
    /// leader's record.
    Proclaim,
    /// [`NodeRequest::ReadProclamation`](crate::node::NodeRequest::ReadProclamation): the
    /// current leader's record.
    ReadProclamation,
    /// [`NodeRequest::ExtendMany`](crate::node::NodeRequest::ExtendMany): a session's
    /// extensions of many leases in one request; the record's keys are its first lease's.
    ExtendMany {
        /// The TTL asked for.
        ttl: Duration,
        /// How many leases it extends.
        leases: usize,
    },
}

impl Op {
    /// Whether this is a lock attempt of any kind (plain, watching, queued, a side of a
    /// read-write lock, or a semaphore's permit).
    pub fn is_lock(&self) -> bool {
        matches!(
            self,
            Op::Lock { .. }
                | Op::LockWatching { .. }
                | Op::LockQueued { .. }
                | Op::LockShared { .. }
                | Op::LockExclusive { .. }
                | Op::LockPermit { .. }
        )
    }
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// Sent, and not yet at the node (a request delay, a connection being made), or between
    /// two sendings (a script being loaded).
    InFlight,
    /// Not applied: the node was down, or answered an error (`NOSCRIPT`, ...); the client
    /// got `error`.
    Failed {
        /// When the client got the error, on tokio's clock.
        at: Instant,
        /// What the client was told.
        error: NodeError,
    },
    /// Not applied and never answered: lost on the way
    /// ([`SimNode::lose_replies`](super::SimNode::lose_replies)), or the reply to the
    /// loading of its script was lost.
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
    /// Its place among the commands the node ran: later commands have higher numbers
    /// (several can run at one instant of a virtual clock).
    pub seq: u64,
    /// When it ran, on tokio's clock.
    pub at: Instant,
    /// When it ran, on the node's clock.
    pub node_time: Duration,
    /// The answer of a lock command: `true` when it took, deleted, extended or matched.
    /// Always `true` for the counter commands, which cannot refuse, and for leaving a
    /// queue.
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
    /// The token, or, for a key released to a queued waiter,
    /// `quorumlock:reserved:<waiter>` (see [`reserved_for`](Self::reserved_for)).
    pub token: LockToken,
    /// The last node-clock millisecond the key lives through (Redis's expiry time,
    /// `PEXPIRETIME`): it is gone once the clock has passed it.
    pub expires_at: Duration,
}

impl Stored {
    /// The waiter the key is reserved for, if it is a reservation rather than a holder's
    /// token.
    pub fn reserved_for(&self) -> Option<&str> {
        self.token.as_str().strip_prefix(RESERVED_PREFIX)
    }
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

impl Op {
    /// What the log shows of `request`: its command, keys, token and waiter.
    pub(super) fn of<'a>(
        request: &NodeRequest<'a>,
    ) -> (
        Op,
        &'a [Arc<str>],
        Option<&'a LockToken>,
        Option<&'a LockToken>,
    ) {
        match *request {
            NodeRequest::Lock { keys, token, ttl } => (Op::Lock { ttl }, keys, Some(token), None),
            NodeRequest::Unlock { keys, token } => (Op::Unlock, keys, Some(token), None),
            NodeRequest::Extend { keys, token, ttl }
            | NodeRequest::ExtendListed {
                keys, token, ttl, ..
            }
            | NodeRequest::ExtendLeader { keys, token, ttl } => {
                (Op::Extend { ttl }, keys, Some(token), None)
            }
            NodeRequest::Holds { keys, token } => (Op::Holds, keys, Some(token), None),
            NodeRequest::ReadCounter { keys } => (Op::ReadCounter, keys, None, None),
            NodeRequest::RaiseCounter { keys, value } => {
                (Op::RaiseCounter { value }, keys, None, None)
            }
            NodeRequest::LockWatching {
                keys, token, ttl, ..
            } => (Op::LockWatching { ttl }, keys, Some(token), None),
            NodeRequest::LockQueued {
                keys,
                token,
                ttl,
                place,
                stamp,
            } => {
                let op = Op::LockQueued {
                    ttl,
                    lifetime: place.lifetime,
                    stamp,
                };
                (op, keys, Some(token), Some(&place.waiter))
            }
            NodeRequest::LeaveQueue { keys, waiter } => (Op::LeaveQueue, keys, None, Some(waiter)),
            NodeRequest::LockShared {
                keys, token, ttl, ..
            } => (Op::LockShared { ttl }, keys, Some(token), None),
            NodeRequest::LockExclusive {
                keys, token, ttl, ..
            } => (Op::LockExclusive { ttl }, keys, Some(token), None),
            NodeRequest::LockPermit {
                keys, token, ttl, ..
            } => (Op::LockPermit { ttl }, keys, Some(token), None),
            NodeRequest::Proclaim { keys, token, .. } => (Op::Proclaim, keys, Some(token), None),
            NodeRequest::ReadProclamation { keys } => (Op::ReadProclamation, keys, None, None),
            NodeRequest::ExtendMany { renewals, ttl, .. } => {
                let op = Op::ExtendMany {
                    ttl,
                    leases: renewals.len(),
                };
                let first = renewals.first();
                (
                    op,
                    first.map_or(&[], |r| r.keys),
                    first.map(|r| r.token),
                    None,
                )
            }
            NodeRequest::WatchReleases { .. } | NodeRequest::WatchReservations { .. } => {
                unreachable!("a watch sends no command")
            }
        }
    }
}
