//! [`Permit`]: one held permit of a [`Semaphore`](super::Semaphore), the lock of its slot.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{ConfigError, LockError};
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::token::LockToken;
use crate::watchdog::AutoExtend;

/// A held permit: the lock of one slot of a [`Semaphore`](super::Semaphore), with the
/// guard's token, deadline, refresh, auto-extension and lost signal.
///
/// Dropping it unreleased gives the permit back in the background (with
/// [`auto_release`](crate::LockConfig::auto_release), the default), as a dropped
/// [`LockGuard`] does; [`release`](Self::release) does it now and reports whether the
/// permit was still ours.
#[must_use = "dropping the permit gives it back at once"]
#[derive(Debug)]
pub struct Permit {
    guard: LockGuard,
    slot: u32,
}

impl Permit {
    pub(super) fn new(guard: LockGuard, slot: u32) -> Self {
        Permit { guard, slot }
    }

    /// Which of the semaphore's slots this permit holds, from 0.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lock of the slot, for what the permit does not repeat (its keys, the tally
    /// of the round that took it).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The slot's lock guard; the permit is given back when the guard is released.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The token stored in the slot's lock on the nodes.
    pub fn token(&self) -> &LockToken {
        self.guard.token()
    }

    /// The slot's fencing token, with [`fencing`](crate::LockConfigBuilder::fencing) on.
    /// Tokens increase across the holders of one slot, not across the semaphore: a
    /// resource guarded by the semaphore is used by up to K holders at once, so it cannot
    /// order them by one number.
    pub fn fencing_token(&self) -> Option<u64> {
        self.guard.fencing_token()
    }

    /// The instant until which the permit is guaranteed to be ours.
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// The time left before [`deadline`](Self::deadline); zero once it passed.
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// A signal that fires when the permit is lost; see [`LostSignal`].
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }

    /// Keeps the permit alive in the background; see [`LockGuard::auto_extend`].
    pub fn auto_extend(&mut self, options: AutoExtend) -> Result<(), ConfigError> {
        self.guard.auto_extend(options)
    }

    /// The lock guard, for a [`Session`](crate::Session) that keeps it.
    pub(crate) fn guard_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }

    /// Takes it out of its session; see [`LockGuard::leave_session`].
    pub fn leave_session(&mut self) {
        self.guard.leave_session();
    }

    /// Extends the permit to the full TTL; see [`LockGuard::refresh`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::refresh`]: dropping the future leaves the deadline as it was.
    pub async fn refresh(&mut self) -> Result<Duration, LockError> {
        self.guard.refresh().await
    }

    /// Whether a quorum still holds the permit; see [`LockGuard::is_acquired`].
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the future changes nothing.
    pub async fn is_acquired(&self) -> Result<bool, LockError> {
        self.guard.is_acquired().await
    }

    /// Gives the permit back on every node; see [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`]: dropped midway, the permit's drop sends the deletes again.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}
