//! [`LockConfig`]: the immutable settings every lock runs with, and their validation.

use std::time::Duration;

use crate::error::{ConfigError, LockError};
use crate::resource::Resources;

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
/// | [`connect_timeout`](Self::connect_timeout) | 1 s | how long one attempt to (re)connect to a node may take, the server check included |
/// | [`key_prefix`](Self::key_prefix) | none | prepended to the resource name to form the Redis key |
/// | [`notify_releases`](Self::notify_releases) | `true` | releases are announced over pub/sub, and blocking acquires wait for them |
/// | [`fair`](Self::fair) | `true` | blocking acquires of a contended lock queue on the nodes and get it first come, first served |
/// | [`fencing`](Self::fencing) | `false` | every acquisition mints a fencing token (two more rounds) |
/// | [`fencing_on_volatile_nodes`](Self::fencing_on_volatile_nodes) | `false` | fencing is allowed on nodes that keep no append-only file |
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
    connect_timeout: Duration,
    key_prefix: Option<String>,
    notify_releases: bool,
    fair: bool,
    fencing: bool,
    fencing_on_volatile_nodes: bool,
    acquire_timeout: Option<Duration>,
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
    /// Default connect timeout: 1 second. A connection is made once and kept, so it can
    /// afford far more than one request's timeout: a TLS handshake across zones, or a
    /// process started on a loaded host, takes tens to hundreds of milliseconds.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
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
    /// The longest a blocking acquire may take by its retry settings alone, without an
    /// [`acquire_timeout`](Self::acquire_timeout): 1 hour.
    ///
    /// Waiting for a lock is meant to cover a holder's critical section, seconds to
    /// minutes; the defaults give up after about 2 s. An hour is three orders of magnitude
    /// above that, so no sensible setting is refused, while `retry_count(u32::MAX)` (the
    /// original design's "retry forever" anti-pattern, months of retries even 1 ms apart)
    /// and `retry_delay(Duration::MAX)` (one sleep that never ends) are. A caller that
    /// really wants to wait longer says how long, with an acquire timeout.
    ///
    /// Locks with TTLs of hours get more: see
    /// [`max_blocking_acquire`](Self::max_blocking_acquire).
    pub const MAX_BLOCKING_ACQUIRE: Duration = Duration::from_secs(60 * 60);
    /// For long TTLs, a blocking acquire may take this many TTLs (5) instead of
    /// [`MAX_BLOCKING_ACQUIRE`](Self::MAX_BLOCKING_ACQUIRE). Waiting out a crashed holder
    /// takes up to one TTL, and with TTLs of hours even a single attempt's node timeouts
    /// (up to a tenth of the TTL each) can exceed an hour; a few TTLs is what waiting for
    /// such a lock means, while months of retries stay refused.
    pub const MAX_BLOCKING_ACQUIRE_TTLS: u32 = 5;
    /// The longest [`acquire_timeout`](Self::acquire_timeout) accepted: 30 days, as for the
    /// TTL. Longer values are almost always a unit mistake, and the bound keeps the
    /// acquisition's deadline far from overflow (an overflowing deadline would be none).
    pub const MAX_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 60 * 60);
    /// How many node timeouts one attempt of a blocking acquire can take, fencing off: the
    /// lock round, the rollback of a failed attempt, and the waits' set-up (a pub/sub
    /// subscription, connect then confirm, and joining or leaving the queue), each bounded
    /// by one node timeout.
    const ATTEMPT_ROUNDS: u32 = 5;
    /// The two more rounds of an attempt with fencing on: reading and raising the counter.
    const FENCING_ROUNDS: u32 = 2;

    /// Starts a builder from the defaults.
    pub fn builder() -> LockConfigBuilder {
        LockConfigBuilder {
            config: LockConfig::default(),
        }
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
        LockConfigBuilder {
            config: self.clone(),
        }
    }

    /// A copy of this configuration with another TTL, validated again.
    pub fn with_ttl(&self, ttl: Duration) -> Result<LockConfig, ConfigError> {
        self.to_builder().ttl(ttl).build()
    }

    /// How long a lock lives on a node unless refreshed (Redis `PX`).
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
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// How long one attempt to connect (or reconnect) to a node may take, the check of the
    /// server included (see [`Redlock::connect`](crate::Redlock::connect)). Requests are
    /// bounded by [`node_timeout`](Self::node_timeout) instead; a node that is still
    /// connecting counts as failed in the rounds meanwhile.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
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
    /// Applies to locks made by [`Redlock::connect`](crate::Redlock::connect) and
    /// [`RedisLock::connect`](crate::RedisLock::connect), whose nodes publish on release.
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

    /// Whether each acquisition mints a fencing token, strictly increasing per resource
    /// across holders; see [`crate::fencing`]. It costs two more rounds per acquisition.
    pub fn fencing(&self) -> bool {
        self.fencing
    }

    /// Whether fencing may run on nodes that keep no append-only file. Off (the default),
    /// a lock with [`fencing`](Self::fencing) refuses such a node (`appendonly no`, or a
    /// user denied `INFO`): a node restarted empty forgets its counters, and a later holder
    /// could then be given a token an earlier holder already had (see [`crate::fencing`]).
    /// On, such nodes are used anyway, and tokens are only as monotonic as the nodes are
    /// durable.
    pub fn fencing_on_volatile_nodes(&self) -> bool {
        self.fencing_on_volatile_nodes
    }

    /// The deadline of every blocking acquire (`acquire`, `acquire_many`, `with`), counted
    /// from its start; `None`: its retry settings alone bound it (see
    /// [Bounded waits](Self#bounded-waits)). A per-call
    /// [`acquire_timeout`](crate::DistributedLock::acquire_timeout) overrides it.
    pub fn acquire_timeout(&self) -> Option<Duration> {
        self.acquire_timeout
    }

    /// The longest one attempt of a blocking acquire can take: a few node timeouts (5, or 7
    /// with fencing), for the lock round, the rollback of a failed attempt, the set-up of
    /// the waits and, with fencing, minting the token. A client that is itself stalled
    /// (CPU starvation, a pause) can take longer; nothing bounds that.
    pub fn attempt_bound(&self) -> Duration {
        let rounds = if self.fencing {
            Self::ATTEMPT_ROUNDS + Self::FENCING_ROUNDS
        } else {
            Self::ATTEMPT_ROUNDS
        };
        self.node_timeout.saturating_mul(rounds)
    }

    /// The longest [`worst_case_acquire`](Self::worst_case_acquire) accepted without an
    /// acquire timeout: [`MAX_BLOCKING_ACQUIRE`](Self::MAX_BLOCKING_ACQUIRE) (1 hour), or
    /// [`MAX_BLOCKING_ACQUIRE_TTLS`](Self::MAX_BLOCKING_ACQUIRE_TTLS) TTLs if that is
    /// longer (TTLs over 12 minutes).
    pub fn max_blocking_acquire(&self) -> Duration {
        self.ttl
            .saturating_mul(Self::MAX_BLOCKING_ACQUIRE_TTLS)
            .max(Self::MAX_BLOCKING_ACQUIRE)
    }

    /// The longest a blocking acquire can take by its retry settings:
    /// `retry_count × (retry_delay + retry_jitter) + (retry_count + 1) × attempt_bound()`;
    /// `None` when that overflows a `Duration`. An
    /// [`acquire_timeout`](Self::acquire_timeout) ends it sooner. Not counted: waiting for
    /// the turn behind other blocking acquires of the same resources in this process, each
    /// bounded in the same way, and client stalls.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use quorumlock::LockConfig;
    /// // The defaults: 3 waits of up to 300 ms, 4 attempts of up to 5 × 50 ms.
    /// let config = LockConfig::default();
    /// assert_eq!(config.worst_case_acquire(), Some(Duration::from_millis(3 * 300 + 4 * 250)));
    /// ```
    pub fn worst_case_acquire(&self) -> Option<Duration> {
        let longest_wait = self.retry_delay.checked_add(self.retry_jitter)?;
        let waits = longest_wait.checked_mul(self.retry_count)?;
        // `retry_count + 1` attempts, without overflowing a `u32` at `u32::MAX` retries.
        let attempt = self.attempt_bound();
        let attempts = attempt
            .checked_mul(self.retry_count)?
            .checked_add(attempt)?;
        waits.checked_add(attempts)
    }

    /// The deadline of a blocking acquire that starts at `now`, from the configured
    /// acquire timeout.
    pub(crate) fn acquire_deadline(
        &self,
        now: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        self.acquire_timeout
            .and_then(|timeout| now.checked_add(timeout))
    }

    /// The Redis key a lock on `resource` lives under: the name, after the key prefix.
    /// Fails on a name that cannot be a lock (empty, or longer than
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN)).
    ///
    /// ```
    /// # use quorumlock::LockConfig;
    /// let config = LockConfig::builder().key_prefix("locks:").build()?;
    /// assert_eq!(config.key_for("order:1")?, "locks:order:1");
    /// assert!(config.key_for("").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, resource: &str) -> Result<String, LockError> {
        let resources = Resources::new(self, &[resource])?;
        Ok(resources.keys[0].to_string())
    }

    /// The clock-drift allowance subtracted from every validity: `ttl * drift_factor + 2 ms`.
    pub fn drift_allowance(&self) -> Duration {
        drift_allowance(self.ttl, self.drift_factor).unwrap_or(Duration::MAX)
    }

    /// The longest validity an acquisition can have: the TTL less the drift allowance. The
    /// validity actually granted is this less the time the acquisition took.
    pub fn max_validity(&self) -> Duration {
        self.ttl.saturating_sub(self.drift_allowance())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let ttl = self.ttl;
        if ttl.is_zero() {
            return Err(ConfigError::ZeroTtl);
        }
        if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ConfigError::SubMillisecondTtl { ttl });
        }
        if ttl > Self::MAX_TTL {
            return Err(ConfigError::TtlTooLong {
                ttl,
                max: Self::MAX_TTL,
            });
        }
        if !self.drift_factor.is_finite() || !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::InvalidDriftFactor {
                factor: self.drift_factor,
            });
        }
        if self.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout);
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroConnectTimeout);
        }
        let max_node_timeout = ttl / Self::MAX_NODE_TIMEOUT_SHARE;
        if self.node_timeout > max_node_timeout {
            return Err(ConfigError::NodeTimeoutTooLong {
                node_timeout: self.node_timeout,
                ttl,
                max: max_node_timeout,
            });
        }
        let drift = drift_allowance(ttl, self.drift_factor).unwrap_or(Duration::MAX);
        let spent = drift.saturating_add(self.node_timeout);
        if spent >= ttl {
            return Err(ConfigError::NoValidityLeft {
                ttl,
                drift,
                node_timeout: self.node_timeout,
            });
        }
        if self.retry_count > 0 && self.retry_delay.is_zero() {
            return Err(ConfigError::ZeroRetryDelay);
        }
        if self.retry_jitter > self.retry_delay {
            return Err(ConfigError::JitterExceedsDelay {
                jitter: self.retry_jitter,
                delay: self.retry_delay,
            });
        }
        if let Some(prefix) = &self.key_prefix {
            if prefix.len() > Self::MAX_KEY_PREFIX_LEN {
                return Err(ConfigError::KeyPrefixTooLong {
                    len: prefix.len(),
                    max: Self::MAX_KEY_PREFIX_LEN,
                });
            }
        }
        self.validate_wait()
    }

    /// A blocking acquire must end: by its deadline when it has one, else by its retries.
    fn validate_wait(&self) -> Result<(), ConfigError> {
        match self.acquire_timeout {
            Some(timeout) => {
                if timeout.is_zero() {
                    return Err(ConfigError::ZeroAcquireTimeout);
                }
                if timeout > Self::MAX_ACQUIRE_TIMEOUT {
                    return Err(ConfigError::AcquireTimeoutTooLong {
                        timeout,
                        max: Self::MAX_ACQUIRE_TIMEOUT,
                    });
                }
            }
            None => {
                let worst_case = self.worst_case_acquire();
                let max = self.max_blocking_acquire();
                if worst_case.is_none_or(|worst| worst > max) {
                    return Err(ConfigError::RetriesUnbounded {
                        retry_count: self.retry_count,
                        retry_delay: self.retry_delay,
                        retry_jitter: self.retry_jitter,
                        attempt: self.attempt_bound(),
                        worst_case,
                        max,
                    });
                }
            }
        }
        Ok(())
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
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            key_prefix: None,
            notify_releases: true,
            fair: true,
            fencing: false,
            fencing_on_volatile_nodes: false,
            acquire_timeout: None,
        }
    }
}

