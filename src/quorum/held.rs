//! Held-lock operations: what a [`Lease`] asks of the nodes while its guard holds it.
//! Release, refresh and the holds check each run one round that returns once decided; what
//! is still in flight then finishes unawaited (see `stragglers`).

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::stragglers::{finish_in_background, record_unlocks};
use super::votes::{Answer, Command, Wait};
use super::Coordinator;
use crate::config::millis;
use crate::error::{LeaseEnd, LockError, Tally};
use crate::fan_out::spawn_detached;
use crate::lease::Lease;
use crate::metrics::Counters;
use crate::observe;
use crate::resource::Resources;
use crate::token::LockToken;

impl Coordinator {
    /// Deletes the lease's keys on every node. Returns once a quorum deleted them (the
    /// other deletes finish unawaited) or once a quorum can no longer confirm it. When the
    /// acquisition's late `SET`s are settled in the background, what each node answered is
    /// recorded in the lease for [`finish_stragglers`](Self::finish_stragglers).
    pub(crate) async fn release(&self, lease: &Arc<Lease>) -> Result<(), LockError> {
        let span = tracing::debug_span!(
            "quorumlock.release",
            resource = lease.resource(),
            outcome = tracing::field::Empty,
        );
        #[cfg(feature = "metrics")]
        self.observed
            .meters
            .hold
            .record(lease.acquired_at().elapsed().as_secs_f64());
        let result = self.release_in(lease).instrument(span.clone()).await;
        let outcome = observe::settle_outcome(&result, "released");
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        self.observed.meters.release(outcome);
        result
    }

    /// [`release`](Self::release), within its span.
    async fn release_in(&self, lease: &Arc<Lease>) -> Result<(), LockError> {
        let resource = lease.resource();
        // On nodes that may apply our requests out of order (a cluster client routes each
        // one on its own), an unlock left in flight can land after this holder's next SET
        // of the same keys, and a SET of the acquisition after this unlock: either leaves
        // the keys on the node for a moment after the release returned, enough to refuse
        // the next acquisition. There the release hears every node out, and waits until
        // the acquisition's late SETs were undone.
        let in_order = self.nodes.iter().all(|node| node.applies_in_order());
        let wait = if in_order {
            Wait::UntilDecided
        } else {
            Wait::ForEveryNode
        };
        let mut in_flight = self.send(Command::Unlock, &lease.keys, &lease.token);
        let mut tally = self.empty_tally();
        let mut answers = vec![None; self.nodes.len()];
        self.collect(&mut tally, &mut in_flight, wait, &mut answers)
            .await;
        if let Some(unlocks) = lease.unlocks() {
            for (index, answer) in answers.into_iter().enumerate() {
                if let Some(answer) = answer {
                    unlocks.record(index, answer == Answer::Granted);
                }
            }
            if !in_flight.is_empty() {
                spawn_detached(record_unlocks(in_flight, Arc::clone(lease)));
            }
            if !in_order {
                // The late SETs' round ends within a node timeout of the acquisition,
                // and each undo takes at most one more.
                unlocks
                    .settled(self.config.node_timeout().saturating_mul(2))
                    .await;
            }
        } else {
            self.let_finish(in_flight);
        }
        if tally.has_quorum() {
            Counters::bump(&self.counters.released);
            tracing::debug!(resource, "lock released");
            Ok(())
        } else {
            let error = self.loss(resource, tally);
            tracing::warn!(resource, %error, "release not confirmed by a quorum");
            Err(error)
        }
    }

    /// Sets the lease's keys back to the full TTL on every node, never creating a key, and
    /// records the outcome in the lease: the new deadline, counted from before the first
    /// request, or the lease's end when the lock proved gone. Refused once the current
    /// deadline has passed, and failed if a quorum did not confirm before it.
    pub(crate) async fn refresh(&self, lease: &Lease) -> Result<Instant, LockError> {
        if lease.was_passed() {
            // Its keys, token and all, belong to the task it was passed to: nothing to
            // record in this lease, which already ended.
            return Err(LockError::NotHeld {
                resource: lease.resource().to_owned(),
                tally: self.empty_tally(),
            });
        }
        let started = Instant::now();
        let span = tracing::debug_span!(
            "quorumlock.refresh",
            resource = lease.resource(),
            outcome = tracing::field::Empty,
        );
        let result = self.extend(lease).instrument(span.clone()).await;
        let outcome = observe::settle_outcome(&result, "extended");
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        self.observed.meters.refresh(outcome);
        match &result {
            Ok(deadline) => lease.extended(started, *deadline),
            Err(error @ LockError::NotHeld { .. }) => {
                lease.end(LeaseEnd::Lost(Box::new(error.clone())))
            }
            Err(LockError::Expired { .. }) => lease.end(LeaseEnd::Expired),
            Err(_) => {} // a quorum could not be asked: the lease may still hold
        }
        result
    }

