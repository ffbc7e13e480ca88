//! The facts of how a lock's servers are deployed, which travel with its node set
//! ([`Nodes`](super::Nodes)) rather than its configuration: the key layout (hash tags for
//! Redis Cluster), replica acknowledgements (`WAIT`), whether a Sentinel-managed master may
//! be one member of a quorum, whether fencing may run on nodes without an append-only
//! file, and how long a connection may take. See docs/operations.md, "Deployment shapes".
//!
//! Two of them are checked against the lock's configuration when it connects: a replica
//! acknowledgement must fit in the per-node timeout, and a connection needs some time.

use std::time::Duration;

use crate::config::LockConfig;
use crate::error::ConfigError;

/// Wait for replicas to acknowledge a lock before it counts: after a node grants a lock (or
/// extends it), it runs `WAIT replicas timeout`, and the grant counts only when at least
/// `replicas` replicas acknowledged it within `timeout`. A master failover then loses no
/// lock that counted, as long as the promoted replica was one of those that acknowledged.
///
/// `WAIT` blocks the node's connection until it returns, so every other request of this
/// process to that server waits behind it: `timeout` must stay below the per-node timeout
/// (else [`connect`](crate::Redlock::connect) fails with
/// [`ConfigError::InvalidReplicaAcks`]), and the cost (one replication round trip per
/// grant) is measured in docs/benchmarks.md.
///
/// ```
/// # use std::time::Duration;
/// # use quorumlock::{Nodes, ReplicaAcks};
/// let acks = ReplicaAcks::new(1, Duration::from_millis(50));
/// let nodes = Nodes::new("redis+sentinel://10.0.0.1:26379/orders")?.replica_acks(acks);
/// assert_eq!(acks.replicas(), 1);
/// # drop(nodes);
/// # Ok::<(), quorumlock::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaAcks {
    /// Grants count once `replicas` replicas acknowledged them, waiting `timeout` at most
    /// (a whole number of milliseconds, non-zero, below the per-node timeout).
    pub const fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAcks { replicas, timeout }
    }

    /// How many replicas must acknowledge a grant.
    pub const fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long a node waits for them.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The deployment facts of one node set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deployment {
    /// Keys in the hash-tagged layout on every node, asked for by the user.
    pub(crate) hash_tags: bool,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// Whether a Sentinel-managed master may be one member of a quorum.
    pub(crate) sentinel_members: bool,
    /// Whether fencing may run on nodes that keep no append-only file.
    pub(crate) fencing_on_volatile_nodes: bool,
    /// How long one attempt to (re)connect to a node may take, the server check included.
    pub(crate) connect_timeout: Duration,
    /// Whether connecting fails on any member whose server cannot serve the lock, rather
    /// than counting it as failed.
    pub(crate) strict_members: bool,
    /// Whether a server that started less than the longest lease ago, without a durable
    /// append-only file, abstains until it is that old.
    pub(crate) restart_abstention: bool,
    /// The longest lease any client of these nodes takes; `None`: the lock's TTL.
    pub(crate) longest_lease: Option<Duration>,
    /// Whether each server's clock is sampled, and a node whose clock misbehaves abstains.
    pub(crate) clock_checks: bool,
}

/// The default connect timeout: 1 second. A connection is made once and kept, so it can
/// afford far more than one request's timeout: a TLS handshake across zones, or a process
/// started on a loaded host, takes tens to hundreds of milliseconds.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

impl Default for Deployment {
    fn default() -> Self {
        Deployment {
            hash_tags: false,
            replica_acks: None,
            sentinel_members: false,
            fencing_on_volatile_nodes: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            strict_members: false,
            restart_abstention: true,
            longest_lease: None,
            clock_checks: true,
        }
    }
}

impl Deployment {
    /// How long after it started a server without a durable append-only file abstains,
    /// for a lock with `config`: the longest lease (unless set, its keys' expiry, the TTL
    /// plus the lock-delay: a key lost in the restart may have been keeping a lock-delay)
    /// plus that lease's drift allowance; `None` with restart abstention off.
    pub(crate) fn restart_window(&self, config: &LockConfig) -> Option<Duration> {
        self.restart_abstention.then(|| self.lease_window(config))
    }

