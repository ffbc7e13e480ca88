//! The invariants of `safety.md`, checked on a [`Trace`]: what the clients saw, and every
//! request the nodes logged.
//!
//! Each check returns `Err` with a description of the first violation found.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use quorumlock::node::GrantStamp;
use quorumlock::sim::{Op, OpRecord, Outcome, Reply, Stored};
use quorumlock::{LockError, LockToken, NodeError};
use tokio::time::Instant;

use super::runner::{Attempt, AttemptResult, Event, Trace};

/// The result of a check: the first violation, described.
pub type Verdict = Result<(), String>;

/// One attempt of an acquisition: a token (and a stamp) and when its first request went
/// out.
#[derive(Debug, Clone)]
pub struct Try {
    /// The attempt's token.
    pub token: LockToken,
    /// Its stamp, for a refresh of a waiter of the direct grant, whose refreshes share the
    /// acquisition's token.
    pub stamp: Option<u64>,
    /// When its first `SET NX` was sent.
    pub first_sent: Instant,
}

/// The refresh number of a lock request of a waiter of the direct grant: the same in the
/// refresh's requests to every node, whose stamps each name their node too
/// ([`GrantStamp`]).
pub fn stamp_of(op: &Op) -> Option<u64> {
    match op {
        Op::LockQueued { stamp, .. } => stamp.map(|stamp| GrantStamp::decode(stamp).refresh),
        _ => None,
    }
}

/// The attempts (`SET NX` rounds) an acquisition made, in order: the client's lock
/// requests sent between the call and the return, one token per attempt (one token and
/// stamp per refresh of a waiter of the direct grant).
pub fn tries(trace: &Trace, attempt: &Attempt) -> Vec<Try> {
    let mut tries: Vec<Try> = Vec::new();
    for (_, record) in &trace.log {
        let (true, Some(token)) = (record.op.is_lock(), &record.token) else {
            continue;
        };
        let stamp = stamp_of(&record.op);
        let ours = record.client.as_deref() == Some(&*attempt.client_name);
        let during = attempt.called <= record.sent_at && record.sent_at <= attempt.returned;
        if ours && during && !tries.iter().any(|t| &t.token == token && t.stamp == stamp) {
            tries.push(Try {
                token: token.clone(),
                stamp,
                first_sent: record.sent_at,
            });
        }
    }
    tries
}

/// The attempt that won `attempt`'s lock: its last with the granted token.
fn winning_try(trace: &Trace, attempt: &Attempt, token: &LockToken) -> Option<Try> {
    tries(trace, attempt)
        .into_iter()
        .rfind(|t| &t.token == token)
}

/// The nodes that announced, by `by`, that they granted the key to `waiter` on the place
/// its refresh stamped `stamp` wrote (the direct grant): a yes to that refresh, heard on
/// the client's channel.
fn announced_grants(trace: &Trace, waiter: &LockToken, stamp: u64, by: Instant) -> BTreeSet<usize> {
    let of_this_refresh = |message: &[u8]| {
        let text = std::str::from_utf8(message).ok()?;
        let (named, stamp) = text.split_once(' ')?;
        let stamp = GrantStamp::decode(stamp.parse().ok()?);
        (named == waiter.as_str()).then_some(stamp.refresh)
    };
    trace
        .published
        .iter()
        .filter(|(_, at, published)| {
            *at <= by && of_this_refresh(&published.message) == Some(stamp)
        })
        .map(|(node, _, _)| *node)
        .collect()
}

/// When the reply to `record` reached the client, if it did.
fn reply_time(record: &OpRecord) -> Option<Instant> {
    match &record.outcome {
        Outcome::Failed { at, .. } => Some(*at),
        Outcome::Applied(applied) => match applied.reply {
            Reply::Sent { at } | Reply::Reset { at } => Some(at),
            Reply::Pending | Reply::Lost => None,
        },
        _ => None,
    }
}

/// When the client stopped waiting for `record`: its reply, or its timeout.
fn completion(record: &OpRecord, timeout: Duration) -> Instant {
    let limit = record.sent_at + timeout;
    if reloads_after(record) {
        return limit;
    }
    reply_time(record).map_or(limit, |at| at.min(limit))
}

