//! [`Semaphore`]: at most K holders of a resource at once, over the same quorum as the
//! mutex.
//!
//! Counting holders on each node and asking a majority is not safe for K ≥ 2: with five
//! nodes and K = 2, three clients can each be counted on three nodes (nine entries in ten
//! places), so each sees "a majority" and three hold at once. The semaphore is instead K
//! *permit slots*, each a lock of its own (`<name>:permit:<i>`), and a permit is the lock of
//! one slot. Each slot keeps the mutex's exclusion, so at most K guards are valid at any
//! moment (the argument is in docs/safety.md, "Semaphores").
//!
//! A client tries the slots one by one, starting at a random one. Two clients that try
//! the same free slot at the same moment split its votes and both move on, so spreading
//! their starting points is what lets concurrent clients agree on a slot most of the time.

mod permit;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::{ConfigError, LockError};
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::protocol::keys::permit_resource;
use crate::quorum::claim::Claim;
use crate::redlock::Redlock;
use crate::resource::{KeyLayout, Resources};

pub use self::permit::Permit;

/// A counting semaphore with `K` permits, shared by many processes through the lock's
/// nodes: at most `K` [`Permit`]s are valid at any moment, under the same assumptions as
/// the mutex's exclusion (see [`Redlock`](crate::Redlock), and docs/safety.md).
///
/// Each permit is the lock of one of `K` slots, so it has everything a [`LockGuard`](crate::LockGuard)
/// has: a token, a validity deadline, [`refresh`](Permit::refresh),
/// [`auto_extend`](Permit::auto_extend), the [`lost`](Permit::lost) signal, and a release
/// when dropped. A name is one lock: while permits of `K` are held, a semaphore of the
/// same name with another `K`, or a reader of it, is refused with
/// [`LockError::ModeMismatch`], and a mutex of the name is [`LockError::Held`] until they
/// are given back (docs/safety.md, "One name, one lock").
///
/// ```
/// use std::time::Duration;
/// use quorumlock::sim::SimCluster;
/// use quorumlock::{LockConfig, LockError, Semaphore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let cluster = SimCluster::new(5);
/// let lock = cluster.redlock(LockConfig::default())?;
/// // At most two uploads run at once, across every process that uses these nodes.
/// let uploads = Semaphore::new(lock, "uploads", 2)?;
///
/// let first = uploads.try_acquire().await?;
/// let second = uploads.try_acquire().await?;
/// assert_ne!(first.slot(), second.slot());
/// assert!(matches!(uploads.try_acquire().await, Err(LockError::Held { .. })));
///
/// first.release().await?; // gives the permit back
/// let third = uploads.acquire_timeout(Duration::from_secs(1)).await?;
/// # drop((second, third));
/// # Ok::<(), LockError>(())
/// # }).unwrap();
/// ```
///
/// A permit is a lease like any lock: it runs out at its deadline unless refreshed.
/// Work that may outlast the TTL runs under [`with`](Self::with), which keeps the permit
/// alive and cancels the work if it is lost.
#[derive(Clone)]
pub struct Semaphore {
    lock: Redlock,
    name: String,
    /// The name's own lock key, beside which every permit is listed: what makes a mutex
    /// (or a read-write lock) of the same name and its permits exclude each other.
    name_key: Arc<str>,
    permits: u32,
}

impl Semaphore {
    /// The most permits a semaphore may have. Each attempt may try every slot, one round
    /// each, so a semaphore of thousands of permits would be a slow one: use a resource
    /// per item instead.
    pub const MAX_PERMITS: u32 = 256;

