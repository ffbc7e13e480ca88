//! [`LockGuard`]: proof of holding a lock, with its token and validity deadline.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{ConfigError, LeaseEnd, LockError, Tally};
use crate::lease::{Lease, LostSignal};
use crate::quorum::Coordinator;
use crate::session::members::Members;
use crate::token::LockToken;
use crate::watchdog::{AutoExtend, Watchdog};

/// A held lock: the resource, the token that proves ownership, and the deadline until
/// which the lock is guaranteed to be ours.
///
/// Ownership lives in this value, not in hidden state of the lock object: whoever holds the
/// guard holds the lock, and the lock object can hand out guards for any number of
/// resources at once.
///
/// - [`release`](Self::release) unlocks every node and reports the outcome.
/// - [`refresh`](Self::refresh) extends the lock back to its full TTL;
///   [`auto_extend`](Self::auto_extend) does it in the background while work runs.
/// - [`validity`](Self::validity) is the time left before the guarantee ends, and
///   [`lost`](Self::lost) a signal that fires when the lock can no longer be trusted.
/// - Dropping the guard without releasing it (an early return, `?`, a panic) releases the
///   lock in the background when [`auto_release`](crate::LockConfig::auto_release) is on
///   (the default). Drop never blocks; it spawns the release on the current tokio runtime.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{LockConfig, Redlock};
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
    /// The coordinator that granted the lease, which every operation on it goes through.
    coordinator: Arc<Coordinator>,
    lease: Arc<Lease>,
    keeper: Keeper,
    released: bool,
}

/// What keeps a guard's lock alive, if anything.
enum Keeper {
    /// Nothing: the lock expires at its deadline unless refreshed.
    Nothing,
    /// Its own watchdog, held for its drop, which aborts the task.
    Watchdog(#[allow(dead_code)] Watchdog),
    /// A session, with its other locks.
    Session(Arc<Members>),
}

impl LockGuard {
    /// The guard of `lease`, which `coordinator` granted.
    pub(crate) fn new(coordinator: Arc<Coordinator>, lease: Arc<Lease>) -> Self {
        LockGuard {
            coordinator,
            lease,
            keeper: Keeper::Nothing,
            released: false,
        }
    }

    /// The name of the locked resource; for a lock over several resources, their sorted
    /// names joined by `" + "`.
    pub fn resource(&self) -> &str {
        self.lease.resource()
    }

    /// The Redis key the lock lives under (the resource name, after any key prefix); for a
    /// lock over several resources, the first of [`keys`](Self::keys).
    pub fn key(&self) -> &str {
        &self.lease.keys[0]
    }

    /// The Redis keys the lock lives under, one per resource, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.lease.keys.iter().map(|key| &**key)
    }

    /// The token stored under the key on the nodes.
    pub fn token(&self) -> &LockToken {
        &self.lease.token
    }

