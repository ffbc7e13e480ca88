//! Checks of the fair queue and of what a run leaves on the nodes, on a [`Trace`].
//!
//! Each returns `Err` with the first violation found; the queue checks also count the
//! situations they met, so that a generator can be shown to reach them.

use std::collections::BTreeMap;
use std::time::Duration;

use quorumlock::sim::{Applied, Op, OpRecord, Outcome, Stored};
use quorumlock::LockToken;

use super::checks::Verdict;
use super::runner::Trace;

/// Every time a node ran `record`, oldest first.
fn applications(record: &OpRecord) -> impl Iterator<Item = &Applied> {
    record.outcomes().filter_map(|outcome| match outcome {
        Outcome::Applied(applied) => Some(applied),
        _ => None,
    })
}

/// The key's values before and after one application, with the key's name.
fn changes<'a>(
    record: &'a OpRecord,
    applied: &'a Applied,
) -> impl Iterator<Item = (&'a str, &'a Option<Stored>, &'a Option<Stored>)> {
    record
        .keys
        .iter()
        .zip(applied.before.iter().zip(&applied.after))
        .map(|(key, (before, after))| (key.as_str(), before, after))
}

/// A key reserved for a waiter only ever becomes a holder's key through that waiter's own
/// queued attempt. Returns how many reservations were claimed.
pub fn reservations_claimed_by_their_waiter(trace: &Trace) -> Result<usize, String> {
    let mut claimed = 0;
    for (node, record) in &trace.log {
        for applied in applications(record) {
            for (key, before, after) in changes(record, applied) {
                let Some(reserved) = before.as_ref().and_then(Stored::reserved_for) else {
                    continue;
                };
                let taken = after
                    .as_ref()
                    .is_some_and(|after| after.reserved_for().is_none());
                if !taken {
                    continue;
                }
                let by_its_waiter = matches!(record.op, Op::LockQueued { .. })
                    && record.waiter.as_ref().map(LockToken::as_str) == Some(reserved);
                if !by_its_waiter {
                    return Err(format!(
                        "on node {node}, {key} reserved for {reserved} was taken by {:?} of client \
                         {:?} for waiter {:?} at {}",
                        record.op,
                        record.client,
                        record.waiter,
                        trace.t(applied.at)
                    ));
                }
                claimed += 1;
            }
        }
    }
    Ok(claimed)
}

/// A reservation lapses no later than its waiter's place would have: the waiter's last
/// queued attempt on that node plus the place's lifetime. So a waiter that died holds the
/// line up for at most the lifetime of its place (`QueuePlace::lifetime`, the documented
/// bound). Returns how many reservations were made.
pub fn reservations_lapse_with_their_place(trace: &Trace) -> Result<usize, String> {
    let mut made = 0;
    for node in 0..trace.nodes {
        // The node's commands in the order it ran them.
        let mut ran: Vec<(&OpRecord, &Applied)> = trace
            .log
            .iter()
            .filter(|(at, _)| *at == node)
            .flat_map(|(_, record)| applications(record).map(move |applied| (record, applied)))
            .collect();
        ran.sort_by_key(|(_, applied)| applied.seq);
        // Each waiter's place: when it lapses, in the node's milliseconds.
        let mut places: BTreeMap<&str, Duration> = BTreeMap::new();
        for (record, applied) in ran {
            match (record.op, &record.waiter) {
                (Op::LockQueued { lifetime, .. }, Some(waiter)) if !applied.result => {
                    let now = Duration::from_millis(applied.node_time.as_millis() as u64);
                    places.insert(waiter.as_str(), now + millis(lifetime));
                }
                (Op::LockQueued { .. } | Op::LeaveQueue, Some(waiter)) => {
                    places.remove(waiter.as_str());
                }
                _ => {}
            }
            for (key, before, after) in changes(record, applied) {
                let Some(stored) = after
                    .as_ref()
                    .filter(|after| Some(*after) != before.as_ref())
                else {
                    continue;
                };
                let Some(waiter) = stored.reserved_for() else {
                    continue;
                };
                made += 1;
                let lapses = places.get(waiter).copied();
                if lapses.is_none_or(|lapses| stored.expires_at > lapses) {
                    return Err(format!(
                        "on node {node}, {:?} of client {:?} at {} reserved {key} for {waiter} \
                         until {:?} of node time, but its place lapses at {lapses:?}",
                        record.op,
                        record.client,
                        trace.t(applied.at),
                        stored.expires_at
                    ));
                }
            }
        }
    }
    Ok(made)
}

/// A place lifetime as the scripts receive it: whole milliseconds, at least one.
fn millis(lifetime: Duration) -> Duration {
    Duration::from_millis((lifetime.as_millis() as u64).max(1))
}

/// Once every client is done and what they left in flight or in the background has
/// landed, the nodes hold no lock key, reservation, queue place or watch marker: only
/// fencing counters. (Checked on runs where no request is lost and no key expires.)
pub fn nothing_left_behind(trace: &Trace) -> Verdict {
    if trace.leftovers.is_empty() {
        return Ok(());
    }
    let mut history = String::new();
    for (node, key) in &trace.leftovers {
        for (_, record) in trace.log.iter().filter(|(at, record)| {
            at == node
                && record
                    .keys
                    .iter()
                    .any(|locked| key.ends_with(locked.as_str()))
        }) {
            let outcomes: Vec<String> = record.outcomes().map(describe).collect();
            history.push_str(&format!(
                "\n  node {node}: {} {:?} {:?} token {:?} waiter {:?} loads {}: {}",
                trace.t(record.sent_at),
                record.client,
                record.op,
                record.token.as_ref().map(|t| &t.as_str()[..6]),
                record.waiter.as_ref().map(|w| w.as_str().len()),
                record.script_loads,
                outcomes.join(" | ")
            ));
        }
    }
    Err(format!(
        "left on the nodes after every client was done: {:?}; their history:{history}",
        trace.leftovers
    ))
}

/// One outcome, briefly: what the node did, and whether the client heard.
fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Applied(applied) => format!(
            "applied #{} {:?} -> {:?} ({}), reply {:?}",
            applied.seq,
            applied
                .before
                .iter()
                .map(|b| b.as_ref().map(|s| s.token.as_str()[..6].to_owned()))
                .collect::<Vec<_>>(),
            applied
                .after
                .iter()
                .map(|b| b.as_ref().map(|s| s.token.as_str()[..6].to_owned()))
                .collect::<Vec<_>>(),
            applied.result,
            applied.reply
        ),
        Outcome::Failed { error, .. } => format!("failed: {error}"),
        other => format!("{other:?}"),
    }
}
