//! The keeper: the one task that keeps every lock of a session alive, a round of
//! extensions per interval for all of them (see `Coordinator::renew`), and a retry of the
//! ones a round could not confirm.

use std::sync::Arc;

use tokio::time::Instant;

use super::members::{Members, Pace};
use crate::error::{LeaseEnd, SessionEnd};
use crate::lease::Lease;

/// Extends the members of `members` until the session ends, so that each lock is extended
/// within `cadence.interval` of its last extension: a round starts that much after the
/// previous one, less a lead (twice as long as the round is expected to take, and one
/// retry: see `Cadence::lead`), since a lock in a late chunk is sent later in its round,
/// and one the round could not confirm is sent again after a retry. A member that joins
/// due earlier brings the round forward, and so does a list grown enough that the round
/// must start earlier.
///
/// A lease a round could not confirm is tried again soon, then less and less often, while
/// its validity lasts; once one of them has too little left for another try, the session
/// can no longer keep a quorum for its locks, and it ends: every member is declared lost,
/// before its deadline rather than at it.
pub(crate) async fn keep(members: Arc<Members>) {
    let (coordinator, cadence) = (&members.coordinator, members.cadence);
    let config = coordinator.config();
    // The first retry comes after two node timeouts, so that a glitch costs a lock some
    // 100 ms of its interval; later ones back off to a twentieth of the TTL, so that a
    // majority down is not sent every lock ten times a second.
    let first_retry = cadence.first_retry();
    let last_retry = first_retry.max(config.ttl() / 20);
    let margin = cadence.margin();
    let mut retry = first_retry;
    let mut retrying: Vec<Arc<Lease>> = Vec::new();
    let mut retry_at: Option<Instant> = None;
    let mut rounds: u64 = 0;
    loop {
        let due = members.next_round();
        let wake = retry_at.map_or(due, |retry_at| retry_at.min(due));
        // A join that brings the round forward wakes this wait (its permit is kept when
        // the join comes while a round runs).
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = members.changed.notified() => {}
        }
        if members.ended().is_some() {
            return;
        }
        let started = Instant::now();
        let full = started >= members.next_round();
        let leases = if full {
            if members.plan(started, None).is_none() {
                return; // a round decades off cannot be planned, nor is it needed
            }
            retrying.clear();
            retry = first_retry;
            members.current()
        } else if retry_at.is_some_and(|retry_at| started >= retry_at) {
            std::mem::take(&mut retrying)
        } else {
            continue;
        };
        retry_at = None;
        if leases.is_empty() {
            continue;
        }
        // Boxed for the round only: the keeper sleeps most of its life, and would
        // otherwise keep room for the whole round the while.
        rounds = rounds.wrapping_add(1);
        let renewal = coordinator.renew(&leases, cadence.chunk, rounds, cadence.request_timeout);
        let unconfirmed = Box::pin(renewal).await;
        let now = Instant::now();
        if full {
            // Planned again at this round's pace: a round much slower than the one before
            // (a busy machine) brings the next one forward by as much.
            let pace = Pace {
                took: now.saturating_duration_since(started),
                leases: leases.len(),
            };
            members.plan(started, Some(pace));
        }
        for unconfirmed in unconfirmed {
            let lease = &leases[unconfirmed.index];
            let left = lease.deadline().saturating_duration_since(now);
            if left <= margin.saturating_add(retry) {
                let error = Box::new(unconfirmed.error);
                for member in members.end(SessionEnd::Lost(error.clone())) {
                    if !member.has_ended() {
                        member.end(LeaseEnd::Lost(error.clone()));
                    }
                }
                if !lease.has_ended() {
                    lease.end(LeaseEnd::Lost(error));
                }
                return;
            }
            retrying.push(Arc::clone(lease));
        }
        if !retrying.is_empty() {
            retry_at = now.checked_add(retry);
            retry = retry.saturating_mul(2).min(last_retry);
        }
    }
}
