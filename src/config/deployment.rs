//! The settings that depend on how the lock's servers are deployed: the key layout (hash
//! tags for Redis Cluster), replica acknowledgements (`WAIT`), and whether a
//! Sentinel-managed master may be one member of a quorum. See docs/operations.md,
//! "Deployment shapes".

use std::time::Duration;

use super::LockConfig;
use crate::error::ConfigError;

/// Wait for replicas to acknowledge a lock before it counts: after a node grants a lock (or
/// extends it), it runs `WAIT replicas timeout`, and the grant counts only when at least
/// `replicas` replicas acknowledged it within `timeout`. A master failover then loses no
/// lock that counted, as long as the promoted replica was one of those that acknowledged.
///
/// `WAIT` blocks the node's connection until it returns, so every other request of this
/// process to that server waits behind it: `timeout` must stay below the per-node timeout,
/// and the cost (one replication round trip per grant) is measured in docs/benchmarks.md.
///
/// ```
/// # use std::time::Duration;
/// # use quorumlock::{LockConfig, ReplicaAcks};
/// let config = LockConfig::builder()
///     .node_timeout(Duration::from_millis(100))
///     .replica_acks(ReplicaAcks::new(1, Duration::from_millis(50)))
///     .build()?;
/// assert_eq!(config.replica_acks().map(|acks| acks.replicas()), Some(1));
/// # Ok::<(), quorumlock::ConfigError>(())
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

/// The deployment settings of one [`LockConfig`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Deployment {
    /// Keys in the hash-tagged layout on every node, asked for by the user.
    pub(crate) hash_tags: bool,
    /// Set by the lock when one of its members is a Redis Cluster: the hash-tagged layout,
    /// and every key of one lock in one slot.
    pub(crate) one_slot: bool,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// Whether a Sentinel-managed master may be one member of a quorum.
    pub(crate) sentinel_members: bool,
}

impl LockConfig {
    /// Whether the keys of each lock carry a hash tag (`{<key>}`), so that the lock key,
    /// its queue and deadline keys, its watch marker and its fencing counter all hash to
    /// one Redis Cluster slot. Off by default on standalone nodes, which keeps the key
    /// names other Redlock clients use; always on for a lock with a Redis Cluster member.
    /// See docs/operations.md, "Key layout".
    pub fn hash_tags(&self) -> bool {
        self.deployment.hash_tags || self.deployment.one_slot
    }

    /// The replica acknowledgements each grant waits for; `None` (the default) counts a
    /// grant as soon as the master answers. See [`ReplicaAcks`].
    pub fn replica_acks(&self) -> Option<ReplicaAcks> {
        self.deployment.replica_acks
    }

    /// Whether a Sentinel URL (`redis+sentinel://`) may be one member of a
    /// [`Redlock`](crate::Redlock). Off by default: a quorum member must be an independent
    /// master, and a Sentinel failover promotes a replica that may not have the member's
    /// locks yet (see docs/safety.md, "Deployment shapes"). A
    /// [`RedisLock`](crate::RedisLock) over Sentinel needs no opt-in.
    pub fn sentinel_members(&self) -> bool {
        self.deployment.sentinel_members
    }

    /// Whether every key of one lock must live in one slot: a member is a Redis Cluster.
    pub(crate) fn one_slot(&self) -> bool {
        self.deployment.one_slot
    }

    /// This configuration for a lock with a Redis Cluster member.
    pub(crate) fn for_cluster_members(mut self) -> Self {
        self.deployment.one_slot = true;
        self
    }

    pub(crate) fn deployment_mut(&mut self) -> &mut Deployment {
        &mut self.deployment
    }

    pub(super) fn validate_deployment(&self) -> Result<(), ConfigError> {
        let Some(acks) = self.deployment.replica_acks else {
            return Ok(());
        };
        let timeout = acks.timeout;
        if acks.replicas == 0
            || timeout.is_zero()
            || !timeout.subsec_nanos().is_multiple_of(1_000_000)
            || timeout >= self.node_timeout()
        {
            return Err(ConfigError::InvalidReplicaAcks {
                replicas: acks.replicas,
                timeout,
                node_timeout: self.node_timeout(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ConfigError, LockConfig, ReplicaAcks};

    #[test]
    fn replica_acks_need_a_replica_and_a_timeout_below_the_node_timeout() {
        let with = |replicas, timeout_ms| {
            LockConfig::builder()
                .node_timeout(Duration::from_millis(100))
                .replica_acks(ReplicaAcks::new(
                    replicas,
                    Duration::from_millis(timeout_ms),
                ))
                .build()
        };
        assert!(with(1, 50).is_ok());
        for (replicas, timeout) in [(0, 50), (1, 0), (1, 100), (1, 500)] {
            assert!(
                matches!(
                    with(replicas, timeout),
                    Err(ConfigError::InvalidReplicaAcks { .. })
                ),
                "{replicas} within {timeout} ms"
            );
        }
        let sub_millisecond = LockConfig::builder()
            .replica_acks(ReplicaAcks::new(1, Duration::from_micros(1500)))
            .build();
        assert!(sub_millisecond.is_err());
        // Off by default, and cleared again with `None`.
        assert_eq!(LockConfig::default().replica_acks(), None);
        let cleared = with(1, 50).unwrap().to_builder().replica_acks(None).build();
        assert_eq!(cleared.unwrap().replica_acks(), None);
    }

    #[test]
    fn a_cluster_member_implies_hash_tags_and_one_slot() {
        let config = LockConfig::default();
        assert!(!config.hash_tags() && !config.one_slot());
        let cluster = config.for_cluster_members();
        assert!(cluster.hash_tags() && cluster.one_slot());
        let opted_in = LockConfig::builder().hash_tags(true).build().unwrap();
        assert!(opted_in.hash_tags() && !opted_in.one_slot());
    }
}
