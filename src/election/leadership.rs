//! [`Leadership`]: a term as leader, the election's lock kept alive by its watchdog.

use std::time::Duration;

use tokio::time::Instant;

use super::Leader;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;

/// This process's term as leader: the election's lock, auto-extended, with its fencing
/// token and the value recorded for observers.
///
/// Its [`lost`](Self::lost) signal fires when the lock can no longer be trusted: when an
/// extension finds it gone, or when none could be confirmed and too little validity is
/// left for another, which is before the deadline, and so before any other candidate can
/// win the lock. Stop acting as the leader then. Dropping the leadership resigns in the
/// background (with [`auto_release`](crate::LockConfig::auto_release), the default).
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    leader: Leader,
}

impl Leadership {
    pub(super) fn new(guard: LockGuard, leader: Leader) -> Self {
        Leadership { guard, leader }
    }

    /// This leader, as observers see it.
    pub fn leader(&self) -> &Leader {
        &self.leader
    }

    /// The value this leader campaigned with (or last proclaimed).
    pub fn value(&self) -> &str {
        &self.leader.value
    }

    /// The fencing token of this term: greater than every earlier leader's. Send it with
    /// every write to a resource that checks it ([`fencing`](crate::fencing)).
    pub fn fencing_token(&self) -> u64 {
        self.leader.fencing_token
    }

    /// A signal that fires when the leadership is lost; see [`LostSignal`].
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }

    /// The instant until which this term is guaranteed, as it stands now (each extension
    /// moves it).
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// The time left before [`deadline`](Self::deadline).
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// The election's lock guard, for what the leadership does not repeat.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The lock guard, for a [`Session`](crate::Session) that keeps it.
    pub(crate) fn guard_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }

    /// Takes it out of its session; see [`LockGuard::leave_session`].
    pub fn leave_session(&mut self) {
        self.guard.leave_session();
    }

    /// Records a new value for this term (the fencing token stays): observers see it from
    /// their next poll. Fails as a refresh does when the lock is gone.
    ///
    /// Values within one term carry no order of their own: until the new value is on
    /// every node, observers whose quorums differ may see the old and the new one
    /// alternate (the term itself never goes back). Proclaim seldom, or put a version in
    /// the value when the order matters.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the value unknown to this leadership: the record may
    /// have changed on some nodes. Proclaim again.
    pub async fn proclaim(&mut self, value: &str) -> Result<(), LockError> {
        super::check_value(value)?;
        let leader = Leader {
            value: value.to_owned(),
            fencing_token: self.leader.fencing_token,
        };
        let coordinator = self.guard.coordinator();
        coordinator
            .proclaim(self.guard.lease(), &leader.record())
            .await?;
        self.leader = leader;
        Ok(())
    }

    /// Whether a quorum still holds the election's lock for this term; see
    /// [`LockGuard::is_acquired`].
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the future changes nothing.
    pub async fn is_leader(&self) -> Result<bool, LockError> {
        self.guard.is_acquired().await
    }

    /// Gives the leadership up now: the lock is released on every node, and the next
    /// candidate in line takes over. `Ok` means this term held until the release.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}
