//! [`LockConfig`]: the immutable settings every lock runs with, and the values derived
//! from them (the drift allowance, the validity, the deadline of a blocking acquire).
//! [`LockConfigBuilder`] builds one, and the rules each must pass are in `rules`.

mod builder;
mod cohort;
mod delay;
mod rules;
mod units;
mod wait;

use std::time::Duration;

use tokio::time::Instant;

use crate::error::ConfigError;
use crate::fencing::FencingCounters;

pub use self::builder::LockConfigBuilder;
pub(crate) use self::units::{micros, millis};

/// The settings a lock runs with: TTL, retries, clock-drift allowance and per-node timeout.
///
/// A `LockConfig` is an immutable value: it can only be built through
/// [`LockConfig::builder`] (or [`LockConfig::default`]), and every way of building one
/// validates it, so a lock never runs with settings that make no sense (a zero TTL, a
/// drift allowance that eats the whole TTL, a per-node timeout close to the TTL, ...).
///
/// The defaults are those of the original design, plus the Redlock reference values:
///
/// | setting | default | meaning |
/// |---|---|---|
/// | [`ttl`](Self::ttl) | 30 s | how long a lock lives on a node unless refreshed |
/// | [`auto_release`](Self::auto_release) | `true` | dropping a [`LockGuard`](crate::LockGuard) releases the lock in the background |
/// | [`retry_count`](Self::retry_count) | 3 | retries after the first attempt of a blocking `acquire` (4 attempts in all) |
/// | [`retry_delay`](Self::retry_delay) | 200 ms | mean wait between two attempts |
/// | [`retry_jitter`](Self::retry_jitter) | 100 ms | each wait is drawn uniformly from `retry_delay ± retry_jitter` |
/// | [`drift_factor`](Self::drift_factor) | 0.01 | clock-drift allowance: `ttl * drift_factor + 2 ms` is subtracted from the validity |
/// | [`node_timeout`](Self::node_timeout) | 50 ms | how long one node may take to answer one command |
/// | [`key_prefix`](Self::key_prefix) | none | prepended to the resource name to form the Redis key |
/// | [`notify_releases`](Self::notify_releases) | `true` | releases are announced over pub/sub, and blocking acquires wait for them |
/// | [`fair`](Self::fair) | `true` | blocking acquires of a contended lock queue on the nodes and get it first come, first served |
/// | [`fencing`](Self::fencing) | `false` | every acquisition mints a fencing token (two more rounds) |
/// | [`cohort_passes`](Self::cohort_passes) | 32 | a release may pass the lock to a waiting task of this process this many times in a row, without a round trip (off with fencing) |
/// | [`cohort_window`](Self::cohort_window) | 10 ms | ... and for this long after the lock was won on the nodes; then it goes back to the nodes |
/// | [`lock_delay`](Self::lock_delay) | 0 (off) | a lease that ended without a release keeps its resource closed this much longer past its validity; the keys are written with `PX` = TTL + this |
/// | [`acquire_timeout`](Self::acquire_timeout) | none | a deadline for every blocking `acquire`; required when the retries could outlast [`max_blocking_acquire`](Self::max_blocking_acquire) (1 hour, or 5 TTLs if longer) |
///
/// # Bounded waits
///
/// A blocking `acquire` always ends. Without an acquire timeout, its retry settings alone
/// must bound it: [`build`](LockConfigBuilder::build) rejects settings whose
/// [`worst_case_acquire`](Self::worst_case_acquire) exceeds
/// [`max_blocking_acquire`](Self::max_blocking_acquire) (1 hour, or 5 TTLs if longer) with
/// [`ConfigError::RetriesUnbounded`]. To wait longer, or to retry "until it works" (a huge
/// `retry_count`), say for how long: set
/// [`acquire_timeout`](LockConfigBuilder::acquire_timeout), and every blocking `acquire`
/// (and `with`) gets that deadline. A per-call
/// [`acquire_timeout`](crate::DistributedLock::acquire_timeout) overrides it.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{ConfigError, LockConfig};
///
/// // Retrying every millisecond four billion times is rejected...
/// let err = LockConfig::builder()
///     .retry_count(u32::MAX)
///     .retry_delay(Duration::from_millis(1))
///     .retry_jitter(Duration::ZERO)
///     .build()
///     .unwrap_err();
/// assert!(matches!(err, ConfigError::RetriesUnbounded { .. }));
/// assert!(err.to_string().contains("acquire_timeout"), "{err}");
///
/// // ...unless a deadline bounds it: retry until it works, for at most ten minutes.
/// let config = LockConfig::builder()
///     .retry_count(u32::MAX)
///     .retry_delay(Duration::from_millis(1))
///     .retry_jitter(Duration::ZERO)
///     .acquire_timeout(Duration::from_secs(600))
///     .build()?;
/// assert_eq!(config.acquire_timeout(), Some(Duration::from_secs(600)));
/// # Ok::<(), quorumlock::ConfigError>(())
/// ```
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::LockConfig;
///
/// let config = LockConfig::builder()
///     .ttl(Duration::from_secs(10))
///     .retry_count(5)
///     .build()?;
/// assert_eq!(config.ttl(), Duration::from_secs(10));
/// assert_eq!(config.retry_delay(), Duration::from_millis(200)); // untouched default
///
/// // Nonsense is rejected with a typed error, not a panic:
/// let err = LockConfig::builder().ttl(Duration::ZERO).build().unwrap_err();
/// assert!(err.to_string().contains("TTL"));
/// # Ok::<(), quorumlock::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LockConfig {
    ttl: Duration,
    auto_release: bool,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    drift_factor: f64,
    node_timeout: Duration,
    key_prefix: Option<String>,
    notify_releases: bool,
    fair: bool,
    direct_grant: bool,
    fencing: bool,
    fencing_counters: FencingCounters,
    acquire_timeout: Option<Duration>,
    cohort_passes: u32,
    cohort_window: Duration,
    lock_delay: Duration,
}