    /// The fencing token minted for this acquisition: strictly greater than every token
    /// of earlier holders of the resource. `None` unless the lock was configured with
    /// [`fencing`](crate::LockConfigBuilder::fencing). See [`crate::fencing`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease.fencing_token
    }

    /// How the nodes answered the round that acquired the lock, as counted when its quorum
    /// was decided: `granted` of `nodes`, and the nodes that had refused or failed by then.
    ///
    /// A non-empty [`failures`](Tally::failures) means the lock was taken with less margin
    /// than the cluster has: losing a few more nodes would lose it. A node that had not
    /// answered when the quorum was reached is in none of the lists (the round does not
    /// wait for it), so an empty list does not prove every node healthy. Refreshes do not
    /// change it.
    ///
    /// ```no_run
    /// # async fn run(lock: &quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let guard = lock.acquire("report:daily").await?;
    /// for failure in &guard.tally().failures {
    ///     eprintln!("lock taken without {}: {}", failure.node, failure.error);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn tally(&self) -> &Tally {
        &self.lease.tally
    }

    /// When the acquisition (or the last refresh) started.
    pub fn acquired_at(&self) -> Instant {
        self.lease.state().acquired_at
    }

    /// The instant until which the lock is guaranteed to be ours, on the monotonic clock:
    /// the start of the last successful round plus the TTL less the drift allowance.
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// The time left before [`deadline`](Self::deadline); zero once it has passed.
    pub fn validity(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed; the lock may then be held by someone else.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Whether [`release`](Self::release) already ran for this guard.
    pub fn is_released(&self) -> bool {
        self.released || self.closed_by_session()
    }

    /// A signal that fires when this lock is lost; see [`LostSignal`].
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(&self.lease)
    }

    /// Starts a background task that extends the lock before it expires (by default every
    /// third of the TTL) until the guard is released or dropped, or the optional
    /// [`max_hold`](AutoExtend::max_hold) cap is reached. When an extension finds the lock
    /// gone, or none can be confirmed before the deadline, the [`lost`](Self::lost) signal
    /// fires. Calling it again replaces the running watchdog.
    ///
    /// Fails with [`ConfigError::ExtendIntervalTooShort`] when the options'
    /// [`every`](AutoExtend::every) interval is below
    /// [`AutoExtend::min_interval`] for this lock's configuration; a watchdog already
    /// running then keeps running. The default options never fail.
    ///
    /// Needs a tokio runtime (the task is spawned on the current one).
    pub fn auto_extend(&mut self, options: AutoExtend) -> Result<(), ConfigError> {
        let watchdog = Watchdog::start(&self.coordinator, &self.lease, options)?;
        self.stop_keeping();
        self.keeper = Keeper::Watchdog(watchdog);
        Ok(())
    }

    /// Joins the session of `members`; see [`Session::keep`](crate::Session::keep).
    pub(crate) fn keep_in(&mut self, members: &Arc<Members>) -> Result<(), LockError> {
        if let Keeper::Session(current) = &self.keeper {
            if Arc::ptr_eq(current, members) {
                return Ok(());
            }
        }
        members.admit(&self.coordinator, &self.lease)?;
        self.stop_keeping();
        self.keeper = Keeper::Session(Arc::clone(members));
        Ok(())
    }

    /// Takes this lock out of its session, if it is in one: the session no longer extends
    /// it, and it expires at its deadline unless refreshed or kept again.
    pub fn leave_session(&mut self) {
        if let Keeper::Session(shared) = &self.keeper {
            shared.leave(&self.lease);
            self.keeper = Keeper::Nothing;
        }
    }

    /// Whether the lock's session released it ([`Session::close`](crate::Session::close)):
    /// asked only of a guard kept by a session, so that the release and the drop of every
    /// other guard take no lock of the lease's state for it.
    fn closed_by_session(&self) -> bool {
        matches!(self.keeper, Keeper::Session(_)) && self.lease.is_released()
    }

    /// Stops whatever keeps the lock alive: the watchdog is aborted, the session left.
    fn stop_keeping(&mut self) {
        self.leave_session();
        self.keeper = Keeper::Nothing;
    }

    /// Unlocks every node (compare-and-delete: another owner's lock is never touched) and
    /// reports whether a quorum still held it until now.
    ///
    /// `Ok(())` means the lock was ours on a quorum until the moment it was deleted;
    /// [`LockError::NotHeld`] means it had already expired or been taken over, so the
    /// critical section may have overlapped with another holder's.
    ///
    /// # Cancel safety
    ///
    /// The future owns the guard: dropped before it finishes, it drops the guard, which
    /// (with [`auto_release`](crate::LockConfig::auto_release)) sends the deletes again in
    /// the background; compare-and-delete makes the repeat harmless. With `auto_release`
    /// off, keys the deletes did not reach stay until their TTL.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.release_in_place().await
    }

    /// Extends the lock back to its full TTL on every node that still holds our token, and
    /// returns the new validity. Never creates or revives a key, and never deletes one when
    /// it fails; on failure the deadline is unchanged.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the deadline as it was, as a failure does; see
    /// [`DistributedLock::refresh`](crate::DistributedLock::refresh).
    pub async fn refresh(&mut self) -> Result<Duration, LockError> {
        self.coordinator.refresh(&self.lease).await?;
        Ok(self.validity())
    }

    /// Asks the nodes whether a quorum still holds our token, and checks the deadline.
    ///
    /// `Ok(false)` means the lock is lost; an error means too few nodes answered to tell.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the future changes nothing.
    pub async fn is_acquired(&self) -> Result<bool, LockError> {
        self.coordinator.is_acquired(&self.lease).await
    }

    /// Releases once; later calls return `Ok(())` without touching the nodes.
    pub(crate) async fn release_in_place(&mut self) -> Result<(), LockError> {
        if self.released || self.closed_by_session() {
            // Released here before, or by its session's `close`.
            self.released = true;
            return Ok(());
        }
        self.stop_keeping(); // stop extending before deleting
        let lease = &self.lease;
        // A task of this process waits for the lock: it goes to that one, keys and all.
        if self.coordinator.pass_to_waiter(lease) {
            self.released = true;
            return Ok(());
        }
        // Ended before the deletes go out, so that a late `SET` of the acquisition landing
        // after them is undone (see `Coordinator::finish_stragglers`).
        lease.end(LeaseEnd::Released);
        let outcome = self.coordinator.release(lease).await;
        // Marked only now: if this future is dropped mid-release, Drop sends the deletes
        // again in the background (compare-and-delete makes the repeat harmless).
        self.released = true;
        outcome
    }

    /// The lease this guard holds.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The coordinator that granted the lease.
    pub(crate) fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// Whether this guard came from a lock on the same node connections as `coordinator`.
    pub(crate) fn belongs_to(&self, coordinator: &Coordinator) -> bool {
        self.coordinator.shares_nodes_with(coordinator)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // A watchdog is aborted. A session finds the lease ended (released or passed) at
        // its next round, so the guard need not take it off the list, a search of the
        // whole list; only a lease left held (no auto-release) is taken off.
        // Released by its guard, or by its session's `close`.
        let settled = self.released || self.closed_by_session();
        let keeper = std::mem::replace(&mut self.keeper, Keeper::Nothing);
        let lease = &self.lease;
        if !settled
            && self.coordinator.config().auto_release()
            && !self.coordinator.pass_to_waiter(lease)
        {
            lease.end(LeaseEnd::Released);
            self.coordinator.release_in_background(Arc::clone(lease));
        }
        if let Keeper::Session(shared) = keeper {
            if !lease.has_ended() && !lease.was_passed() {
                shared.leave(lease);
            }
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.resource())
            .field("token", self.token())
            .field("validity", &self.validity())
            .field(
                "auto_extending",
                &matches!(self.keeper, Keeper::Watchdog(_)),
            )
            .field("in_session", &matches!(self.keeper, Keeper::Session(_)))
            .field("released", &self.released)
            .finish()
    }
}
