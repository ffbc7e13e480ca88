//! [`LockGuard`]: proof of holding a lock, with its token and validity deadline.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::quorum::Coordinator;
use crate::token::LockToken;

/// A held lock: the resource, the token that proves ownership, and the deadline until
/// which the lock is guaranteed to be ours.
///
/// Ownership lives in this value, not in hidden state of the lock object: whoever holds the
/// guard holds the lock, and the lock object can hand out guards for any number of
/// resources at once.
///
/// - [`release`](Self::release) unlocks every node and reports the outcome.
/// - [`refresh`](Self::refresh) extends the lock back to its full TTL.
/// - [`validity`](Self::validity) is the time left before the guarantee ends; do not start
///   work that cannot finish within it.
/// - Dropping the guard without releasing it (an early return, `?`, a panic) releases the
///   lock in the background when [`auto_release`](crate::LockConfig::auto_release) is on
///   (the default). Drop never blocks; it spawns the release on the current tokio runtime.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{DistributedLock, LockConfig, Redlock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let lock = Redlock::connect(
///     ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"],
///     LockConfig::default(),
/// )
/// .await?;
/// let mut guard = lock.acquire("report:daily").await?;
/// println!("holding {} for {:?}", guard.resource(), guard.validity());
/// guard.refresh().await?; // more time
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    coordinator: Arc<Coordinator>,
    resource: String,
    key: Arc<str>,
    token: LockToken,
    acquired_at: Instant,
    deadline: Instant,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        coordinator: Arc<Coordinator>,
        resource: &str,
        key: Arc<str>,
        token: LockToken,
        acquired_at: Instant,
        deadline: Instant,
    ) -> Self {
        LockGuard {
            coordinator,
            resource: resource.to_owned(),
            key,
            token,
            acquired_at,
            deadline,
            released: false,
        }
    }

    /// The name of the locked resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The Redis key the lock lives under (the resource name, after any key prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token stored under the key on the nodes.
    pub fn token(&self) -> &LockToken {
        &self.token
    }

    /// When the acquisition (or the last refresh) started.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The instant until which the lock is guaranteed to be ours, on the monotonic clock:
    /// the start of the last successful round plus the TTL less the drift allowance.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The time left before [`deadline`](Self::deadline); zero once it has passed.
    pub fn validity(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed; the lock may then be held by someone else.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Whether [`release`](Self::release) already ran for this guard.
    pub fn is_released(&self) -> bool {
        self.released
    }

    /// Unlocks every node (compare-and-delete: another owner's lock is never touched) and
    /// reports whether a quorum still held it until now.
    ///
    /// `Ok(())` means the lock was ours on a quorum until the moment it was deleted;
    /// [`LockError::NotHeld`] means it had already expired or been taken over, so the
    /// critical section may have overlapped with another holder's.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.release_in_place().await
    }

    /// Extends the lock back to its full TTL on every node that still holds our token, and
    /// returns the new validity. Never creates or revives a key, and never deletes one when
    /// it fails; on failure the deadline is unchanged.
    pub async fn refresh(&mut self) -> Result<Duration, LockError> {
        let started = Instant::now();
        let deadline = self
            .coordinator
            .refresh(&self.resource, &self.key, &self.token, self.deadline)
            .await?;
        self.acquired_at = started;
        self.deadline = deadline;
        Ok(self.validity())
    }

    /// Asks the nodes whether a quorum still holds our token, and checks the deadline.
    ///
    /// `Ok(false)` means the lock is lost; an error means too few nodes answered to tell.
    pub async fn is_acquired(&self) -> Result<bool, LockError> {
        self.coordinator
            .is_acquired(&self.resource, &self.key, &self.token, self.deadline)
            .await
    }

    /// Releases once; later calls return `Ok(())` without touching the nodes.
    pub(crate) async fn release_in_place(&mut self) -> Result<(), LockError> {
        if self.released {
            return Ok(());
        }
        let outcome = self
            .coordinator
            .release(&self.resource, &self.key, &self.token)
            .await;
        // Marked only now: if this future is dropped mid-release, Drop sends the deletes
        // again in the background (compare-and-delete makes the repeat harmless).
        self.released = true;
        outcome
    }

    /// Whether this guard came from a lock on the same node connections as `coordinator`.
    pub(crate) fn belongs_to(&self, coordinator: &Coordinator) -> bool {
        self.coordinator.shares_nodes_with(coordinator)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released && self.coordinator.config().auto_release() {
            Arc::clone(&self.coordinator)
                .unlock_in_background(Arc::clone(&self.key), self.token.clone());
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.resource)
            .field("token", &self.token)
            .field("validity", &self.validity())
            .field("released", &self.released)
            .finish()
    }
}
