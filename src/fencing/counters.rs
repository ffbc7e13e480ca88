//! Where a lock's fencing counters live on its nodes: one per resource, or a bounded set
//! shared by all resources (see [Counter layouts](super#counter-layouts)).

use std::sync::Arc;

use crate::error::ConfigError;
use crate::protocol::keys::{counter_bucket, counter_key, shared_counter_key};
use crate::resource::{KeyLayout, Keys};

/// Where the fencing counters of a lock's resources live on its nodes: set with
/// [`LockConfigBuilder::fencing_counters`](crate::LockConfigBuilder::fencing_counters).
/// See [Counter layouts](super#counter-layouts) for the trade-off.
///
/// Every client of a resource must use the same layout (and the same number of buckets):
/// tokens are only ordered among holders that raise the same counter.
///
/// ```
/// use quorumlock::fencing::FencingCounters;
/// use quorumlock::LockConfig;
///
/// // At most 64 counter keys on each node, however many resources are fenced.
/// let config = LockConfig::builder()
///     .fencing(true)
///     .fencing_counters(FencingCounters::Shared { buckets: 64 })
///     .build()?;
/// assert_eq!(config.fencing_counters(), FencingCounters::Shared { buckets: 64 });
/// // Zero buckets, or more than the maximum, is refused.
/// let none = LockConfig::builder().fencing_counters(FencingCounters::Shared { buckets: 0 });
/// assert!(none.build().is_err());
/// # Ok::<(), quorumlock::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FencingCounters {
    /// One counter per resource, `quorumlock:fence:<key>` (the default, and the layout of
    /// earlier versions): a resource's tokens are 1, 2, 3, ..., and every resource ever
    /// fenced leaves its counter on every node for good.
    #[default]
    PerResource,
    /// `buckets` counters shared by all resources, `quorumlock:fence-bucket:<bucket>`, a
    /// resource's bucket being a fixed hash of its lock key: at most `buckets` counter keys
    /// on each node. Tokens still strictly increase per resource, but increase across the
    /// resources of a bucket too, so a resource's tokens have gaps. Refused on hash-tagged
    /// nodes (a Redis Cluster member, or [`Nodes::hash_tags`](crate::Nodes::hash_tags)),
    /// where a counter must share its lock key's slot.
    Shared {
        /// How many counters: 1 to [`FencingCounters::MAX_BUCKETS`].
        buckets: u32,
    },
}

impl FencingCounters {
    /// The most buckets [`FencingCounters::Shared`] may have.
    pub const MAX_BUCKETS: u32 = 1 << 16;

    /// Checks the number of buckets.
    pub(crate) fn validate(self) -> Result<(), ConfigError> {
        match self {
            FencingCounters::Shared { buckets } if !(1..=Self::MAX_BUCKETS).contains(&buckets) => {
                Err(ConfigError::InvalidFencingBuckets {
                    buckets,
                    max: Self::MAX_BUCKETS,
                })
            }
            _ => Ok(()),
        }
    }

    /// Refuses shared counters where keys are hash-tagged: a shared counter cannot share
    /// the slot of every lock key it serves, and a script over keys of several slots fails
    /// on a Redis Cluster.
    pub(crate) fn check_layout(self, layout: KeyLayout) -> Result<(), ConfigError> {
        match (self, layout) {
            (FencingCounters::Shared { .. }, KeyLayout::HashTags | KeyLayout::OneSlot) => {
                Err(ConfigError::SharedFencingCountersOnHashTags)
            }
            _ => Ok(()),
        }
    }

    /// The counter keys a mint for the lock keys `keys` reads, and those it raises.
    ///
    /// Per resource, both are the resources' counters. Shared, it raises the buckets of the
    /// keys and reads them together with the per-resource counters: a resource fenced
    /// before its clients moved to shared counters goes on above its old tokens.
    pub(crate) fn of(self, keys: &Keys) -> (Keys, Keys) {
        let own: Keys = keys.iter().map(|key| Arc::from(counter_key(key))).collect();
        let FencingCounters::Shared { buckets } = self else {
            return (own.clone(), own);
        };
        let mut indices: Vec<u32> = keys
            .iter()
            .map(|key| counter_bucket(key, buckets))
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let shared: Keys = indices
            .into_iter()
            .map(|bucket| Arc::from(shared_counter_key(bucket)))
            .collect();
        let read = shared.iter().chain(own.iter()).cloned().collect();
        (read, shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Keys {
        names.iter().map(|name| Arc::from(*name)).collect()
    }

    fn names(keys: &Keys) -> Vec<&str> {
        keys.iter().map(|key| &**key).collect()
    }

    #[test]
    fn per_resource_counters_read_and_raise_the_resources_own() {
        let (read, raise) = FencingCounters::PerResource.of(&keys(&["a", "b"]));
        assert_eq!(names(&read), ["quorumlock:fence:a", "quorumlock:fence:b"]);
        assert_eq!(read, raise);
    }

    #[test]
    fn shared_counters_raise_the_buckets_and_read_the_old_counters_too() {
        let shared = FencingCounters::Shared { buckets: 1 };
        let (read, raise) = shared.of(&keys(&["a", "b"]));
        // Two resources of one bucket raise it once.
        assert_eq!(names(&raise), ["quorumlock:fence-bucket:0"]);
        assert_eq!(
            names(&read),
            [
                "quorumlock:fence-bucket:0",
                "quorumlock:fence:a",
                "quorumlock:fence:b"
            ]
        );
    }

    #[test]
    fn buckets_are_bounded_and_refused_on_hash_tags() {
        for buckets in [0, FencingCounters::MAX_BUCKETS + 1] {
            let shared = FencingCounters::Shared { buckets };
            assert!(shared.validate().is_err(), "{buckets}");
        }
        let shared = FencingCounters::Shared { buckets: 8 };
        assert!(shared.validate().is_ok());
        assert!(shared.check_layout(KeyLayout::Plain).is_ok());
        for layout in [KeyLayout::HashTags, KeyLayout::OneSlot] {
            assert_eq!(
                shared.check_layout(layout),
                Err(ConfigError::SharedFencingCountersOnHashTags)
            );
            assert!(FencingCounters::PerResource.check_layout(layout).is_ok());
        }
    }
}
