//! The error types: [`LockError`] for every lock operation, [`ConfigError`] for settings,
//! and [`NodeError`] / [`NodeFailure`] for what one node did wrong; and [`LeaseEnd`], how a
//! held lock ended, which [`LockError::Lost`] carries and which carries a `LockError` in
//! turn.

use std::fmt;
use std::time::Duration;

use crate::held_as::HeldAs;

mod config;

pub use self::config::ConfigError;

/// What went wrong with one node during one command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The node did not answer within the per-node timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The node could not be reached: refused, reset, closed, or not connected.
    #[error("connection failed: {0}")]
    Connection(String),
    /// The node answered with an error (or a reply this library does not understand).
    #[error("redis error: {0}")]
    Redis(String),
    /// The node does not implement the request (it answered
    /// [`NodeReply::Unsupported`](crate::node::NodeReply::Unsupported)); the request's
    /// name.
    #[error("the node does not support the {0} request")]
    Unsupported(&'static str),
    /// The node refused a read or a permit: the name is held in another mode there. Not a
    /// failure: the node took nothing, and the round counts it as a refusal.
    #[error("the name is held as {0}")]
    HeldAs(HeldAs),
}

/// A node and what went wrong with it; the node's name never contains a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// The node's name (its URL without credentials).
    pub node: String,
    /// What went wrong.
    pub error: NodeError,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.error)
    }
}

/// How the nodes answered one round of a lock operation.
///
/// Carried by [`LockError::Held`] and [`LockError::NoQuorum`] so that a log line says which
/// nodes refused and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many nodes the lock runs on.
    pub nodes: usize,
    /// How many of them must agree: `nodes / 2 + 1` ([`quorum_of`](crate::quorum_of)).
    pub quorum: usize,
    /// How many agreed (granted the lock, deleted or extended our key, or hold our token).
    pub granted: usize,
    /// The nodes that answered but did not agree (the key is held by another token, or absent).
    pub refused: Vec<String>,
    /// The nodes that failed or did not answer in time.
    pub failures: Vec<NodeFailure>,
    /// The mode a refusing node said the name is held in ([`NodeError::HeldAs`]).
    pub held_as: Option<HeldAs>,
}

impl Tally {
    /// How many nodes answered, whether they agreed or not.
    pub fn answered(&self) -> usize {
        self.granted + self.refused.len()
    }

    /// Whether a quorum agreed.
    pub fn has_quorum(&self) -> bool {
        self.granted >= self.quorum
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} nodes agreed, {} needed",
            self.granted, self.nodes, self.quorum
        )?;
        if !self.refused.is_empty() {
            write!(f, "; refused by {}", self.refused.join(", "))?;
        }
        if !self.failures.is_empty() {
            f.write_str("; failed: ")?;
            for (i, failure) in self.failures.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{failure}")?;
            }
        }
        Ok(())
    }
}