    /// A semaphore named `name` with `permits` permits, on `lock`'s nodes and configuration
    /// (its TTL, retries, deadlines and fencing apply to each permit).
    ///
    /// Fails with [`ConfigError::InvalidPermits`] for zero permits or more than
    /// [`MAX_PERMITS`](Self::MAX_PERMITS), and with [`LockError::InvalidResource`] when the
    /// slots' names would not be valid resources, or, on a Redis Cluster member, when the
    /// name has no hash tag (`{uploads}`) to put its slots in the name's own hash slot.
    pub fn new(lock: Redlock, name: &str, permits: u32) -> Result<Self, LockError> {
        if permits == 0 || permits > Self::MAX_PERMITS {
            return Err(ConfigError::InvalidPermits {
                permits,
                max: Self::MAX_PERMITS,
            }
            .into());
        }
        // The longest slot name is the last one: checked once here, not on each attempt.
        let (config, layout) = (lock.config(), lock.inner().coordinator().layout());
        let name_key = Arc::clone(&Resources::new(config, layout, &[name])?.keys[0]);
        let last = permit_resource(name, permits - 1);
        Resources::new(config, layout, &[&last])?;
        if layout == KeyLayout::OneSlot {
            // A permit's script touches its slot and the name's keys: on a Redis Cluster
            // they must share a hash slot, which a hash tag in the name (`{uploads}`) gives.
            Resources::new(config, layout, &[name, &last])?;
        }
        Ok(Semaphore {
            lock,
            name: name.to_owned(),
            name_key,
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The lock the permits are taken with.
    pub fn lock(&self) -> &Redlock {
        &self.lock
    }

    /// The resource of permit slot `slot`: `<name>:permit:<slot>`.
    ///
    /// ```
    /// # use quorumlock::{sim::SimCluster, LockConfig, Semaphore};
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
    /// #     .build().unwrap().block_on(async {
    /// let lock = SimCluster::new(3).redlock(LockConfig::default()).unwrap();
    /// let semaphore = Semaphore::new(lock, "uploads", 4).unwrap();
    /// assert_eq!(semaphore.slot_resource(3), "uploads:permit:3");
    /// # });
    /// ```
    pub fn slot_resource(&self, slot: u32) -> String {
        permit_resource(&self.name, slot)
    }

    /// One pass over the slots, no waiting: the first slot whose lock could be taken, from
    /// a random start. [`LockError::Held`] (for the semaphore's name, with the tally of the
    /// last slot tried) when every permit is held; any other error of a slot (no quorum,
    /// say) at once, since the next slot runs on the same nodes.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::try_acquire`](crate::DistributedLock::try_acquire): dropping the future leaves no permit taken.
    pub async fn try_acquire(&self) -> Result<Permit, LockError> {
        let start = rand::random_range(0..self.permits);
        let mut last = None;
        for step in 0..self.permits {
            let slot = (start + step) % self.permits;
            match self.try_slot(slot).await {
                Ok(guard) => return Ok(Permit::new(guard, slot)),
                Err(LockError::Held { tally, .. }) => last = Some(tally),
                Err(other) => return Err(other),
            }
        }
        Err(LockError::Held {
            resource: self.name.clone(),
            tally: last.unwrap_or_default(),
        })
    }

    /// Passes over the slots up to `1 + retry_count` times, a jittered
    /// `retry_delay ± retry_jitter` apart, until a permit is free, as
    /// [`DistributedLock::acquire`](crate::DistributedLock::acquire) does for one lock; gives up at the configured
    /// [`acquire_timeout`](LockConfig::acquire_timeout), if any.
    ///
    /// Waiters are not served in order: the fair queue of the mutex hands one lock to the
    /// first in line, but a waiter for any of K slots would need a place in the line of
    /// every slot, and could be handed several at once. Waiters race for the slots that
    /// come free, on their retry delay (docs/design.md, "The lock family").
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no permit taken: a pass in flight is cancelled as
    /// [`try_acquire`](Self::try_acquire) is, and between passes nothing is held.
    pub async fn acquire(&self) -> Result<Permit, LockError> {
        let deadline = self.config().acquire_deadline(Instant::now());
        self.acquire_until(deadline).await
    }

    /// [`acquire`](Self::acquire), giving up once `timeout` has passed:
    /// [`LockError::TimedOut`] if a pass was still running then, or the last pass's error
    /// if the next wait would have ended past it.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Permit, LockError> {
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .or_else(|| self.config().acquire_deadline(now));
        self.acquire_until(deadline).await
    }

    /// Runs `work` with a permit: acquires one (as [`acquire`](Self::acquire)), keeps it
    /// alive while `work` runs, cancels `work` if the permit is lost
    /// ([`LockError::Lost`]), and gives the permit back on every exit path; see
    /// [`DistributedLock::with`](crate::DistributedLock::with).
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::with`](crate::DistributedLock::with): dropping the future cancels `work` and gives the
    /// permit back in the background.
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire().await?;
        crate::scoped::run_locked(permit.into_guard(), work).await
    }

    fn config(&self) -> &LockConfig {
        self.lock.config()
    }

    /// One round for the slot `slot`: its lock, taken only beside no mutex, reader or
    /// permit of another K of the name (a mismatch is [`LockError::ModeMismatch`]).
    async fn try_slot(&self, slot: u32) -> Result<LockGuard, LockError> {
        let layout = self.lock.inner().coordinator().layout();
        let resources = Resources::new(self.config(), layout, &[&self.slot_resource(slot)])?;
        let claim = Claim::Permit {
            name: Arc::clone(&self.name_key),
            permits: self.permits,
        };
        self.lock.inner().try_claim(&resources, &claim).await
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<Permit, LockError> {
        let config = self.config();
        crate::retry::retry_until(config, &self.name, deadline, || self.try_acquire()).await
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}