/// `ttl * factor + 2 ms`, or `None` when it cannot be represented.
fn drift_allowance(ttl: Duration, factor: f64) -> Option<Duration> {
    let proportional = Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).ok()?;
    proportional.checked_add(LockConfig::DRIFT_FLOOR)
}

/// Builds a validated [`LockConfig`]; start one with [`LockConfig::builder`].
///
/// Setters never fail; [`build`](Self::build) checks the whole configuration at once, so
/// the order of the calls does not matter.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockConfigBuilder {
    config: LockConfig,
}

impl LockConfigBuilder {
    /// Sets the TTL: a whole number of milliseconds, at most [`LockConfig::MAX_TTL`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Sets whether dropped guards release their lock in the background.
    pub fn auto_release(mut self, auto_release: bool) -> Self {
        self.config.auto_release = auto_release;
        self
    }

    /// Sets how many times a blocking `acquire` retries after its first attempt.
    pub fn retry_count(mut self, retry_count: u32) -> Self {
        self.config.retry_count = retry_count;
        self
    }

    /// Sets the mean delay between attempts (non-zero when retries are enabled).
    pub fn retry_delay(mut self, retry_delay: Duration) -> Self {
        self.config.retry_delay = retry_delay;
        self
    }

    /// Sets the jitter around the retry delay (at most the delay itself).
    pub fn retry_jitter(mut self, retry_jitter: Duration) -> Self {
        self.config.retry_jitter = retry_jitter;
        self
    }