/// Everything a lock operation can fail with.
///
/// Acquisition failures carry the resource name and the reason; [`is_retryable`]
/// tells the failures worth another attempt from those that will not change.
///
/// [`is_retryable`]: LockError::is_retryable
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner's keys stand in the way: the nodes that failed, if any, would not have
    /// ruled out a quorum on their own, so waiting for the holder's release may succeed.
    #[error("lock {resource:?} is held by another owner ({tally})")]
    Held {
        /// The resource.
        resource: String,
        /// How the nodes answered.
        tally: Tally,
    },
    /// Too few nodes answered: on acquisition, the failed nodes alone rule out a quorum; on
    /// release, refresh or a check, too few confirmed either way. The nodes are down, slow
    /// or unreachable.
    #[error("lock {resource:?}: no quorum ({tally})")]
    NoQuorum {
        /// The resource.
        resource: String,
        /// How the nodes answered, with each failure.
        tally: Tally,
    },
    /// A quorum agreed, but too late: the TTL less the time taken and the drift allowance
    /// left no validity. The nodes were unlocked again.
    #[error(
        "lock {resource:?}: the nodes took {elapsed:?} to answer, which leaves no validity \
         in a TTL of {ttl:?}"
    )]
    ValidityExhausted {
        /// The resource.
        resource: String,
        /// How long the round took.
        elapsed: Duration,
        /// The TTL asked for.
        ttl: Duration,
    },
    /// The lock is no longer held with this guard's token: enough nodes said so
    /// (`N - quorum + 1`) that no quorum can still hold it. It expired, was released, or was
    /// taken over. Nothing was deleted or extended on the other owner's behalf.
    #[error(
        "lock {resource:?} is not held by this owner any more (expired or taken over; {tally})"
    )]
    NotHeld {
        /// The resource.
        resource: String,
        /// How the nodes answered.
        tally: Tally,
    },
    /// The guard's validity ran out before the operation started; a refresh is refused then,
    /// because another owner may already hold the lock.
    #[error("lock {resource:?}: the lease expired {ago:?} ago")]
    Expired {
        /// The resource.
        resource: String,
        /// How long ago the validity ended.
        ago: Duration,
    },
    /// A blocking acquire reached its deadline while an attempt was still running.
    #[error("lock {resource:?}: not acquired within {waited:?}{}", last.as_ref().map(|last| format!("; the attempt before: {last}")).unwrap_or_default())]
    TimedOut {
        /// The resource.
        resource: String,
        /// How long the acquire ran.
        waited: Duration,
        /// Why the attempt before the one cut short failed (`None` when the first attempt
        /// was cut short): tells a lock held elsewhere from unreachable nodes.
        last: Option<Box<LockError>>,
    },
    /// The lock was lost while work ran under it: it expired, a refresh found it gone, or no
    /// refresh could be confirmed in time. The work was stopped.
    #[error("lock {resource:?} was lost while held: {end}")]
    Lost {
        /// The resource.
        resource: String,
        /// How the lease ended.
        end: LeaseEnd,
    },
    /// The resource's fencing counter reached [`fencing::MAX_TOKEN`](crate::fencing::MAX_TOKEN).
    #[error("lock {resource:?}: the fencing counter is at {highest} and cannot grow further")]
    FencingExhausted {
        /// The resource.
        resource: String,
        /// The counter's value.
        highest: u64,
    },
    /// The settings were rejected.
    #[error("invalid lock configuration: {0}")]
    Config(#[from] ConfigError),
    /// The resource name cannot be used as a lock.
    #[error("invalid resource name {resource:?}: {reason}")]
    InvalidResource {
        /// The rejected name (cut to its first 64 characters).
        resource: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A node could not be set up: a malformed URL, a duplicate, or no nodes at all.
    #[error("invalid node {node}: {reason}")]
    InvalidNode {
        /// The node (its URL without credentials), or, for a URL that does not read, the
        /// URL as given with its password masked.
        node: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The name is held in another mode (readers, or permits of another K) than the one
    /// asked for: two callers use one name for two locks, which no retry can fix.
    #[error(
        "lock {resource:?} is held as {held_as}: one name is one lock, so it cannot be \
         taken in another mode or with another number of permits ({tally})"
    )]
    ModeMismatch {
        /// The resource.
        resource: String,
        /// The mode a refusing node named.
        held_as: HeldAs,
        /// How the nodes answered.
        tally: Tally,
    },
    /// A guard was passed to a lock that did not create it.
    #[error("lock {resource:?}: this guard belongs to another lock instance")]
    ForeignGuard {
        /// The guard's resource.
        resource: String,
    },
    /// A lock was to join a [`Session`](crate::Session) that keeps nothing alive any more,
    /// or one whose locks are of another TTL.
    #[error("lock {resource:?} cannot join the session: {reason}")]
    Session {
        /// The lock's resource.
        resource: String,
        /// Why not: the session's end, or the TTLs that differ.
        reason: String,
    },
}

impl LockError {
    /// Whether another attempt may succeed: the lock was held, too few nodes answered, or the
    /// nodes were too slow. Configuration and input errors are not retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Held { .. }
                | LockError::NoQuorum { .. }
                | LockError::ValidityExhausted { .. }
        )
    }

    /// The resource the error is about, when there is one.
    pub fn resource(&self) -> Option<&str> {
        match self {
            LockError::Held { resource, .. }
            | LockError::NoQuorum { resource, .. }
            | LockError::ValidityExhausted { resource, .. }
            | LockError::NotHeld { resource, .. }
            | LockError::Expired { resource, .. }
            | LockError::InvalidResource { resource, .. }
            | LockError::TimedOut { resource, .. }
            | LockError::FencingExhausted { resource, .. }
            | LockError::Lost { resource, .. }
            | LockError::ForeignGuard { resource }
            | LockError::Session { resource, .. }
            | LockError::ModeMismatch { resource, .. } => Some(resource),
            LockError::Config(_) | LockError::InvalidNode { .. } => None,
        }
    }

    /// How the nodes answered, for errors that come from a round of requests.
    pub fn tally(&self) -> Option<&Tally> {
        match self {
            LockError::Held { tally, .. }
            | LockError::NoQuorum { tally, .. }
            | LockError::NotHeld { tally, .. }
            | LockError::ModeMismatch { tally, .. } => Some(tally),
            _ => None,
        }
    }
}