/// Whether the last outcome logged for `record` is a `NOSCRIPT` the client answers with a
/// reload and a resend: its wait goes on, and the reload's fate is not always logged (a
/// load still connecting, or failing before it is sent), so only its timeout bounds it.
fn reloads_after(record: &OpRecord) -> bool {
    matches!(&record.outcome, Outcome::Failed { error: NodeError::Redis(message), .. }
        if message.starts_with("NOSCRIPT"))
}

/// Whether `record` is a granted command whose `true` reached the client in time and by
/// `by`.
fn confirmed(record: &OpRecord, timeout: Duration, by: Instant) -> bool {
    match &record.outcome {
        Outcome::Applied(applied) => {
            applied.result
                && matches!(applied.reply, Reply::Sent { at }
                    if at <= by && at <= record.sent_at + timeout)
        }
        _ => false,
    }
}

fn granted(trace: &Trace) -> impl Iterator<Item = (&Attempt, &super::runner::Grant)> {
    trace
        .attempts
        .iter()
        .filter_map(|attempt| attempt.grant().map(|grant| (attempt, grant)))
}

/// 1. Success needs OK from at least N/2+1 distinct nodes in the same attempt.
pub fn quorum_of_grants(trace: &Trace) -> Verdict {
    let timeout = trace.config.node_timeout();
    for (attempt, grant) in granted(trace) {
        let winning = winning_try(trace, attempt, &grant.token)
            .ok_or_else(|| format!("no SET NX of the granted token {}", grant.token))?;
        let ops: Vec<_> = trace
            .ops_of(&attempt.client_name, &grant.token)
            .filter(|(_, record)| record.op.is_lock() && stamp_of(&record.op) == winning.stamp)
            .collect();
        let rounds: BTreeSet<Instant> = ops.iter().map(|(_, record)| record.sent_at).collect();
        if rounds.len() != 1 {
            return Err(format!(
                "client {} was granted {} with SET NX requests sent at {} different times: \
                 one token must belong to one round",
                attempt.client,
                grant.token,
                rounds.len()
            ));
        }
        let mut nodes: BTreeSet<usize> = ops
            .iter()
            .filter(|(_, record)| confirmed(record, timeout, attempt.returned))
            .map(|(node, _)| *node)
            .collect();
        let waiter = ops.iter().find_map(|(_, record)| record.waiter.as_ref());
        if let (Some(stamp), Some(waiter)) = (winning.stamp, waiter) {
            nodes.extend(announced_grants(trace, waiter, stamp, attempt.returned));
        }
        if nodes.len() < trace.quorum {
            return Err(format!(
                "client {} was granted {} at {} with OK from nodes {nodes:?} only; quorum {}",
                attempt.client,
                attempt.resource,
                trace.t(attempt.returned),
                trace.quorum
            ));
        }
    }
    Ok(())
}

