//! [`RwLock`]: a read-write lock over the quorum: any number of readers, or one writer.
//!
//! On each node the write side is a mutex key, and each reader has an entry of its own (a
//! key with its own TTL), listed beside the write side; one script takes either side, and
//! refuses a side while the other is held there. The quorum rule over nodes then gives
//! the exclusion between a writer and a reader as it does between two writers (the
//! argument is in docs/safety.md, "Read-write locks"). Every hold is a mutex lease, so it
//! is released, extended and checked by the mutex's own compare-and-delete,
//! compare-and-pexpire and holds check (a reader's extension also raises the reader
//! list's expiry to its entry's, so the list outlives it): a guard never touches another
//! holder's entry.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::lock::Lock;
use crate::protocol::keys::{self, READER_PREFIX};
use crate::quorum::claim::Claim;
use crate::redlock::Redlock;
use crate::resource::{Name, Resources};
use crate::retry::retry_until;
use crate::token::LockToken;

/// A read-write lock shared by many processes through the lock's nodes: any number of
/// readers at once, or one writer, never both, under the same assumptions as the mutex's
/// exclusion.
///
/// Both sides return a [`LockGuard`], with everything a mutex guard has: a token, a
/// validity deadline, refresh, [`auto_extend`](LockGuard::auto_extend), the
/// [`lost`](LockGuard::lost) signal, and a release when dropped. Each reader's guard
/// holds an entry of its own, so readers come and go, and extend, independently.
///
/// **Writers do not starve.** A writer that has to wait marks the lock as wanted by a
/// writer on the nodes it asked, and from then on new readers are refused there (writer
/// preference), so the readers present drain and the writer gets in; the mark lapses soon
/// after the writer stops asking. The price is that a steady stream of writers can keep
/// readers waiting; [`writer_preference(false)`](Self::writer_preference) turns it off.
/// (docs/benchmarks.md measures both.)
///
/// ```no_run
/// use quorumlock::{LockConfig, Redlock, RwLock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
/// let lock = Redlock::connect(urls, LockConfig::default()).await?;
/// let catalog = RwLock::new(lock, "catalog")?;
///
/// // Many processes read at once...
/// let reading = catalog.read().await?;
/// // ... read the catalog, within reading.validity() ...
/// reading.release().await?;
///
/// // ... and one rewrites it, once the readers are gone.
/// let writing = catalog.write().await?;
/// // ... rewrite the catalog ...
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// The same on the simulated nodes (feature `test-util`), where it runs:
///
/// ```
/// use quorumlock::sim::SimCluster;
/// use quorumlock::{LockConfig, LockError, RwLock};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let cluster = SimCluster::new(3);
/// let catalog = RwLock::new(cluster.redlock(LockConfig::default())?, "catalog")?;
/// let first = catalog.try_read().await?;
/// let second = catalog.try_read().await?; // readers share
/// assert!(matches!(catalog.try_write().await, Err(LockError::Held { .. })));
/// first.release().await?;
/// second.release().await?;
///
/// let writer = catalog.try_write().await?;
/// assert!(matches!(catalog.try_read().await, Err(LockError::Held { .. })));
/// writer.release().await?;
/// # Ok::<(), LockError>(())
/// # }).unwrap();
/// ```
///
/// The write side's key is the mutex key of the same name, so a plain mutex on that name
/// is a writer: it excludes the readers and waits for them. A reader of a name whose
/// semaphore's permits are held is refused with [`LockError::ModeMismatch`].
#[derive(Clone)]
pub struct RwLock {
    lock: Redlock,
    /// Shared with the name of every lease it makes, rather than copied into each.
    name: Arc<str>,
    writer: Arc<str>,
    writer_preference: bool,
}

/// Which side an attempt takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

impl RwLock {
    /// The read-write lock `name` on `lock`'s nodes and configuration (its TTL, retries,
    /// deadlines and fencing apply to each side). Fails with
    /// [`LockError::InvalidResource`] for a name that cannot be a lock.
    pub fn new(lock: Redlock, name: &str) -> Result<Self, LockError> {
        let config = lock.config();
        let layout = lock.inner().coordinator().layout();
        let writer = Arc::clone(&Resources::new(config, layout, &[name])?.keys[0]);
        // The longest key of the lock is a reader's entry: checked once, here.
        config.key_for(&format!("{name}{}", reader_suffix_of_the_longest()))?;
        Ok(RwLock {
            lock,
            name: name.into(),
            writer,
            writer_preference: true,
        })
    }