/// How a [`Session`](crate::Session) ended: it keeps no lock alive any more.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionEnd {
    /// [`close`](crate::Session::close) released its locks.
    Closed,
    /// The session was dropped: its locks live on until their deadlines, unextended.
    Dropped,
    /// It could no longer confirm its locks on a quorum before they ran out: every lock
    /// it kept was declared lost with this error.
    Lost(Box<LockError>),
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::Closed => f.write_str("the session was closed"),
            SessionEnd::Dropped => f.write_str("the session was dropped"),
            SessionEnd::Lost(error) => write!(f, "the session lost its quorum: {error}"),
        }
    }
}

/// How a lease ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LeaseEnd {
    /// The holder released the lock.
    Released,
    /// The validity deadline passed without a successful refresh.
    Expired,
    /// A refresh found the lock gone (expired on the nodes, flushed, or taken over), or could
    /// not reach a quorum in time to confirm it before the deadline.
    Lost(Box<LockError>),
}

impl std::fmt::Display for LeaseEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseEnd::Released => f.write_str("released"),
            LeaseEnd::Expired => f.write_str("the validity deadline passed"),
            // A lease's end is told beside its resource (in `LockError::Lost`, a log line's
            // field, the CLI's report), so the error is told without it: "lock "job" was
            // lost while held: no quorum (...)", not "...: lock "job": no quorum (...)".
            LeaseEnd::Lost(error) => {
                let text = error.to_string();
                let named = error
                    .resource()
                    .map(|resource| format!("lock {resource:?}"));
                match named.as_deref().and_then(|named| text.strip_prefix(named)) {
                    Some(rest) => match rest.strip_prefix(": ") {
                        Some(reason) => f.write_str(reason),
                        // "lock "job" is not held ...": the name was the sentence's subject.
                        None => write!(f, "it{rest}"),
                    },
                    None => f.write_str(&text),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_lock_names_its_resource_once() {
        let lost = |cause: LockError| {
            LockError::Lost {
                resource: "demo:worker".into(),
                end: LeaseEnd::Lost(Box::new(cause)),
            }
            .to_string()
        };
        let no_quorum = lost(LockError::NoQuorum {
            resource: "demo:worker".into(),
            tally: Tally::default(),
        });
        assert!(
            no_quorum.starts_with("lock \"demo:worker\" was lost while held: no quorum ("),
            "{no_quorum}"
        );
        assert_eq!(no_quorum.matches("demo:worker").count(), 1, "{no_quorum}");
        let not_held = lost(LockError::NotHeld {
            resource: "demo:worker".into(),
            tally: Tally::default(),
        });
        assert!(
            not_held.contains("held: it is not held by this owner"),
            "{not_held}"
        );
        assert_eq!(not_held.matches("demo:worker").count(), 1, "{not_held}");
    }

    #[test]
    fn no_quorum_names_each_failed_node_and_why() {
        let err = LockError::NoQuorum {
            resource: "order:1".into(),
            tally: Tally {
                nodes: 5,
                quorum: 3,
                granted: 2,
                refused: vec![],
                failures: vec![
                    NodeFailure {
                        node: "redis://127.0.0.1:7001".into(),
                        error: NodeError::Connection("connection refused".into()),
                    },
                    NodeFailure {
                        node: "redis://127.0.0.1:7002".into(),
                        error: NodeError::Timeout(Duration::from_millis(50)),
                    },
                ],
                held_as: None,
            },
        };
        let text = err.to_string();
        assert_eq!(
            text,
            "lock \"order:1\": no quorum (2 of 5 nodes agreed, 3 needed; failed: \
             redis://127.0.0.1:7001: connection failed: connection refused, \
             redis://127.0.0.1:7002: timed out after 50ms)"
        );
        assert!(err.is_retryable());
        assert_eq!(err.resource(), Some("order:1"));
    }

    #[test]
    fn input_errors_are_not_retryable() {
        let err = LockError::InvalidResource {
            resource: String::new(),
            reason: "empty",
        };
        assert!(!err.is_retryable());
        assert!(!LockError::Config(ConfigError::ZeroTtl).is_retryable());
    }
}