    /// [`refresh`](Self::refresh) on the nodes, within its span; the new deadline.
    async fn extend(&self, lease: &Lease) -> Result<Instant, LockError> {
        let (resource, keys, token) = (lease.resource(), &lease.keys, &lease.token);
        let current_deadline = lease.deadline();
        let started = Instant::now();
        self.check_not_expired(resource, current_deadline, started)?;
        // The keys' expiry is the TTL plus the lock-delay; the new deadline below, the TTL's.
        let key_ttl = self.config.key_ttl();
        // The family's keys that name the lease's keys live at least as long as they do.
        let command = match (&lease.listed_beside, lease.was_proclaimed()) {
            (Some(name), _) => Command::ExtendListed(key_ttl, Arc::clone(name)),
            (None, true) => Command::ExtendLeader(key_ttl),
            (None, false) => Command::Extend(key_ttl),
        };
        let mut in_flight = self.send(command, keys, token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut [])
            .await;
        // Extend on every node, not only the quorum that decided; our own keys only.
        finish_in_background(in_flight);
        let finished = Instant::now();
        if !tally.has_quorum() {
            let error = self.loss(resource, tally);
            tracing::warn!(resource, %error, "lock not extended");
            return Err(error);
        }
        // The extension counts only if it was confirmed while the old lease still held.
        self.check_not_expired(resource, current_deadline, finished)?;
        match self.config.deadline_from(started) {
            Some(deadline) if deadline > finished => {
                Counters::bump(&self.counters.extended);
                tracing::debug!(
                    resource,
                    validity_ms = millis(deadline - finished),
                    "lock extended"
                );
                Ok(deadline)
            }
            _ => Err(LockError::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed: finished.saturating_duration_since(started),
                ttl: self.config.ttl(),
            }),
        }
    }

    /// Whether a quorum still holds the lease's token and its deadline has not passed.
    pub(crate) async fn is_acquired(&self, lease: &Lease) -> Result<bool, LockError> {
        let deadline = lease.deadline();
        if Instant::now() >= deadline || lease.was_passed() {
            return Ok(false);
        }
        let tally = self
            .round(
                Command::Holds,
                &lease.keys,
                &lease.token,
                Wait::UntilDecided,
            )
            .await;
        if tally.has_quorum() {
            Ok(Instant::now() < deadline)
        } else {
            match self.loss(lease.resource(), tally) {
                LockError::NotHeld { .. } => Ok(false),
                unknown => Err(unknown),
            }
        }
    }

    /// Deletes the lock on `resource` on every node where its key holds `token`, by a
    /// release's compare-and-delete, hearing every node out: what each answered, for an
    /// operator who has a holder's token but not its guard.
    pub(crate) async fn release_token(
        &self,
        resource: &str,
        token: &LockToken,
    ) -> Result<Tally, LockError> {
        let resources = Resources::new(&self.config, self.layout, &[resource])?;
        let tally = self
            .round(Command::Unlock, &resources.keys, token, Wait::ForEveryNode)
            .await;
        tracing::debug!(resource, %tally, "released by token");
        Ok(tally)
    }

    /// Releases `lease` in the background, recording what each node answered: for guards
    /// dropped without a release. Never blocks; without a tokio runtime the keys simply
    /// expire after their TTL.
    pub(crate) fn release_in_background(&self, lease: Arc<Lease>) {
        #[cfg(feature = "metrics")]
        self.observed
            .meters
            .hold
            .record(lease.acquired_at().elapsed().as_secs_f64());
        let in_flight = self.send(Command::Unlock, &lease.keys, &lease.token);
        spawn_detached(record_unlocks(in_flight, lease));
    }

    /// Refuses to act on a lease whose `deadline` has passed at `now`: another owner may
    /// already hold the lock, and extending it then would be unsafe.
    fn check_not_expired(
        &self,
        resource: &str,
        deadline: Instant,
        now: Instant,
    ) -> Result<(), LockError> {
        if now >= deadline {
            tracing::warn!(resource, "lease expired before the operation");
            return Err(LockError::Expired {
                resource: resource.to_owned(),
                ago: now.saturating_duration_since(deadline),
            });
        }
        Ok(())
    }
}
