//! The keeper: the one task that keeps every lock of a session alive, a round of
//! extensions per interval for all of them (see `Coordinator::renew`), and a retry of the
//! ones a round could not confirm.

use std::sync::Arc;

use tokio::time::Instant;

use super::members::Members;
use crate::error::{LeaseEnd, SessionEnd};
use crate::lease::Lease;

/// Extends the members of `members` every `cadence.interval` (from the start of one round
/// to the next; a member that joins due earlier brings the round forward) until the
/// session ends. A lease a round could not confirm is tried again after a short retry
/// while its validity lasts; once one of them has too little left for another round, the
/// session can no longer keep a quorum for its locks, and it ends: every member is
/// declared lost, before its deadline rather than at it.
pub(crate) async fn keep(members: Arc<Members>) {
    let (coordinator, cadence) = (&members.coordinator, members.cadence);
    let config = coordinator.config();
    let retry = config.node_timeout().max(config.ttl() / 20);
    // As the watchdog's: a round takes at most a node timeout per chunk in flight, and
    // below this margin an extension can no longer be confirmed in time.
    let margin = config.node_timeout().saturating_mul(2);
    let mut retrying: Vec<Arc<Lease>> = Vec::new();
    let mut retry_at: Option<Instant> = None;
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
        let now = Instant::now();
        let leases = if now >= members.next_round() {
            let Some(next) = now.checked_add(cadence.interval) else {
                return; // a round 30 days off cannot be planned, nor is it needed
            };
            members.plan(next, now);
            retrying.clear();
            members.current()
        } else if retry_at.is_some_and(|retry_at| now >= retry_at) {
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
        let unconfirmed = Box::pin(coordinator.renew(&leases, cadence.chunk)).await;
        let now = Instant::now();
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
        }
    }
}
