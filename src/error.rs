//! The error types: [`LockError`] for every lock operation, [`ConfigError`] for settings,
//! and [`NodeError`] / [`NodeFailure`] for what one node did wrong; and [`LeaseEnd`], how a
//! held lock ended, which [`LockError::Lost`] carries and which carries a `LockError` in
//! turn.

use std::fmt;
use std::time::Duration;

use crate::held_as::HeldAs;

/// Why a [`LockConfig`](crate::LockConfig) was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A lock without a TTL would never expire after a crash.
    #[error("the TTL must be greater than zero")]
    ZeroTtl,
    /// Redis expires keys with millisecond precision (`PX`).
    #[error("the TTL must be a whole number of milliseconds, got {ttl:?}")]
    SubMillisecondTtl {
        /// The rejected TTL.
        ttl: Duration,
    },
    /// The TTL is above [`LockConfig::MAX_TTL`](crate::LockConfig::MAX_TTL).
    #[error(
        "the TTL {ttl:?} is longer than the maximum {max:?} (milliseconds passed as seconds?)"
    )]
    TtlTooLong {
        /// The rejected TTL.
        ttl: Duration,
        /// The maximum accepted.
        max: Duration,
    },
    /// Redis expires keys with millisecond precision (`PX`), and the
    /// [lock-delay](crate::LockConfig::lock_delay) is part of the keys' expiry.
    #[error("the lock-delay must be a whole number of milliseconds, got {lock_delay:?}")]
    SubMillisecondLockDelay {
        /// The rejected lock-delay.
        lock_delay: Duration,
    },
    /// The TTL plus the [lock-delay](crate::LockConfig::lock_delay), the keys' expiry, is
    /// above [`LockConfig::MAX_TTL`](crate::LockConfig::MAX_TTL).
    #[error(
        "the TTL {ttl:?} plus the lock-delay {lock_delay:?} is longer than the maximum \
         {max:?} for a key's expiry"
    )]
    LockDelayTooLong {
        /// The TTL.
        ttl: Duration,
        /// The rejected lock-delay.
        lock_delay: Duration,
        /// The maximum of their sum.
        max: Duration,
    },
    /// The drift factor must be a finite number in `[0, 1)`.
    #[error("the clock-drift factor must be in [0, 1), got {factor}")]
    InvalidDriftFactor {
        /// The rejected factor.
        factor: f64,
    },
    /// A zero per-node timeout would fail every command.
    #[error("the node timeout must be greater than zero")]
    ZeroNodeTimeout,
    /// A zero connect timeout ([`Nodes::connect_timeout`](crate::Nodes::connect_timeout))
    /// would never let a connection be made.
    #[error("the connect timeout must be greater than zero")]
    ZeroConnectTimeout,
    /// Replica acknowledgements ([`ReplicaAcks`](crate::ReplicaAcks)) need at least one
    /// replica and a whole, non-zero number of milliseconds below the per-node timeout:
    /// `WAIT` holds the node's connection while it runs.
    #[error(
        "replica acknowledgements need at least one replica and a timeout of whole \
         milliseconds, non-zero and below the node timeout {node_timeout:?}; got {replicas} \
         within {timeout:?}"
    )]
    InvalidReplicaAcks {
        /// The replicas asked for.
        replicas: u32,
        /// The rejected timeout.
        timeout: Duration,
        /// The per-node timeout it must stay below.
        node_timeout: Duration,
    },
    /// A slow node could consume the whole validity.
    #[error(
        "the node timeout {node_timeout:?} is not well below the TTL {ttl:?}: \
         it may be at most a tenth of it ({max:?})"
    )]
    NodeTimeoutTooLong {
        /// The rejected timeout.
        node_timeout: Duration,
        /// The TTL it was checked against.
        ttl: Duration,
        /// The longest timeout this TTL allows.
        max: Duration,
    },
    /// The drift allowance and the node timeout leave no validity.
    #[error(
        "the TTL {ttl:?} leaves no validity after the clock-drift allowance {drift:?} \
         and the node timeout {node_timeout:?}"
    )]
    NoValidityLeft {
        /// The TTL.
        ttl: Duration,
        /// `ttl * drift_factor + 2 ms`.
        drift: Duration,
        /// The per-node timeout.
        node_timeout: Duration,
    },
    /// Retrying without a delay makes contending clients spin.
    #[error("the retry delay must be greater than zero when retries are enabled (spinning wastes CPU and starves the holder)")]
    ZeroRetryDelay,
    /// The jitter would make some waits negative.
    #[error("the retry jitter {jitter:?} must not exceed the retry delay {delay:?}")]
    JitterExceedsDelay {
        /// The rejected jitter.
        jitter: Duration,
        /// The retry delay.
        delay: Duration,
    },
    /// The key prefix is longer than [`LockConfig::MAX_KEY_PREFIX_LEN`](crate::LockConfig::MAX_KEY_PREFIX_LEN).
    #[error("the key prefix is {len} bytes long; at most {max} are accepted")]
    KeyPrefixTooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum accepted.
        max: usize,
    },
    /// Without an acquire timeout, a blocking acquire could retry for longer than
    /// [`LockConfig::max_blocking_acquire`](crate::LockConfig::max_blocking_acquire): the
    /// "retry forever" anti-pattern, or a unit mistake.
    #[error(
        "a blocking acquire could take {} ({retry_count} retries of up to {retry_delay:?} + \
         {retry_jitter:?}, and {} attempts of up to {attempt:?}), more than the maximum {max:?}: \
         lower retry_count or retry_delay, or bound the wait with acquire_timeout",
        worst_case.map_or_else(|| "forever".to_owned(), |worst| format!("{worst:?}")),
        u64::from(*retry_count) + 1
    )]
    RetriesUnbounded {
        /// The retries after the first attempt.
        retry_count: u32,
        /// The mean wait between attempts.
        retry_delay: Duration,
        /// The jitter around it.
        retry_jitter: Duration,
        /// The longest one attempt can take (see
        /// [`LockConfig::attempt_bound`](crate::LockConfig::attempt_bound)).
        attempt: Duration,
        /// The worst case; `None` when it overflows a `Duration`.
        worst_case: Option<Duration>,
        /// The maximum accepted.
        max: Duration,
    },
    /// An acquire timeout of zero would make every blocking acquire time out at once.
    #[error("the acquire timeout must be greater than zero")]
    ZeroAcquireTimeout,
    /// The acquire timeout is above
    /// [`LockConfig::MAX_ACQUIRE_TIMEOUT`](crate::LockConfig::MAX_ACQUIRE_TIMEOUT).
    #[error(
        "the acquire timeout {timeout:?} is longer than the maximum {max:?} \
         (milliseconds passed as seconds?)"
    )]
    AcquireTimeoutTooLong {
        /// The rejected timeout.
        timeout: Duration,
        /// The maximum accepted.
        max: Duration,
    },
    /// The [`cohort_window`](crate::LockConfig::cohort_window) is zero or above
    /// [`LockConfig::MAX_COHORT_WINDOW`](crate::LockConfig::MAX_COHORT_WINDOW) while
    /// cohorts are on.
    #[error(
        "the cohort window must be greater than zero and at most {max:?}, got {window:?} \
         (to turn cohorts off, set cohort_passes(0))"
    )]
    CohortWindowOutOfRange {
        /// The rejected window.
        window: Duration,
        /// The maximum accepted.
        max: Duration,
    },
    /// An [`AutoExtend::every`](crate::AutoExtend::every) interval below
    /// [`AutoExtend::min_interval`](crate::AutoExtend::min_interval) would flood the nodes
    /// with extension rounds.
    #[error(
        "the auto-extend interval {interval:?} is shorter than the minimum {min:?} \
         (the larger of twice the node timeout {node_timeout:?} and {floor:?}): \
         it would flood the nodes with extension rounds"
    )]
    ExtendIntervalTooShort {
        /// The rejected interval.
        interval: Duration,
        /// The shortest interval accepted with this configuration.
        min: Duration,
        /// The node timeout of the lock's configuration.
        node_timeout: Duration,
        /// The absolute floor, [`AutoExtend::MIN_INTERVAL`](crate::AutoExtend::MIN_INTERVAL).
        floor: Duration,
    },
    /// A [`Semaphore`](crate::Semaphore) needs at least one permit, and at most
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS).
    #[error("a semaphore needs between 1 and {max} permits, got {permits}")]
    InvalidPermits {
        /// The rejected number of permits.
        permits: u32,
        /// The most accepted.
        max: u32,
    },
    /// A leader election numbers its terms by fencing tokens: the lock must be built with
    /// [`fencing`](crate::LockConfigBuilder::fencing) on.
    #[error(
        "{what} needs fencing tokens: build its lock with LockConfig::builder().fencing(true)"
    )]
    FencingRequired {
        /// What needs them.
        what: &'static str,
    },
    /// A candidate's value is longer than
    /// [`Election::MAX_VALUE_LEN`](crate::Election::MAX_VALUE_LEN).
    #[error("a leader's value is {len} bytes long; at most {max} are accepted")]
    LeaderValueTooLong {
        /// Its length in bytes.
        len: usize,
        /// The most accepted.
        max: usize,
    },
}

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
