//! [`QuorumLock`]: the lock kinds that the read-write lock and the leader election are
//! built on. They ask the nodes for more than any [`DistributedLock`] can (the read side's
//! entries, the leader's record), so they need this crate's own locks.

use crate::lock::DistributedLock;

/// A lock of this crate: [`Redlock`](crate::Redlock) or [`RedisLock`](crate::RedisLock),
/// on whose nodes and configuration a [`RwLock`](crate::RwLock) or an
/// [`Election`](crate::Election) runs. It cannot be implemented outside the crate.
pub trait QuorumLock: DistributedLock + Clone + sealed::Sealed {}

pub(crate) mod sealed {
    /// Reaches the lock every kind delegates to; keeps [`QuorumLock`](super::QuorumLock)
    /// to this crate's kinds.
    #[allow(unreachable_pub)] // public in name only: the module is private
    pub trait Sealed {
        /// The lock this kind delegates to.
        #[allow(private_interfaces)]
        fn inner(&self) -> &crate::lock::Lock;
    }
}