impl LockConfig {
    /// Default TTL: 30 seconds.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// Default number of retries after the first attempt: 3.
    pub const DEFAULT_RETRY_COUNT: u32 = 3;
    /// Default mean delay between attempts: 200 ms.
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
    /// Default jitter around the retry delay: 100 ms.
    pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(100);
    /// Default clock-drift factor: 1 % of the TTL, as in the Redlock reference implementations.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
    /// Default per-node timeout: 50 ms, the top of the range the Redlock spec gives for a 10 s TTL.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// The fixed part of the drift allowance: 1 ms of Redis expiry precision plus 1 ms minimum drift.
    pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);
    /// The longest TTL accepted: 30 days. Longer values are almost always a unit mistake
    /// (milliseconds passed as seconds), and the bound keeps every deadline computation far
    /// from overflow.
    pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);
    /// The per-node timeout may be at most this fraction of the TTL (1/10), so that a slow
    /// node cannot consume the validity of the lock.
    pub const MAX_NODE_TIMEOUT_SHARE: u32 = 10;
    /// The longest key prefix accepted, in bytes.
    pub const MAX_KEY_PREFIX_LEN: usize = 256;
    /// The longest [`acquire_timeout`](Self::acquire_timeout) accepted: 30 days, as for the
    /// TTL. Longer values are almost always a unit mistake, and the bound keeps the
    /// acquisition's deadline far from overflow (an overflowing deadline would be none).
    pub const MAX_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 60 * 60);

    /// Starts a builder from the defaults.
    pub fn builder() -> LockConfigBuilder {
        LockConfigBuilder::new(LockConfig::default())
    }

    /// Starts a builder from this configuration, to derive a changed copy.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use quorumlock::LockConfig;
    /// let base = LockConfig::default();
    /// let short = base.to_builder().ttl(Duration::from_secs(5)).build()?;
    /// assert_eq!(base.ttl(), Duration::from_secs(30));
    /// assert_eq!(short.ttl(), Duration::from_secs(5));
    /// # Ok::<(), quorumlock::ConfigError>(())
    /// ```
    pub fn to_builder(&self) -> LockConfigBuilder {
        LockConfigBuilder::new(self.clone())
    }

    /// A copy of this configuration with another TTL, validated again.
    pub fn with_ttl(&self, ttl: Duration) -> Result<LockConfig, ConfigError> {
        self.to_builder().ttl(ttl).build()
    }

    /// How long a lock lives on a node unless refreshed, and the holder's lease: its
    /// validity is computed from it. The keys' expiry (Redis `PX`) is
    /// [`key_ttl`](Self::key_ttl), this plus the [`lock_delay`](Self::lock_delay).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether dropping a [`LockGuard`](crate::LockGuard) without releasing it releases the
    /// lock in the background. When off, a dropped guard's keys live until their TTL.
    pub fn auto_release(&self) -> bool {
        self.auto_release
    }

    /// How many times a blocking `acquire` retries after its first attempt.
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// The mean wait between two attempts of a blocking `acquire`.
    pub fn retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// Each wait between attempts is drawn uniformly from `retry_delay ± retry_jitter`, so
    /// that competing clients do not retry in lockstep.
    pub fn retry_jitter(&self) -> Duration {
        self.retry_jitter
    }

    /// The share of the TTL allowed for clock drift between this client and the nodes.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// How long one node may take to answer one command before it counts as failed.
    /// Connecting is bounded by the node set's
    /// [`connect_timeout`](crate::Nodes::connect_timeout) instead; a node that is still
    /// connecting counts as failed in the rounds meanwhile.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Prepended to every resource name to form its Redis key; `None` means the key is the
    /// resource name itself, which lets this library exclude other Redlock clients (rslock,
    /// node-redlock, redsync) locking the same names.
    pub fn key_prefix(&self) -> Option<&str> {
        self.key_prefix.as_deref()
    }

    /// Whether releases are announced over Redis pub/sub and waited for: a blocking acquire
    /// that lost to another holder retries as soon as a quorum of nodes announced the
    /// release, with the jittered retry delay as the fallback. Off, it waits the delay only.
    ///
    /// Applies to locks made by [`Redlock::connect`](crate::Redlock::connect), whose nodes
    /// publish on release.
    pub fn notify_releases(&self) -> bool {
        self.notify_releases
    }

    /// Whether blocking acquires of a contended lock wait in line on the nodes (see
    /// [`QueuePlace`](crate::node::QueuePlace)): each release reserves the lock for the
    /// waiter that came first, so no waiter starves and the holder that just released
    /// cannot take it straight back. Off, waiters race for each release, as with other
    /// Redlock clients. Either way the lock's safety is the same; only who goes next
    /// differs. Non-blocking attempts never queue, and never take a lock reserved for a
    /// waiter.
    pub fn fair(&self) -> bool {
        self.fair
    }

    /// Whether a fair lock's waiters for one resource take grants (on by default): a
    /// release then hands the lock to the first waiter in line outright, setting the key to
    /// that waiter's token, and the waiter holds once a quorum of nodes granted it, without
    /// a round of its own to claim it (docs/safety.md, "The direct grant"). Off, a release
    /// reserves the lock for the waiter, which claims it in a round: the protocol of
    /// earlier versions, which clients of both speak to each other safely. Locks over
    /// several resources always reserve.
    ///
    /// The price of the grant: a waiter whose process dies while it waits in line, and is
    /// then granted the lock, holds it until its TTL runs out, as a holder that dies does;
    /// a reservation lapses with the waiter's place, in under a second by default.
    pub fn direct_grant(&self) -> bool {
        self.direct_grant
    }

    /// Whether each acquisition mints a fencing token, strictly increasing per resource
    /// across holders; see [`crate::fencing`]. It costs two more rounds per acquisition.
    /// On Redis nodes it needs an append-only file on each, unless the node set allows
    /// [`fencing_on_volatile_nodes`](crate::Nodes::fencing_on_volatile_nodes).
    pub fn fencing(&self) -> bool {
        self.fencing
    }

    /// Where the fencing counters live on the nodes (default
    /// [`FencingCounters::PerResource`]); see [Counter layouts](crate::fencing#counter-layouts).
    pub fn fencing_counters(&self) -> FencingCounters {
        self.fencing_counters
    }

    /// The deadline of every blocking acquire (`acquire`, `acquire_many`, `with`), counted
    /// from its start; `None`: its retry settings alone bound it (see
    /// [Bounded waits](Self#bounded-waits)). A per-call
    /// [`acquire_timeout`](crate::DistributedLock::acquire_timeout) overrides it.
    pub fn acquire_timeout(&self) -> Option<Duration> {
        self.acquire_timeout
    }

    /// The clock-drift allowance subtracted from every validity: `ttl * drift_factor + 2 ms`.
    pub fn drift_allowance(&self) -> Duration {
        self.drift_allowance_for(self.ttl)
    }

    /// The drift allowance of a lease of `ttl` with this drift factor.
    pub(crate) fn drift_allowance_for(&self, ttl: Duration) -> Duration {
        Duration::try_from_secs_f64(ttl.as_secs_f64() * self.drift_factor)
            .ok()
            .and_then(|proportional| proportional.checked_add(Self::DRIFT_FLOOR))
            .unwrap_or(Duration::MAX)
    }

    /// The longest validity an acquisition can have: the TTL less the drift allowance. The
    /// validity actually granted is this less the time the acquisition took.
    ///
    /// The one home of the validity formula: the deadlines of acquisitions and refreshes,
    /// and the rule that a round's node timeout must leave some of it, are computed from it.
    pub fn max_validity(&self) -> Duration {
        self.ttl.saturating_sub(self.drift_allowance())
    }

    /// The end of the validity of a lock whose round started at `started`:
    /// `started + ttl - (ttl * drift_factor + 2 ms)`, or `None` on overflow. The round's own
    /// time is thereby subtracted too, since `started` is read before its first request.
    pub(crate) fn deadline_from(&self, started: Instant) -> Option<Instant> {
        started.checked_add(self.max_validity())
    }
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            ttl: Self::DEFAULT_TTL,
            auto_release: true,
            retry_count: Self::DEFAULT_RETRY_COUNT,
            retry_delay: Self::DEFAULT_RETRY_DELAY,
            retry_jitter: Self::DEFAULT_RETRY_JITTER,
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
            key_prefix: None,
            notify_releases: true,
            fair: true,
            direct_grant: true,
            fencing: false,
            fencing_counters: FencingCounters::PerResource,
            acquire_timeout: None,
            cohort_passes: Self::DEFAULT_COHORT_PASSES,
            cohort_window: Self::DEFAULT_COHORT_WINDOW,
            lock_delay: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The seed's LockConfigTest, in part: the defaults and the drift allowance (the builder and
    //! the rules have theirs).
    use super::*;

    /// Milliseconds, for the tests of every part of the configuration.
    pub(super) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_are_the_designed_ones() {
        let config = LockConfig::default();
        assert_eq!(config.ttl(), Duration::from_secs(30));
        assert!(config.auto_release());
        assert_eq!(config.retry_count(), 3);
        assert_eq!(config.retry_delay(), ms(200));
        assert_eq!(config.retry_jitter(), ms(100));
        assert_eq!(config.drift_factor(), 0.01);
        assert_eq!(config.node_timeout(), ms(50));
        assert_eq!(config.key_prefix(), None);
        assert!(config.notify_releases());
        assert!(config.fair());
        assert!(!config.fencing());
        assert_eq!(LockConfig::builder().build(), Ok(config));
    }

    #[test]
    fn drift_allowance_follows_the_reference_formula() {
        let config = LockConfig::default();
        assert_eq!(config.drift_allowance(), ms(300 + 2));
        assert_eq!(config.max_validity(), ms(30_000 - 302));
    }
}