    /// The longest lease (the lock's key lifetime, TTL plus lock-delay, unless set) plus
    /// its drift allowance: how long a node that may have lost or early-expired keys stays
    /// out.
    fn lease_window(&self, config: &LockConfig) -> Duration {
        let lease = self.longest_lease.unwrap_or(config.key_ttl());
        lease.saturating_add(config.drift_allowance_for(lease))
    }

    /// What a server clock must do for a lock with `config`: steps within its drift
    /// allowance, a rate within its drift factor; a node whose clock does not abstains for
    /// the lease window. `None` with clock checks off.
    pub(crate) fn clock_rules(&self, config: &LockConfig) -> Option<super::clock::ClockRules> {
        self.clock_checks.then(|| super::clock::ClockRules {
            step: config.drift_allowance(),
            rate: config.drift_factor(),
            abstain_for: self.lease_window(config),
        })
    }

    /// Checks the facts that must fit the lock's configuration: a connect timeout that
    /// lets a connection be made, and replica acknowledgements of at least one replica,
    /// within whole milliseconds below the per-node timeout.
    pub(crate) fn check(&self, config: &LockConfig) -> Result<(), ConfigError> {
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroConnectTimeout);
        }
        let Some(acks) = self.replica_acks else {
            return Ok(());
        };
        let timeout = acks.timeout;
        if acks.replicas == 0
            || timeout.is_zero()
            || !timeout.subsec_nanos().is_multiple_of(1_000_000)
            || timeout >= config.node_timeout()
        {
            return Err(ConfigError::InvalidReplicaAcks {
                replicas: acks.replicas,
                timeout,
                node_timeout: config.node_timeout(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ConfigError, Deployment, LockConfig, ReplicaAcks};

    #[test]
    fn replica_acks_need_a_replica_and_a_timeout_below_the_node_timeout() {
        let ms = Duration::from_millis;
        let config = LockConfig::builder().node_timeout(ms(100)).build().unwrap();
        let with = |replicas, timeout: Duration| {
            let deployment = Deployment {
                replica_acks: Some(ReplicaAcks::new(replicas, timeout)),
                ..Deployment::default()
            };
            deployment.check(&config)
        };
        assert!(with(1, ms(50)).is_ok());
        for (replicas, timeout) in [(0, 50), (1, 0), (1, 100), (1, 500)] {
            assert!(
                matches!(
                    with(replicas, ms(timeout)),
                    Err(ConfigError::InvalidReplicaAcks { .. })
                ),
                "{replicas} within {timeout} ms"
            );
        }
        let sub_millisecond = with(1, Duration::from_micros(1500));
        assert!(sub_millisecond.is_err());
        // Off by default.
        assert_eq!(Deployment::default().replica_acks, None);
        assert!(Deployment::default().check(&config).is_ok());
    }

    #[test]
    fn the_restart_window_covers_the_lock_delay() {
        let ms = Duration::from_millis;
        let config = LockConfig::builder()
            .ttl(ms(1_000))
            .lock_delay(ms(500))
            .build()
            .unwrap();
        // 1.5 s of key expiry plus its drift allowance (1 % + 2 ms).
        assert_eq!(
            Deployment::default().restart_window(&config),
            Some(ms(1_500 + 15 + 2))
        );
        let set = Deployment {
            longest_lease: Some(ms(3_000)),
            ..Deployment::default()
        };
        assert_eq!(set.restart_window(&config), Some(ms(3_000 + 30 + 2)));
    }

    #[test]
    fn a_connection_needs_some_time() {
        let deployment = Deployment {
            connect_timeout: Duration::ZERO,
            ..Deployment::default()
        };
        assert_eq!(
            deployment.check(&LockConfig::default()),
            Err(ConfigError::ZeroConnectTimeout)
        );
    }
}
