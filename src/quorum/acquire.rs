//! Acquisition: one attempt (the lock round, the validity check, the fencing token, the
//! rollback of a failure) and the blocking acquire that repeats it, waiting in between as
//! its [`Waiter`] says. Both are safe to cancel at any await point: a drop guard unlocks
//! the nodes of an attempt cut short, and the waiter gives its place in line back.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::claim::Claim;
use super::cohorts::Seat;
use super::votes::{Answer, Command, Wait};
use super::{Baton, Coordinator};
use crate::config::{micros, millis};
use crate::error::{LockError, Tally};
use crate::fan_out::spawn_detached;
use crate::fencing;
use crate::handoff::{Asking, Grants, Heard, Next, TurnTimedOut, Waiter};
use crate::lease::Lease;
use crate::metrics::Counters;
use crate::observe;
use crate::resource::{Keys, Resources};
use crate::retry::retry_wait;
use crate::token::LockToken;

impl Coordinator {
    /// One acquisition round: the lock is ours only if a quorum granted it and validity is
    /// left after the time the round took and the drift allowance. On any failure the
    /// nodes are unlocked again, all of them, before this returns; if this future is
    /// dropped, they are unlocked in the background.
    pub(crate) async fn try_acquire(
        self: &Arc<Self>,
        resources: &[&str],
    ) -> Result<Arc<Lease>, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            resource = tracing::field::Empty,
            attempts = 1,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = async {
            let resources = Resources::new(&self.config, self.layout, resources)?;
            span.record("resource", resources.name());
            self.attempt(&resources, &Asking::Plain, None).await
        }
        .instrument(span.clone())
        .await;
        self.acquisition_ended(&span, &result, started);
        result
    }

    /// Notes how an acquisition ended: on its span, and in the metrics.
    pub(super) fn acquisition_ended(
        &self,
        span: &tracing::Span,
        result: &Result<Arc<Lease>, LockError>,
        started: Instant,
    ) {
        let outcome = observe::acquire_outcome(result);
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        {
            self.observed.meters.acquisition(outcome);
            if result.is_ok() {
                self.observed
                    .meters
                    .acquire_wait
                    .record(started.elapsed().as_secs_f64());
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = started;
    }

    /// One round over already validated resources; see [`try_acquire`](Self::try_acquire).
    /// A waiter's attempt says how it waits (see [`Asking`]).
    pub(super) async fn attempt(
        self: &Arc<Self>,
        resources: &Resources,
        asking: &Asking,
        claim: Option<&Claim>,
    ) -> Result<Arc<Lease>, LockError> {
        let resource = resources.name();
        let keys = resources.keys.clone();
        // A token of the attempt's own, a refresh of the direct grant's too (its place
        // records it, and its grants set the key to it): a late rollback of an earlier
        // refresh cannot delete the key a later one counts.
        let token = LockToken::generate();
        let waiter = asking.waiter();
        // Its grants are heard of from before the refresh is sent.
        let mut heard = match (asking.grants(), &waiter) {
            (Some(grants), Some(waiter)) => grants.listen(waiter),
            _ => None,
        };
        // If this future is dropped mid-round, the nodes that said yes are unlocked in the
        // background instead of holding the key for a whole TTL (and the waiter leaves the
        // queues after that, so no request of this round can queue it again).
        let mut cleanup = UnlockOnDrop {
            armed: Some((
                Arc::clone(self),
                keys.clone(),
                token.clone(),
                waiter.clone(),
            )),
            unlock: true,
        };

        Counters::bump(&self.counters.attempts);
        let started = Instant::now();
        // The keys' expiry: the TTL plus the lock-delay. The validity is the TTL's
        // (`confirm`), so an unclean end leaves the keys for the delay past it.
        let key_ttl = self.config.key_ttl();
        let command = match (claim, asking) {
            (Some(claim), _) => claim.command(key_ttl),
            (None, Asking::Plain) => Command::Lock(key_ttl),
            (None, Asking::Watching(interest)) => Command::LockWatching(key_ttl, *interest),
            (None, Asking::Queued(place, grants)) => {
                let stamp = grants.as_ref().map(|grants| grants.stamp);
                Command::LockQueued(key_ttl, Arc::clone(place), stamp)
            }
        };
        let mut in_flight = self.send(command, &keys, &token);
        let mut tally = self.empty_tally();
        let mut answers = vec![None; self.nodes.len()];
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut answers)
            .await;
        if !tally.has_quorum() {
            // Hear every node out before unlocking: the error then names every failed node
            // and tells contention from an outage, and each node's SET has been answered
            // (or has timed out) before its unlock is sent, so the unlock cannot overtake it.
            self.collect(&mut tally, &mut in_flight, Wait::ForEveryNode, &mut answers)
                .await;
        }
        if answers
            .iter()
            .any(|answer| matches!(answer, Some(Answer::Refused)))
        {
            // Every attempt that finds the keys held says so, including a refresh that the
            // nodes' grants then win: remembered only by attempts that failed, the
            // contention was forgotten a second into a line served by grants, and each
            // waiter's next acquisition tried a plain attempt first.
            self.hand_off.found_held(&keys);
        }
        if let (Some(heard), Some(grants)) = (&mut heard, asking.grants()) {
            if !tally.has_quorum() {
                // Every node answered. Where all refused, nothing of this refresh is on the
                // nodes but grants not heard of yet, which the waiter gives back when it
                // leaves the lines (the nodes know them as its): dropped meanwhile (a cohort's pass won, a
                // deadline), the attempt leaves nothing to undo (and no request in flight
                // that could queue the waiter after it left).
                cleanup.unlock = answers
                    .iter()
                    .any(|answer| !matches!(answer, Some(Answer::Refused)));
                let hearing = self.hear_grants(
                    &mut tally,
                    &mut answers,
                    heard,
                    grants,
                    started,
                    &mut cleanup,
                );
                Box::pin(hearing).await;
            }
        }
        let (granted, refused, failed) = (tally.granted, tally.refused.len(), tally.failures.len());
        // Kept for the guard, so that a holder can tell a quorum reached with nodes failing.
        let won = tally.has_quorum().then(|| self.won_tally(&tally));
        // A reader's keys are its own entry, new on every read: its token is minted on the
        // lock's counter, so that the read side's fencing leaves no key per read behind and
        // orders readers after every earlier writer.
        let fenced = match claim {
            Some(Claim::Shared { writer }) => Keys::from([Arc::clone(writer)]),
            _ => keys.clone(),
        };
        match self.confirm(resource, &fenced, tally, started).await {
            Ok((deadline, fencing_token)) => {
                cleanup.disarm();
                Counters::bump(&self.counters.acquired);
                // The tally: with `failed` > 0 the lock was won with less fault tolerance
                // left (each failing node is also warned about, rate-limited).
                tracing::debug!(
                    resource,
                    nodes = self.nodes.len(),
                    quorum = self.quorum,
                    granted,
                    refused,
                    failed,
                    elapsed_us = micros(started.elapsed()),
                    validity_ms = millis(deadline.saturating_duration_since(Instant::now())),
                    fencing_token,
                    "lock acquired"
                );
                let counters = Arc::clone(&self.counters);
                let tally = won.unwrap_or_else(|| self.won_tally(&self.empty_tally()));
                let lease = Lease::new(counters, resources, token, tally, started, deadline)
                    .with_fencing_token(fencing_token)
                    .listed_beside(claim.and_then(Claim::listed_beside));
                Ok(self.lease_won(lease, in_flight, waiter, &answers, heard))
            }
            Err(error) => {
                // Requests not yet sent are not sent at all; the rollback covers the rest.
                drop(in_flight);
                // Boxed, as the other paths only contention or fencing takes below: the
                // attempt's future, moved at every await above it, stays small.
                Box::pin(self.roll_back(resource, &error, &keys, &token, &answers)).await;
                cleanup.disarm();
                Err(error)
            }
        }
    }

    /// A waiter of the direct grant that a quorum did not grant the keys in its refresh:
    /// counts the grants that the nodes which queued it (refused, or failed to answer)
    /// announce for this refresh's place, until the nodes that took the keys and those that
    /// granted them make a quorum, the wait its `grants` allow passed, or the validity
    /// counted from the refresh's start ran out. A node that announces a reservation for
    /// the waiter instead ends the wait: the next refresh claims it.
    ///
    /// A grant counts from the refresh's start (`started`), as a yes to the refresh does:
    /// the node made it on the place this refresh wrote, after the refresh arrived, and set
    /// the key's TTL then.
    async fn hear_grants(
        &self,
        tally: &mut Tally,
        answers: &mut [Option<Answer>],
        heard: &mut Heard,
        grants: &Grants,
        started: Instant,
        cleanup: &mut UnlockOnDrop,
    ) {
        let Some(validity_ends) = self.config.deadline_from(started) else {
            return;
        };
        let until = Instant::now()
            .checked_add(grants.wait)
            .map_or(validity_ends, |wait_ends| wait_ends.min(validity_ends));
        let may_grant = |answers: &[Option<Answer>]| {
            answers
                .iter()
                .filter(|answer| matches!(answer, Some(Answer::Refused | Answer::Failed)))
                .count()
        };
        while tally.held_as.is_none()
            && !tally.has_quorum()
            && tally.granted + may_grant(answers) >= self.quorum
        {
            let Some(index) = heard.next(until).await else {
                break;
            };
            let name = self.nodes[index].name();
            match answers[index] {
                Some(Answer::Refused) => tally.refused.retain(|node| node != name),
                Some(Answer::Failed) => tally.failures.retain(|failure| failure.node != name),
                _ => continue,
            }
            answers[index] = Some(Answer::Granted);
            tally.granted += 1;
            cleanup.unlock = true;
            Counters::bump(&self.counters.grants_heard);
        }
    }

    /// After a failed attempt: counts why, then unlocks every node that may hold our keys
    /// and waits for each (or its timeout): those that granted them, and those that failed
    /// or timed out, whose SET may have landed even though the reply was lost. A node that
    /// answered no took nothing (each lock command is atomic), so under plain contention
    /// there is nothing to undo. A queued waiter stays in the queues.
    async fn roll_back(
        &self,
        resource: &str,
        error: &LockError,
        keys: &Keys,
        token: &LockToken,
        answers: &[Option<Answer>],
    ) {
        match error {
            LockError::Held { .. } => Counters::bump(&self.counters.contended),
            LockError::NoQuorum { .. } => Counters::bump(&self.counters.no_quorum),
            LockError::ValidityExhausted { .. } => {
                Counters::bump(&self.counters.validity_exhausted)
            }
            _ => {}
        }
        tracing::debug!(resource, %error, "lock not acquired; unlocking the nodes");
        let may_hold: Vec<usize> = (0..self.nodes.len())
            .filter(|&index| answers[index] != Some(Answer::Refused))
            .collect();
        if !may_hold.is_empty() {
            let mut in_flight = self.send_to(Command::Unlock, keys, token, may_hold);
            let mut tally = self.empty_tally();
            self.collect(&mut tally, &mut in_flight, Wait::ForEveryNode, &mut [])
                .await;
        }
    }

    /// Turns a lock round's tally into a lease: a quorum must have granted the lock, the
    /// fencing token (when enabled) must have been minted, and validity must be left after
    /// both. Returns the deadline and the fencing token.
    async fn confirm(
        &self,
        resource: &str,
        keys: &Keys,
        tally: Tally,
        started: Instant,
    ) -> Result<(Instant, Option<u64>), LockError> {
        if !tally.has_quorum() {
            return Err(self.refusal(resource, tally));
        }
        let fencing_token = if self.config.fencing() {
            let counters = self.config.fencing_counters();
            Some(Box::pin(fencing::mint(self, resource, keys, counters)).await?)
        } else {
            None
        };
        let now = Instant::now();
        match self.config.deadline_from(started) {
            Some(deadline) if deadline > now => Ok((deadline, fencing_token)),
            _ => Err(LockError::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed: now.saturating_duration_since(started),
                ttl: self.config.ttl(),
            }),
        }
    }

    /// Attempts until one succeeds, a non-retryable error occurs, the retries run out, or
    /// the optional `deadline` passes; waits a jittered delay between attempts.
    ///
    /// An attempt still running at the deadline is abandoned (its keys are unlocked in the
    /// background) and [`LockError::TimedOut`] returned. A wait that would end past the
    /// deadline is not started: the last attempt's error is returned at once instead.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        resources: &[&str],
        deadline: Option<Instant>,
    ) -> Result<Arc<Lease>, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            resource = tracing::field::Empty,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self
            .acquire_in(resources, deadline, &span)
            .instrument(span.clone())
            .await;
        self.acquisition_ended(&span, &result, started);
        result
    }

    /// [`acquire`](Self::acquire), noting the resource and the attempts on `span`. With
    /// cohorts on, it also waits in this process's line of the keys, where a task that
    /// holds them may pass them on (see `cohorts`): whichever comes first wins, and the
    /// other is given up (a lock won on the nodes drops the seat, whose baton, if one came
    /// meanwhile, goes to the next seat). It sits down at once when the keys are contended
    /// in this process (a line, a turn, or a refusal within the last second), else only
    /// once its first attempt was refused: an uncontended acquisition joins no line.
    async fn acquire_in(
        self: &Arc<Self>,
        resources: &[&str],
        deadline: Option<Instant>,
        span: &tracing::Span,
    ) -> Result<Arc<Lease>, LockError> {
        let resources = Resources::new(&self.config, self.layout, resources)?;
        span.record("resource", resources.name());
        if !self.config.cohorts() {
            return self
                .acquire_on_nodes(&resources, deadline, span, None)
                .await;
        }
        let (keys, terms) = (&resources.keys, self.config.terms());
        let seat: Seat<Baton> = self.cohorts().seat(keys, terms);
        if self.cohorts().has_line(keys, terms) || self.hand_off.contended_here(keys) {
            seat.sit();
        }
        let on_nodes = self.acquire_on_nodes(&resources, deadline, span, Some(&seat));
        tokio::select! {
            biased;
            baton = seat.passed() => Ok(baton.take()),
            won = on_nodes => won,
        }
    }

    /// The blocking acquire on the nodes: attempts, and waits between them as the waiter
    /// says. The cohort `seat`, if any, sits down before the first wait, and its
    /// contending flag is set once it holds this process's turn.
    async fn acquire_on_nodes(
        self: &Arc<Self>,
        resources: &Resources,
        deadline: Option<Instant>,
        span: &tracing::Span,
        seat: Option<&Seat<Baton>>,
    ) -> Result<Arc<Lease>, LockError> {
        let started = Instant::now();
        let timed_out = |last: Option<LockError>| LockError::TimedOut {
            resource: resources.name().to_owned(),
            waited: started.elapsed(),
            last: last.map(Box::new),
        };
        // Its turn, place in line and wake-ups; its turn ends when it is dropped.
        let mut waiter = Waiter::new(
            &self.hand_off,
            &self.config,
            &resources.keys,
            deadline,
            seat.map(Seat::contending),
        )
        .await
        .map_err(|TurnTimedOut| timed_out(None))?;
        let mut retries_left = self.config.retry_count();
        let mut last_error: Option<LockError> = None;
        let mut attempts: u64 = 0;
        let outcome = loop {
            // Drawn before the attempt: a waiter of the direct grant waits for its grants
            // within it, for as long.
            let wait = retry_wait(&self.config, &mut rand::rng());
            let asking = waiter.next_attempt(wait);
            let attempt_started = Instant::now();
            attempts += 1;
            span.record("attempts", attempts);
            let attempt = self.attempt(resources, &asking, None);
            let result = match deadline {
                None => attempt.await,
                Some(deadline) => tokio::time::timeout_at(deadline, attempt)
                    .await
                    .unwrap_or_else(|_| Err(timed_out(last_error.take()))),
            };
            let error = match result {
                Err(error) if error.is_retryable() && retries_left > 0 => error,
                result => break result,
            };
            if let Some(seat) = seat {
                seat.sit();
            }
            let wakes = Instant::now().checked_add(wait);
            if deadline.is_some_and(|deadline| wakes.is_none_or(|wakes| wakes >= deadline)) {
                break Err(error);
            }
            retries_left -= 1;
            let held = matches!(error, LockError::Held { .. });
            if held {
                match Box::pin(waiter.found_held()).await {
                    Ok(Next::AtOnce) => {
                        last_error = Some(error);
                        continue;
                    }
                    Ok(Next::AfterWait) => {}
                    Err(TurnTimedOut) => break Err(timed_out(Some(error))),
                }
            }
            Box::pin(waiter.wait(&asking, held, wait, attempt_started.elapsed())).await;
            last_error = Some(error);
        };
        match outcome {
            Ok(_) => waiter.won(),
            Err(_) => Box::pin(waiter.give_up()).await,
        }
        outcome
    }

    /// In the background: unlocks `token`'s keys on every node (for acquisitions abandoned
    /// mid-round), then takes `waiter` out of every node's queue (in that order, so that no
    /// request of an abandoned attempt can queue the waiter again after it left).
    fn abandon_in_background(
        self: Arc<Self>,
        keys: Keys,
        token: LockToken,
        waiter: Option<LockToken>,
    ) {
        spawn_detached(async move {
            self.round(Command::Unlock, &keys, &token, Wait::ForEveryNode)
                .await;
            if let Some(waiter) = waiter {
                let timeout = self.config.node_timeout();
                self.hand_off.leave_queues(&keys, &waiter, timeout).await;
            }
        });
    }
}

/// Unlocks every node in the background unless disarmed: makes an acquisition round safe
/// to cancel at any await point. Armed for the keys of a token, and for the queue places of
/// a waiter, if any. Without `unlock` (a waiter of the direct grant refused by every node,
/// waiting for grants) there is nothing to undo: the waiter leaves the lines
/// when its acquisition ends, however it ends, which gives back a grant made meanwhile.
struct UnlockOnDrop {
    armed: Option<(Arc<Coordinator>, Keys, LockToken, Option<LockToken>)>,
    unlock: bool,
}

impl UnlockOnDrop {
    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for UnlockOnDrop {
    fn drop(&mut self) {
        match self.armed.take() {
            Some((coordinator, keys, token, waiter)) if self.unlock => {
                coordinator.abandon_in_background(keys, token, waiter);
            }
            _ => {}
        }
    }
}
