//! [`Claim`]: an acquisition that sends another lock request than the mutex's (the sides
//! of a read-write lock, a semaphore's permit). Every lease it makes is a mutex lease: released, extended and
//! checked by the mutex's own rounds.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::votes::Command;
use super::Coordinator;
use crate::error::LockError;
use crate::handoff::Asking;
use crate::lease::Lease;
use crate::resource::Resources;

/// The lock request an acquisition sends instead of the mutex's.
#[derive(Debug, Clone)]
pub(crate) enum Claim {
    /// A reader's entry, beside the write side's key `writer`.
    Shared {
        /// The write side's key.
        writer: Arc<str>,
    },
    /// The write side; when refused, keeps new readers out for `waiting`.
    Exclusive {
        /// How long a refused writer keeps new readers out; `None` for one attempt only.
        waiting: Option<Duration>,
    },
    /// A permit slot of a semaphore, listed beside the name's lock key `name`.
    Permit {
        /// The semaphore name's lock key.
        name: Arc<str>,
        /// How many permits the semaphore has.
        permits: u32,
    },
}

impl Claim {
    /// The lock command of this claim, for a lease of `ttl`.
    pub(super) fn command(&self, ttl: Duration) -> Command {
        match self {
            Claim::Shared { writer } => Command::LockShared(ttl, Arc::clone(writer)),
            Claim::Exclusive { waiting } => Command::LockExclusive(ttl, *waiting),
            Claim::Permit { name, permits } => Command::LockPermit(ttl, Arc::clone(name), *permits),
        }
    }
}

impl Claim {
    /// The lock key whose holder list names the keys this claim takes: the write side for
    /// a reader, the name's key for a permit; `None` for the write side itself.
    pub(super) fn listed_beside(&self) -> Option<Arc<str>> {
        match self {
            Claim::Shared { writer } => Some(Arc::clone(writer)),
            Claim::Permit { name, .. } => Some(Arc::clone(name)),
            Claim::Exclusive { .. } => None,
        }
    }
}

impl Coordinator {
    /// One acquisition round of `resources` by `claim`: the mutex's round (quorum,
    /// validity, fencing, rollback on every node that may hold the keys, cancel safety)
    /// with another lock request.
    pub(crate) async fn try_claim(
        self: &Arc<Self>,
        resources: &Resources,
        claim: &Claim,
    ) -> Result<Arc<Lease>, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            resource = resources.name(),
            attempts = 1,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self
            .attempt(resources, &Asking::Plain, Some(claim))
            .instrument(span.clone())
            .await;
        self.acquisition_ended(&span, &result, started);
        result
    }
}
