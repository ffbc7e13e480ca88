//! What the lock family asks of the coordinator beyond the mutex: an acquisition by
//! another lock request (the sides of a read-write lock), and an election leader's record
//! written to and read from a quorum. Every lease they make is a mutex lease: released,
//! extended and checked by the mutex's own rounds.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::rounds::{Command, Wait};
use super::stragglers::finish_in_background;
use super::Coordinator;
use crate::error::LockError;
use crate::handoff::Asking;
use crate::lease::Lease;
use crate::resource::{Keys, Resources};
use crate::round::Round;

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
}

impl Claim {
    /// The lock command of this claim, for a lease of `ttl`.
    pub(super) fn command(&self, ttl: Duration) -> Command {
        match self {
            Claim::Shared { writer } => Command::LockShared(ttl, Arc::clone(writer)),
            Claim::Exclusive { waiting } => Command::LockExclusive(ttl, *waiting),
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

    /// Records `record` beside the lease's key on every node that still holds its token;
    /// `Ok` once a quorum did, before the lease's deadline.
    pub(crate) async fn proclaim(&self, lease: &Lease, record: &str) -> Result<(), LockError> {
        let resource = lease.resource();
        let deadline = lease.deadline();
        let command = Command::Proclaim(record.into());
        let mut in_flight = self.send(command, &lease.keys, &lease.token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut [])
            .await;
        // On every node, not only the quorum that decided: observers read any quorum.
        finish_in_background(in_flight);
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Expired {
                resource: resource.to_owned(),
                ago: now.saturating_duration_since(deadline),
            });
        }
        if tally.has_quorum() {
            Ok(())
        } else {
            Err(self.loss(resource, tally))
        }
    }

    /// The leader records that a quorum of nodes answered for the election key `keys`: on
    /// each, the record of the token its key holds now, if any.
    pub(crate) async fn read_proclamations(
        &self,
        resource: &str,
        keys: &Keys,
    ) -> Result<Vec<String>, LockError> {
        let timeout = self.config.node_timeout();
        let mut in_flight = Round::fan_out(&self.nodes, 0..self.nodes.len(), timeout, |node| {
            let keys = Arc::clone(keys);
            async move { node.read_proclamation(&keys).await }
        });
        let mut tally = self.empty_tally();
        let mut records = Vec::new();
        while let Some((index, reply, _)) = in_flight.next().await {
            match reply {
                Ok(record) => {
                    tally.granted += 1;
                    records.extend(record);
                }
                Err(error) => self.record_failure(&mut tally, index, error),
            }
            if tally.has_quorum() {
                return Ok(records);
            }
            if tally.granted + in_flight.len() < self.quorum {
                break;
            }
        }
        Err(LockError::NoQuorum {
            resource: resource.to_owned(),
            tally,
        })
    }
}