    /// Sets the clock-drift factor, in `[0, 1)`.
    pub fn drift_factor(mut self, drift_factor: f64) -> Self {
        self.config.drift_factor = drift_factor;
        self
    }

    /// Sets the per-node timeout (non-zero, at most a tenth of the TTL).
    pub fn node_timeout(mut self, node_timeout: Duration) -> Self {
        self.config.node_timeout = node_timeout;
        self
    }

    /// Sets a prefix for every Redis key (an empty prefix means none).
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        let prefix = key_prefix.into();
        self.config.key_prefix = (!prefix.is_empty()).then_some(prefix);
        self
    }

    /// Sets whether releases are announced over pub/sub and waited for.
    pub fn notify_releases(mut self, notify: bool) -> Self {
        self.config.notify_releases = notify;
        self
    }

    /// Sets whether blocking acquires wait in line on the nodes; see [`LockConfig::fair`].
    pub fn fair(mut self, fair: bool) -> Self {
        self.config.fair = fair;
        self
    }

    /// Sets whether each acquisition mints a fencing token.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.config.fencing = fencing;
        self
    }

    /// Sets whether fencing may run on nodes without an append-only file; see
    /// [`LockConfig::fencing_on_volatile_nodes`].
    pub fn fencing_on_volatile_nodes(mut self, allow: bool) -> Self {
        self.config.fencing_on_volatile_nodes = allow;
        self
    }

    /// Sets how long one attempt to connect to a node may take; see
    /// [`LockConfig::connect_timeout`].
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.config.connect_timeout = connect_timeout;
        self
    }

    /// Gives every blocking acquire a deadline, `timeout` after it starts (non-zero, at most
    /// [`LockConfig::MAX_ACQUIRE_TIMEOUT`]); see [`LockConfig::acquire_timeout`]. With it,
    /// `retry_count` may be as large as you like: the deadline, not the count, ends the
    /// wait. `None` takes the deadline away again (from a builder made by
    /// [`LockConfig::to_builder`]).
    pub fn acquire_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.config.acquire_timeout = timeout.into();
        self
    }

    /// Validates the settings and returns the configuration.
    pub fn build(self) -> Result<LockConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    //! The seed's LockConfigTest: defaults, immutability through the builder, validation.
    use super::*;

    fn ms(n: u64) -> Duration {
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

    #[test]
    fn builder_derives_copies_without_touching_the_original() {
        let base = LockConfig::default();
        let changed = base
            .to_builder()
            .ttl(Duration::from_secs(5))
            .auto_release(false)
            .retry_count(0)
            .key_prefix("locks:")
            .build()
            .unwrap();
        assert_eq!(base, LockConfig::default());
        assert_eq!(changed.ttl(), Duration::from_secs(5));
        assert!(!changed.auto_release());
        assert_eq!(changed.retry_count(), 0);
        assert_eq!(changed.key_prefix(), Some("locks:"));
        assert_eq!(base.with_ttl(ms(1500)).unwrap().ttl(), ms(1500));
    }

    #[test]
    fn empty_key_prefix_means_none() {
        let config = LockConfig::builder().key_prefix("").build().unwrap();
        assert_eq!(config.key_prefix(), None);
    }

    #[test]
    fn rejects_zero_sub_millisecond_and_huge_ttls() {
        let build = |ttl| LockConfig::builder().ttl(ttl).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroTtl));
        assert!(matches!(
            build(Duration::from_micros(1_000_500)),
            Err(ConfigError::SubMillisecondTtl { .. })
        ));
        assert!(matches!(
            build(LockConfig::MAX_TTL + ms(1)),
            Err(ConfigError::TtlTooLong { .. })
        ));
        assert!(build(LockConfig::MAX_TTL).is_ok());
    }

    #[test]
    fn rejects_drift_factors_outside_zero_to_one() {
        for factor in [-0.1, 1.0, 7.0, f64::NAN, f64::INFINITY] {
            let result = LockConfig::builder().drift_factor(factor).build();
            assert!(
                matches!(result, Err(ConfigError::InvalidDriftFactor { .. })),
                "{factor}: {result:?}"
            );
        }
        assert!(LockConfig::builder().drift_factor(0.0).build().is_ok());
    }

    #[test]
    fn rejects_drift_that_eats_the_ttl() {
        let result = LockConfig::builder()
            .ttl(ms(100))
            .node_timeout(ms(5))
            .drift_factor(0.99)
            .build();
        assert!(matches!(result, Err(ConfigError::NoValidityLeft { .. })));
        // A 2 ms TTL cannot even cover the 2 ms drift floor.
        let result = LockConfig::builder()
            .ttl(ms(2))
            .node_timeout(Duration::from_micros(100))
            .build();
        assert!(matches!(result, Err(ConfigError::NoValidityLeft { .. })));
    }

    #[test]
    fn rejects_node_timeouts_that_are_zero_or_not_well_below_the_ttl() {
        let build = |timeout| LockConfig::builder().node_timeout(timeout).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroNodeTimeout));
        assert!(matches!(
            build(ms(3001)),
            Err(ConfigError::NodeTimeoutTooLong { .. })
        ));
        assert!(build(ms(3000)).is_ok());
    }

    #[test]
    fn rejects_spinning_retries_and_oversized_jitter() {
        let result = LockConfig::builder()
            .retry_delay(Duration::ZERO)
            .retry_jitter(Duration::ZERO)
            .build();
        assert_eq!(result, Err(ConfigError::ZeroRetryDelay));
        // Without retries a zero delay is never used, so it is fine.
        let no_retries = LockConfig::builder()
            .retry_count(0)
            .retry_delay(Duration::ZERO)
            .retry_jitter(Duration::ZERO)
            .build();
        assert!(no_retries.is_ok());
        let result = LockConfig::builder().retry_jitter(ms(201)).build();
        assert!(matches!(
            result,
            Err(ConfigError::JitterExceedsDelay { .. })
        ));
    }

    #[test]
    fn rejects_oversized_key_prefix() {
        let result = LockConfig::builder().key_prefix("p".repeat(257)).build();
        assert!(matches!(result, Err(ConfigError::KeyPrefixTooLong { .. })));
    }

    #[test]
    fn rejects_retries_that_could_run_for_months() {
        // Four billion retries 1 ms apart: about 50 days of waits alone.
        let err = LockConfig::builder()
            .retry_count(u32::MAX)
            .retry_delay(ms(1))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap_err();
        let ConfigError::RetriesUnbounded {
            retry_count,
            worst_case,
            max,
            ..
        } = &err
        else {
            panic!("expected RetriesUnbounded, got {err:?}");
        };
        assert_eq!(*retry_count, u32::MAX);
        assert!(worst_case.is_some_and(|worst| worst > Duration::from_secs(49 * 86_400)));
        assert_eq!(*max, LockConfig::MAX_BLOCKING_ACQUIRE);
        let text = err.to_string();
        for needle in ["4294967295 retries", "1ms", "3600s", "acquire_timeout"] {
            assert!(text.contains(needle), "{needle:?} missing: {text}");
        }
    }

    #[test]
    fn rejects_a_retry_delay_that_never_ends() {
        let err = LockConfig::builder()
            .retry_delay(Duration::MAX)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::RetriesUnbounded {
                    worst_case: None,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("could take forever"), "{err}");
    }

    #[test]
    fn accepts_retries_up_to_the_bound_and_counts_the_attempts() {
        // One retry of up to an hour less the two attempts' bound is just allowed...
        let attempts = LockConfig::default().attempt_bound() * 2;
        let delay = LockConfig::MAX_BLOCKING_ACQUIRE - attempts;
        let build = |delay| {
            LockConfig::builder()
                .retry_count(1)
                .retry_delay(delay)
                .retry_jitter(Duration::ZERO)
                .build()
        };
        let config = build(delay).unwrap();
        assert_eq!(
            config.worst_case_acquire(),
            Some(LockConfig::MAX_BLOCKING_ACQUIRE)
        );
        // ...one millisecond more is not: the attempts count, not only the waits.
        assert!(matches!(
            build(delay + ms(1)),
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        // A long TTL allows five TTLs: a 1-day lock may wait five days.
        let long = LockConfig::builder()
            .ttl(Duration::from_secs(86_400))
            .retry_count(1)
            .retry_delay(Duration::from_secs(4 * 86_400))
            .retry_jitter(Duration::ZERO)
            .build();
        assert!(long.is_ok(), "{long:?}");
        let too_long = long.unwrap().to_builder().retry_count(2).build();
        assert!(matches!(
            too_long,
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        // Fencing adds two rounds to each attempt.
        let fenced = LockConfig::builder().fencing(true).build().unwrap();
        assert_eq!(fenced.attempt_bound(), ms(7 * 50));
        assert_eq!(LockConfig::default().attempt_bound(), ms(5 * 50));
    }

    #[test]
    fn an_acquire_timeout_lifts_the_bound_on_the_retries() {
        let config = LockConfig::builder()
            .retry_count(u32::MAX)
            .retry_delay(ms(1))
            .retry_jitter(Duration::ZERO)
            .acquire_timeout(Duration::from_secs(4 * 3600))
            .build()
            .unwrap();
        assert_eq!(
            config.acquire_timeout(),
            Some(Duration::from_secs(4 * 3600))
        );
        // Taking the deadline away again brings the check back.
        assert!(matches!(
            config.to_builder().acquire_timeout(None).build(),
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        let build = |timeout| LockConfig::builder().acquire_timeout(timeout).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroAcquireTimeout));
        assert!(matches!(
            build(LockConfig::MAX_ACQUIRE_TIMEOUT + ms(1)),
            Err(ConfigError::AcquireTimeoutTooLong { .. })
        ));
        assert!(build(LockConfig::MAX_ACQUIRE_TIMEOUT).is_ok());
        assert_eq!(LockConfig::default().acquire_timeout(), None);
    }

    #[test]
    fn the_acquire_timeout_sets_the_deadline_of_every_blocking_acquire() {
        let now = tokio::time::Instant::now();
        assert_eq!(LockConfig::default().acquire_deadline(now), None);
        let config = LockConfig::builder()
            .acquire_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(
            config.acquire_deadline(now),
            Some(now + Duration::from_secs(5))
        );
    }

    #[test]
    fn errors_explain_themselves() {
        let err = LockConfig::builder()
            .node_timeout(Duration::from_secs(5))
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("node timeout"), "{text}");
        assert!(text.contains("3s"), "{text}");
    }
}