    /// The same lock with writer preference on (the default) or off. Off, a writer waits
    /// until no reader holds the lock on a quorum, which a steady stream of overlapping
    /// readers may never allow.
    pub fn writer_preference(mut self, on: bool) -> Self {
        self.writer_preference = on;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The write side's key on each node (the mutex key of the name).
    pub fn writer_key(&self) -> &str {
        &self.writer
    }

    /// The key of the list of reader entries on each node, for inspection (`ZRANGE`):
    /// `quorumlock:readers:<writer key>`. A listed entry that no longer exists is a reader
    /// gone, dropped from the list by the next acquisition.
    pub fn readers_key(&self) -> String {
        keys::readers_key(&self.writer)
    }

    /// The key of the writer-waiting mark on each node, for inspection: present while a
    /// blocked writer keeps new readers out.
    pub fn writer_waiting_key(&self) -> String {
        keys::writer_waiting_key(&self.writer)
    }

    /// One attempt at the read side, no waiting: [`LockError::Held`] while a writer holds
    /// the lock or waits for it.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::try_acquire`](crate::DistributedLock::try_acquire): dropping
    /// the future leaves no entry behind.
    pub async fn try_read(&self) -> Result<LockGuard, LockError> {
        self.attempt(Side::Read, false).await
    }

    /// One attempt at the write side, no waiting: [`LockError::Held`] while a reader or a
    /// writer holds the lock. It does not mark a writer as waiting.
    ///
    /// # Cancel safety
    ///
    /// As [`try_read`](Self::try_read).
    pub async fn try_write(&self) -> Result<LockGuard, LockError> {
        self.attempt(Side::Write, false).await
    }

    /// The read side, with the retries of
    /// [`DistributedLock::acquire`](crate::DistributedLock::acquire): up to
    /// `1 + retry_count` attempts a jittered `retry_delay` apart, within the configured
    /// [`acquire_timeout`](crate::LockConfig::acquire_timeout), if any.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no entry behind: an attempt in flight is undone as
    /// [`try_read`](Self::try_read)'s is, and between attempts nothing is held.
    pub async fn read(&self) -> Result<LockGuard, LockError> {
        let deadline = self.lock.config().acquire_deadline(Instant::now());
        self.acquire_until(Side::Read, deadline).await
    }

    /// [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    pub async fn read_timeout(&self, timeout: Duration) -> Result<LockGuard, LockError> {
        self.acquire_until(Side::Read, self.deadline_in(timeout))
            .await
    }

    /// The write side, with the retries of [`read`](Self::read). While it waits, it keeps
    /// new readers out (unless [`writer_preference`](Self::writer_preference) is off).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read). A writer dropped while it waits keeps new readers out for
    /// under a second more, until its mark lapses.
    pub async fn write(&self) -> Result<LockGuard, LockError> {
        let deadline = self.lock.config().acquire_deadline(Instant::now());
        self.acquire_until(Side::Write, deadline).await
    }

    /// [`write`](Self::write), giving up after `timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn write_timeout(&self, timeout: Duration) -> Result<LockGuard, LockError> {
        self.acquire_until(Side::Write, self.deadline_in(timeout))
            .await
    }

    /// Runs `work` on the read side: taken as [`read`](Self::read) does, kept alive while
    /// `work` runs, `work` cancelled if it is lost; see
    /// [`DistributedLock::with`](crate::DistributedLock::with).
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::with`](crate::DistributedLock::with).
    pub async fn with_read<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::scoped::run_locked(self.read().await?, work).await
    }

    /// Runs `work` on the write side, as [`with_read`](Self::with_read) does on the read
    /// side.
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedLock::with`](crate::DistributedLock::with).
    pub async fn with_write<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::scoped::run_locked(self.write().await?, work).await
    }

    fn inner(&self) -> &Lock {
        self.lock.inner()
    }

    fn deadline_in(&self, timeout: Duration) -> Option<Instant> {
        let now = Instant::now();
        now.checked_add(timeout)
            .or_else(|| self.lock.config().acquire_deadline(now))
    }

    async fn acquire_until(
        &self,
        side: Side,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let config = self.lock.config();
        retry_until(config, &self.name, deadline, || self.attempt(side, true)).await
    }

    /// One round for `side`; a `blocking` writer marks itself as waiting when refused.
    async fn attempt(&self, side: Side, blocking: bool) -> Result<LockGuard, LockError> {
        let (keys, claim) = match side {
            Side::Read => {
                let entry = keys::reader_key(&self.writer, LockToken::generate().as_str());
                let claim = Claim::Shared {
                    writer: Arc::clone(&self.writer),
                };
                (crate::resource::Keys::One(Arc::from(entry)), claim)
            }
            Side::Write => {
                let waiting = (blocking && self.writer_preference)
                    .then(|| crate::handoff::waiter_interest(self.lock.config()));
                let claim = Claim::Exclusive { waiting };
                (crate::resource::Keys::One(Arc::clone(&self.writer)), claim)
            }
        };
        let resources = Resources {
            name: Name::Own(Arc::clone(&self.name)),
            keys,
        };
        self.inner().try_claim(&resources, &claim).await
    }
}

/// What a reader's entry adds to the length of a name: its prefix, `:` and a 32-digit id.
fn reader_suffix_of_the_longest() -> String {
    "x".repeat(READER_PREFIX.len() + 1 + 32)
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .field("writer_preference", &self.writer_preference)
            .finish()
    }
}