/// 2. Validity is computed on the monotonic clock from before the first send to after the
///    last counted reply, with the drift subtracted, and is > 0.
pub fn validity_computation(trace: &Trace) -> Verdict {
    let max_validity = trace.config.max_validity();
    for attempt in &trace.attempts {
        if let AttemptResult::Granted(grant) = &attempt.result {
            let first_sent = winning_try(trace, attempt, &grant.token)
                .map(|t| t.first_sent)
                .ok_or_else(|| format!("no SET NX of the granted token {}", grant.token))?;
            if grant.deadline != grant.acquired_at + max_validity {
                return Err(format!(
                    "deadline {} is not the round's start {} + ttl - drift ({max_validity:?})",
                    trace.t(grant.deadline),
                    trace.t(grant.acquired_at)
                ));
            }
            if grant.acquired_at < attempt.called || grant.acquired_at > first_sent {
                return Err(format!(
                    "the validity is counted from {}, not from before the first request \
                     (called {}, first sent {})",
                    trace.t(grant.acquired_at),
                    trace.t(attempt.called),
                    trace.t(first_sent)
                ));
            }
            if grant.deadline <= attempt.returned {
                return Err(format!(
                    "granted at {} with no validity left (deadline {})",
                    trace.t(attempt.returned),
                    trace.t(grant.deadline)
                ));
            }
        }
        if let AttemptResult::Failed(LockError::ValidityExhausted { elapsed, .. }) = &attempt.result
        {
            if *elapsed < max_validity {
                return Err(format!(
                    "ValidityExhausted after {elapsed:?}, which leaves validity in {max_validity:?}"
                ));
            }
        }
        for event in &attempt.events {
            if let Event::Refresh {
                called,
                acquired_at,
                deadline,
                result: Ok(_),
                ..
            } = event
            {
                if acquired_at != called || *deadline != *called + max_validity {
                    return Err(format!(
                        "a refresh called at {} set acquired_at {} and deadline {}",
                        trace.t(*called),
                        trace.t(*acquired_at),
                        trace.t(*deadline)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// 3. Time-bounded exclusion: no two holders' intervals overlap in real time. Only holds
///    when the schedule keeps the model's assumptions.
pub fn no_overlap(trace: &Trace) -> Verdict {
    let mut by_resource: BTreeMap<&str, Vec<(Instant, Instant, &Attempt)>> = BTreeMap::new();
    for attempt in &trace.attempts {
        if let Some((from, to)) = attempt.holding() {
            by_resource
                .entry(&attempt.resource)
                .or_default()
                .push((from, to, attempt));
        }
    }
    for (resource, mut holdings) in by_resource {
        holdings.sort_by_key(|(from, _, _)| *from);
        for (i, (from_a, to_a, a)) in holdings.iter().enumerate() {
            for (from_b, to_b, b) in &holdings[i + 1..] {
                if from_b < to_a && from_a < to_b {
                    return Err(format!(
                        "overlap on {resource}: client {} held it over [{}, {}] and client {} \
                         over [{}, {}]",
                        a.client,
                        trace.t(*from_a),
                        trace.t(*to_a),
                        b.client,
                        trace.t(*from_b),
                        trace.t(*to_b)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// 4. Every delete or expiry change is conditional on our token; a key holding another
///    token is never touched. Tokens are 128 random bits, distinct per attempt.
pub fn token_conditional_writes(trace: &Trace) -> Verdict {
    // Which client minted each token, in which round.
    let mut minted: BTreeMap<&str, (&str, Instant)> = BTreeMap::new();
    // The tokens refreshes of waiters of the direct grant queued with, by whom and when they
    // first did: a release may grant a key only to one of these, queued before.
    let mut queued: BTreeMap<&str, (&str, Instant)> = BTreeMap::new();
    for (_, record) in &trace.log {
        if let (Some(_), Some(token)) = (stamp_of(&record.op), &record.token) {
            let client = record.client.as_deref().unwrap_or("");
            queued
                .entry(token.as_str())
                .or_insert((client, record.sent_at));
        }
    }
    for (_, record) in &trace.log {
        // The counter commands carry no token (invariant 9 checks them).
        let Some(token) = &record.token else {
            continue;
        };
        let token = token.as_str();
        if token.len() != 32
            || !token
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(format!("token {token:?} is not 32 hex digits (128 bits)"));
        }
        let client = record.client.as_deref().unwrap_or("");
        match (record.op.is_lock(), minted.get(token)) {
            (true, None) => {
                minted.insert(token, (client, record.sent_at));
            }
            (true, Some(&(first_client, round))) => {
                // A waiter of the direct grant refreshes in its acquisition's token.
                let refresh = stamp_of(&record.op).is_some();
                if first_client != client || (round != record.sent_at && !refresh) {
                    return Err(format!(
                        "token {token} used by two attempts (client {first_client} and {client})"
                    ));
                }
            }
            (false, Some(&(first_client, _))) if first_client == client => {}
            (false, _) => {
                return Err(format!(
                    "client {client} sent {:?} with token {token}, which it never locked with",
                    record.op
                ));
            }
        }
    }
    for (_, record) in &trace.log {
        // Every time the node ran the request: a resend after a reset runs it again.
        for outcome in record.outcomes() {
            if let Outcome::Applied(applied) = outcome {
                conditional_change(record, applied, &queued)?;
            }
        }
    }
    let grants: Vec<&LockToken> = granted(trace).map(|(_, grant)| &grant.token).collect();
    let distinct: BTreeSet<&str> = grants.iter().map(|token| token.as_str()).collect();
    if distinct.len() != grants.len() {
        return Err("two grants share a token".to_owned());
    }
    Ok(())
}

/// What the node may do to the keys of one applied request: a release deletes only keys
/// that hold its token (and may hand them to the next waiter, reserving them, or granting
/// them: setting them to the token that waiter queued with earlier), an extend changes
/// nothing unless all its keys hold its token, a lock attempt takes only free keys or keys
/// reserved for its own waiter (a waiter of the direct grant also restarts a key granted
/// to it), and leaving a queue only gives back keys reserved for the waiter leaving (or
/// granted to it, in the token it leaves with).
fn conditional_change(
    record: &OpRecord,
    applied: &quorumlock::sim::Applied,
    queued: &BTreeMap<&str, (&str, Instant)>,
) -> Verdict {
    let token = record.token.as_ref().map(LockToken::as_str);
    let waiter = record.waiter.as_ref().map(LockToken::as_str);
    let ours = |stored: &Option<Stored>| {
        stored
            .as_ref()
            .map(|stored| stored.token.as_str())
            .is_some()
            && stored.as_ref().map(|stored| stored.token.as_str()) == token
    };
    let reserved_for_us = |stored: &Option<Stored>| {
        waiter.is_some() && stored.as_ref().and_then(Stored::reserved_for) == waiter
    };
    let handed_on = |stored: &Option<Stored>| {
        stored.as_ref().is_none_or(|stored| {
            stored.reserved_for().is_some()
                || queued
                    .get(stored.token.as_str())
                    .is_some_and(|&(_, at)| at <= applied.at)
        })
    };
    // A key granted to one of this client's earlier refreshes (its token queued by it).
    let granted_to_us = |stored: &Option<Stored>| {
        let client = record.client.as_deref().unwrap_or("");
        stored.as_ref().is_some_and(|stored| {
            queued
                .get(stored.token.as_str())
                .is_some_and(|&(by, _)| by == client)
        })
    };
    let refresh = stamp_of(&record.op).is_some();
    let keys = applied.before.iter().zip(&applied.after);
    for (before, after) in keys.clone() {
        let allowed = match record.op {
            Op::Unlock => {
                if ours(before) {
                    handed_on(after)
                } else {
                    after == before
                }
            }
            Op::LeaveQueue => {
                after == before
                    || ((reserved_for_us(before) || granted_to_us(before)) && handed_on(after))
            }
            op if op.is_lock() => {
                after == before
                    || before.is_none()
                    || reserved_for_us(before)
                    || (refresh && granted_to_us(before) && ours(after))
            }
            _ => true,
        };
        if !allowed {
            return Err(format!(
                "{:?} with token {token:?} for waiter {waiter:?} turned {before:?} into {after:?}",
                record.op
            ));
        }
    }
    if let Op::Extend { .. } = record.op {
        if !applied.before.iter().all(ours) && (applied.after != applied.before || applied.result) {
            return Err(format!(
                "an extend with token {token:?} changed keys it did not all hold: {:?} into {:?}",
                applied.before, applied.after
            ));
        }
    }
    Ok(())
}

/// Whether the client heard `record`'s node refuse it in time: a lock command that node
/// answered no to took nothing there (each lock command is atomic).
fn heard_refused(record: &OpRecord, timeout: Duration) -> bool {
    match &record.outcome {
        Outcome::Applied(applied) => {
            !applied.result
                && matches!(applied.reply, Reply::Sent { at } if at <= record.sent_at + timeout)
        }
        _ => false,
    }
}

/// 5. Before any retry, and before returning a failure, a release is sent to every node
///    that may hold the attempt's keys: all N, except those whose refusal the client heard.
pub fn rollback_on_all_nodes(trace: &Trace) -> Verdict {
    let timeout = trace.config.node_timeout();
    for attempt in &trace.attempts {
        let tries = tries(trace, attempt);
        let granted = attempt.grant().map(|grant| &grant.token);
        for (i, attempt_try) in tries.iter().enumerate() {
            if Some(&attempt_try.token) == granted {
                continue;
            }
            let by = tries
                .get(i + 1)
                .map_or(attempt.returned, |next| next.first_sent);
            let unlocked: BTreeSet<usize> = trace
                .ops_of(&attempt.client_name, &attempt_try.token)
                .filter(|(_, record)| {
                    record.op == Op::Unlock
                        && record.sent_at >= attempt_try.first_sent
                        && record.sent_at <= by
                })
                .map(|(node, _)| *node)
                .collect();
            let refused: BTreeSet<usize> = trace
                .ops_of(&attempt.client_name, &attempt_try.token)
                .filter(|(_, record)| record.op.is_lock() && heard_refused(record, timeout))
                .map(|(node, _)| *node)
                .collect();
            let missing: Vec<usize> = (0..trace.nodes)
                .filter(|node| !unlocked.contains(node) && !refused.contains(node))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "client {}'s failed attempt on {} (token {}, sent {}) was released on nodes \
                     {unlocked:?} only (refused by {refused:?}) before {} ({})",
                    attempt.client,
                    attempt.resource,
                    attempt_try.token,
                    trace.t(attempt_try.first_sent),
                    trace.t(by),
                    if i + 1 < tries.len() {
                        "the next attempt"
                    } else {
                        "the failure was returned"
                    }
                ));
            }
        }
    }
    Ok(())
}

/// 6. Extension never creates or overwrites a key, is refused after the local deadline,
///    and recomputes validity from when the extension started.
pub fn extension_rules(trace: &Trace) -> Verdict {
    for (node, record) in &trace.log {
        let Op::Extend { ttl } = record.op else {
            continue;
        };
        for outcome in record.outcomes() {
            let Outcome::Applied(applied) = outcome else {
                continue;
            };
            let ours = |stored: &Option<Stored>| {
                stored.as_ref().map(|stored| &stored.token) == record.token.as_ref()
            };
            let all_ours = applied.before.iter().all(ours);
            // Redis's expiry: the node's millisecond plus the TTL (PEXPIRE).
            let expiry = Duration::from_millis(applied.node_time.as_millis() as u64) + ttl;
            let extended = applied.after.iter().all(|after| {
                after.as_ref().is_some_and(|stored| {
                    Some(&stored.token) == record.token.as_ref() && stored.expires_at == expiry
                })
            });
            if (!all_ours && applied.after != applied.before) || (all_ours && !extended) {
                return Err(format!(
                    "an extend with token {:?} on node {node} turned {:?} into {:?}",
                    record.token, applied.before, applied.after
                ));
            }
        }
    }
    let max_validity = trace.config.max_validity();
    let timeout = trace.config.node_timeout();
    for attempt in &trace.attempts {
        let Some(grant) = attempt.grant() else {
            continue;
        };
        // Only letting go deletes: no refresh (or check) ever does. (A waiter of the direct
        // grant rolls back its failed refreshes in the same token, before it holds.)
        let end = attempt.events.iter().find_map(|event| match event {
            Event::End { at, .. } => Some(*at),
            _ => None,
        });
        if let Some((_, early)) =
            trace
                .ops_of(&attempt.client_name, &grant.token)
                .find(|(_, record)| {
                    record.op == Op::Unlock
                        && record.sent_at >= attempt.returned
                        && end.is_none_or(|end| record.sent_at < end)
                })
        {
            return Err(format!(
                "client {} deleted its held key at {}, before letting go",
                attempt.client,
                trace.t(early.sent_at)
            ));
        }
        for event in &attempt.events {
            let Event::Refresh {
                called,
                returned,
                old_deadline,
                acquired_at,
                deadline,
                result,
            } = event
            else {
                continue;
            };
            // A refresh sends its extends at once, when called.
            let extends = || {
                trace
                    .ops_of(&attempt.client_name, &grant.token)
                    .filter(move |(_, record)| {
                        matches!(record.op, Op::Extend { .. }) && record.sent_at == *called
                    })
            };
            if called >= old_deadline {
                if !matches!(result, Err(LockError::Expired { .. })) {
                    return Err(format!(
                        "a refresh at {} after the deadline {} returned {result:?}",
                        trace.t(*called),
                        trace.t(*old_deadline)
                    ));
                }
                if extends().next().is_some() {
                    return Err(format!(
                        "a refresh at {} after the deadline {} still sent extends",
                        trace.t(*called),
                        trace.t(*old_deadline)
                    ));
                }
            }
            match result {
                Ok(validity) => {
                    if *acquired_at != *called || *deadline != *called + max_validity {
                        return Err(format!(
                            "a refresh started at {} gave deadline {}: not recomputed from its start",
                            trace.t(*called),
                            trace.t(*deadline)
                        ));
                    }
                    if returned >= old_deadline {
                        return Err(format!(
                            "a refresh confirmed at {} after the old deadline {} succeeded",
                            trace.t(*returned),
                            trace.t(*old_deadline)
                        ));
                    }
                    if *validity != deadline.saturating_duration_since(*returned) {
                        return Err(format!("a refresh returned validity {validity:?}"));
                    }
                    let confirmed: BTreeSet<usize> = extends()
                        .filter(|(_, record)| confirmed(record, timeout, *returned))
                        .map(|(node, _)| *node)
                        .collect();
                    if confirmed.len() < trace.quorum {
                        return Err(format!(
                            "a refresh at {} succeeded with extends confirmed by {confirmed:?} only",
                            trace.t(*called)
                        ));
                    }
                }
                Err(_) => {
                    if deadline != old_deadline {
                        return Err(format!(
                            "a failed refresh at {} moved the deadline",
                            trace.t(*called)
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// 7. After its deadline a lease reports itself lost.
pub fn expired_leases_report_lost(trace: &Trace) -> Verdict {
    for attempt in &trace.attempts {
        let Some(grant) = attempt.grant() else {
            continue;
        };
        for event in &attempt.events {
            let Event::Check {
                called,
                returned,
                deadline,
                expired,
                validity,
                result,
            } = event
            else {
                continue;
            };
            if called >= deadline {
                // is_acquired sends its requests at once, when called.
                let asked_nodes = trace
                    .ops_of(&attempt.client_name, &grant.token)
                    .any(|(_, record)| record.op == Op::Holds && record.sent_at == *called);
                if !expired || !validity.is_zero() || !matches!(result, Ok(false)) || asked_nodes {
                    return Err(format!(
                        "at {}, past the deadline {}: is_expired {expired}, validity \
                         {validity:?}, is_acquired {result:?}, asked the nodes: {asked_nodes}",
                        trace.t(*called),
                        trace.t(*deadline)
                    ));
                }
            } else if *expired || *validity != deadline.saturating_duration_since(*called) {
                return Err(format!(
                    "at {}, before the deadline {}: is_expired {expired}, validity {validity:?}",
                    trace.t(*called),
                    trace.t(*deadline)
                ));
            }
            if matches!(result, Ok(true)) && returned >= deadline {
                return Err(format!(
                    "is_acquired said true at {}, past the deadline {}",
                    trace.t(*returned),
                    trace.t(*deadline)
                ));
            }
        }
    }
    Ok(())
}

/// 8. Retry delays are random within the configured jitter; attempts are bounded.
///
/// Returns the waits measured between attempts, for the spread check.
pub fn bounded_jittered_retries(trace: &Trace) -> Result<Vec<Duration>, String> {
    let config = &trace.config;
    let max_tries = 1 + config.retry_count() as usize;
    let low = config.retry_delay() - config.retry_jitter();
    // Tokio's timers fire on whole milliseconds: a wait may end up to 1 ms late.
    let high = config.retry_delay() + config.retry_jitter() + Duration::from_millis(1);
    let mut waits = Vec::new();
    for attempt in &trace.attempts {
        let tries = tries(trace, attempt);
        let limit = if attempt.blocking { max_tries } else { 1 };
        if tries.len() > limit {
            return Err(format!(
                "client {} made {} attempts in one {} (at most {limit})",
                attempt.client,
                tries.len(),
                if attempt.blocking {
                    "acquire"
                } else {
                    "try_acquire"
                }
            ));
        }
        if let AttemptResult::Failed(error) = &attempt.result {
            if error.is_retryable() && tries.len() != limit {
                return Err(format!(
                    "client {} gave up after {} attempts with {error} (expected {limit})",
                    attempt.client,
                    tries.len()
                ));
            }
        }
        for pair in tries.windows(2) {
            // The attempt ends when every node answered its lock request (or timed out)
            // and the rollback, where one was needed, is done.
            let ops = || {
                trace
                    .ops_of(&attempt.client_name, &pair[0].token)
                    .filter(|(_, record)| {
                        (record.op == Op::Unlock
                            || (record.op.is_lock() && stamp_of(&record.op) == pair[0].stamp))
                            && record.sent_at >= pair[0].first_sent
                            && record.sent_at < pair[1].first_sent
                    })
            };
            let done = |records: &mut dyn Iterator<Item = &(usize, OpRecord)>| {
                records
                    .map(|(_, record)| completion(record, config.node_timeout()))
                    .max()
            };
            let rollback_done =
                done(&mut ops()).ok_or("an attempt was retried without having been sent")?;
            if pair[0].stamp.is_some() {
                // A waiter of the direct grant waits within its refresh, for the grants of
                // the nodes that queued it, from when every node answered (then rolls back
                // what it got, if anything): the wait ends early on an announcement for it.
                let answered = done(&mut ops().filter(|(_, record)| record.op.is_lock()))
                    .ok_or("a refresh was retried without having been sent")?;
                let waited = pair[1].first_sent.saturating_duration_since(answered);
                let waiter = ops().find_map(|(_, record)| record.waiter.clone());
                let heard = trace.published.iter().any(|(_, at, published)| {
                    *at >= pair[0].first_sent
                        && *at <= pair[1].first_sent
                        && waiter
                            .as_ref()
                            .is_some_and(|waiter| names(&published.message, waiter))
                });
                let rolling_back = rollback_done.saturating_duration_since(answered);
                if waited > high + rolling_back || (waited < low && !heard) {
                    return Err(format!(
                        "client {} waited {waited:?} between refreshes (answered at {}, rolled \
                         back by {}, next refresh at {}); allowed {low:?} to {high:?}",
                        attempt.client,
                        trace.t(answered),
                        trace.t(rollback_done),
                        trace.t(pair[1].first_sent)
                    ));
                }
                if !heard {
                    waits.push(waited.saturating_sub(rolling_back));
                }
                continue;
            }
            let wait = pair[1].first_sent.saturating_duration_since(rollback_done);
            if wait < low || wait > high {
                return Err(format!(
                    "client {} waited {wait:?} between attempts (rollback done at {}, next \
                     attempt at {}); allowed {low:?} to {high:?}",
                    attempt.client,
                    trace.t(rollback_done),
                    trace.t(pair[1].first_sent)
                ));
            }
            waits.push(wait);
        }
    }
    Ok(waits)
}

/// Whether an announcement's `message` names `waiter`: a reservation for it (its id), or a
/// grant (its id and a stamp).
fn names(message: &[u8], waiter: &LockToken) -> bool {
    let id = waiter.as_str().as_bytes();
    message == id || (message.starts_with(id) && message.get(id.len()) == Some(&b' '))
}

/// 9. Fencing tokens strictly increase across successive holders of a resource, and the
///    nodes' counters never go down.
pub fn fencing_tokens_increase(trace: &Trace) -> Verdict {
    for (node, record) in &trace.log {
        for applied in record.outcomes().filter_map(|outcome| match outcome {
            Outcome::Applied(applied) => Some(applied),
            _ => None,
        }) {
            let lowered = applied
                .counters_before
                .iter()
                .zip(&applied.counters_after)
                .any(|(before, after)| after < before);
            if lowered {
                return Err(format!(
                    "node {node} lowered a fencing counter: {:?} to {:?}",
                    applied.counters_before, applied.counters_after
                ));
            }
        }
    }
    let mut by_resource: BTreeMap<&str, Vec<(Instant, u64, usize, u64)>> = BTreeMap::new();
    for (attempt, grant) in granted(trace) {
        let fenced = trace.config.fencing();
        match grant.fencing_token {
            Some(token) if fenced => by_resource.entry(&attempt.resource).or_default().push((
                attempt.returned,
                token,
                attempt.client,
                attempt.returned_seq,
            )),
            None if !fenced => {}
            other => {
                return Err(format!(
                    "fencing {fenced} but the grant has token {other:?}"
                ))
            }
        }
    }
    for (resource, mut grants) in by_resource {
        // By the order of the returns, not their instants: on the virtual clock several
        // holders can come and go within one instant.
        grants.sort_by_key(|(_, _, _, seq)| *seq);
        for pair in grants.windows(2) {
            let ((first_at, first, first_client, _), (next_at, next, next_client, _)) =
                (pair[0], pair[1]);
            if next <= first {
                return Err(format!(
                    "on {resource}, client {first_client} got fencing token {first} at {} and \
                     the next holder, client {next_client}, got {next} at {}",
                    trace.t(first_at),
                    trace.t(next_at)
                ));
            }
        }
    }
    Ok(())
}
