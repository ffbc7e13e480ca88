//! [`ConfigError`]: why a configuration, or a deployment fact that must fit it, was
//! rejected.

use std::time::Duration;

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
    /// [`FencingCounters::Shared`](crate::fencing::FencingCounters::Shared) needs 1 to
    /// [`MAX_BUCKETS`](crate::fencing::FencingCounters::MAX_BUCKETS) buckets.
    #[error("shared fencing counters need between 1 and {max} buckets, got {buckets}")]
    InvalidFencingBuckets {
        /// The rejected number of buckets.
        buckets: u32,
        /// The most accepted.
        max: u32,
    },
    /// Shared fencing counters on hash-tagged nodes (a Redis Cluster member, or
    /// `Nodes::hash_tags`): a counter shared by many lock keys cannot share each one's slot.
    #[error(
        "shared fencing counters cannot serve hash-tagged keys (a Redis Cluster member, or \
         Nodes::hash_tags): use FencingCounters::PerResource there"
    )]
    SharedFencingCountersOnHashTags,
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
    /// A [`Session`](crate::Session) sends its locks' extensions in chunks of 1 to
    /// [`SessionOptions::MAX_CHUNK`](crate::SessionOptions::MAX_CHUNK) locks per request.
    #[error("a session's chunk must hold between 1 and {max} locks, got {chunk}")]
    InvalidSessionChunk {
        /// The rejected chunk size.
        chunk: usize,
        /// The most accepted.
        max: usize,
    },
}
