//! What `run` holds while its command runs: the lock alone (exclusive), a share of it
//! (`--shared`, as `flock -s`), or one of K permits (`--permits K`).

use std::time::Duration;

use quorumlock::{LockError, LockGuard, Redlock, RwLock, Semaphore};

use crate::args::RunArgs;

/// What a `run` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The lock alone: the write side of the read-write lock of the name, so that it
    /// excludes the shared runs as well as the other exclusive ones.
    Exclusive,
    /// The read side, shared with the other shared runs.
    Shared,
    /// One of this many permits of the semaphore of the name.
    Permit(u32),
}

impl Hold {
    /// What `args` ask for.
    pub fn of(args: &RunArgs) -> Self {
        match (args.shared, args.permits) {
            (_, Some(permits)) => Hold::Permit(permits),
            (true, None) => Hold::Shared,
            (false, None) => Hold::Exclusive,
        }
    }

    /// Takes this of `resource` on `lock`: one attempt, or attempts until `wait`.
    pub async fn take(
        self,
        lock: &Redlock,
        resource: &str,
        wait: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        match self {
            Hold::Exclusive | Hold::Shared => {
                let rwlock = RwLock::new(lock.clone(), resource)?;
                match (self, wait) {
                    (Hold::Shared, Some(wait)) => rwlock.read_timeout(wait).await,
                    (Hold::Shared, None) => rwlock.try_read().await,
                    (_, Some(wait)) => rwlock.write_timeout(wait).await,
                    (_, None) => rwlock.try_write().await,
                }
            }
            Hold::Permit(permits) => {
                let semaphore = Semaphore::new(lock.clone(), resource, permits)?;
                let permit = match wait {
                    Some(wait) => semaphore.acquire_timeout(wait).await?,
                    None => semaphore.try_acquire().await?,
                };
                Ok(permit.into_guard())
            }
        }
    }
}
