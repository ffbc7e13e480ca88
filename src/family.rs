//! [`QuorumLock`]: the lock kinds that the read-write lock and the leader election are
//! built on. They ask the nodes for more than any [`DistributedLock`] can (the read side's
//! entries, the leader's record), so they need this crate's own locks.

use std::future::Future;

use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::LockError;
use crate::lock::DistributedLock;
use crate::retry::retry_wait;

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

/// The blocking acquire of the family's primitives that do not queue on the nodes (a
/// semaphore's passes over its slots, a read-write lock's sides): `attempt` up to
/// `1 + retry_count` times, `retry_delay ± retry_jitter` apart, until one succeeds or
/// fails for good; past `deadline`, [`LockError::TimedOut`] for `resource` when an
/// attempt was still running, or the last attempt's error when the next wait would end
/// past it.
///
/// Dropping the future drops the attempt in flight, which each attempt makes safe.
pub(crate) async fn retry_until<T, F, Fut>(
    config: &LockConfig,
    resource: &str,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let started = Instant::now();
    let timed_out = |last: Option<LockError>| LockError::TimedOut {
        resource: resource.to_owned(),
        waited: started.elapsed(),
        last: last.map(Box::new),
    };
    let mut retries_left = config.retry_count();
    let mut last_error = None;
    loop {
        let result = match deadline {
            None => attempt().await,
            Some(deadline) => match tokio::time::timeout_at(deadline, attempt()).await {
                Ok(result) => result,
                Err(_) => return Err(timed_out(last_error.take())),
            },
        };
        let error = match result {
            Err(error) if error.is_retryable() && retries_left > 0 => error,
            result => return result,
        };
        let wait = retry_wait(config, &mut rand::rng());
        let wakes = Instant::now().checked_add(wait);
        if deadline.is_some_and(|deadline| wakes.is_none_or(|wakes| wakes >= deadline)) {
            return Err(error);
        }
        retries_left -= 1;
        last_error = Some(error);
        tokio::time::sleep(wait).await;
    }
}
