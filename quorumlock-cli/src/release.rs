//! `quorumlock release`: compare-and-delete a lock by its token, for operators.

use std::time::Duration;

use quorumlock::{LockConfig, LockToken, Redlock, Tally};
use serde_json::{json, Value};

use crate::args::{GlobalArgs, ReleaseArgs};
use crate::exit::{CliError, Kind};
use crate::explain;
use crate::nodes::{check_urls, lock_key, node_urls, operator_timeout};
use crate::output::Output;

/// What one node did with the delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOutcome {
    /// The key held the token, and was deleted.
    Deleted,
    /// The key was absent or held another token; it was left alone.
    NotHeld,
    /// The node did not answer properly.
    Failed(String),
}

/// What the release achieved on the nodes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Deleted on a quorum: the lock is free.
    Released,
    /// The token cannot be on a quorum, even counting the nodes that failed: it did not
    /// hold the lock (any stale keys it had were deleted).
    NotHeld,
    /// Deleted on too few nodes, with enough failures that the token may still hold a
    /// quorum.
    Unknown,
}

/// Deletes the lock where it holds the token; exit code 0 when a quorum deleted it.
pub async fn release(global: &GlobalArgs, args: &ReleaseArgs, out: Output) -> Result<u8, CliError> {
    let key = lock_key(global, &args.resource)?;
    // The token was checked when the command line was read (`args::parse_token`).
    let urls = node_urls(global)?;
    let lock = operator_lock(global, &urls).await?;
    let token = LockToken::from_string(args.token.clone());
    let tally = lock
        .release_token(&args.resource, &token)
        .await
        .map_err(|error| explain::lock_error(&error, global))?;
    let names: Vec<String> = lock.node_names().map(str::to_owned).collect();
    let outcomes: Vec<NodeOutcome> = names.iter().map(|name| outcome(&tally, name)).collect();
    let quorum = quorumlock::quorum_of(names.len());
    let decision = decide(&outcomes, quorum);
    let deleted = count(&outcomes, |outcome| *outcome == NodeOutcome::Deleted);
    let total = names.len();

    out.result(
        &report_json(args, &key, &names, &outcomes, quorum, decision),
        || {
            let mut text = String::new();
            let width = names.iter().map(String::len).max().unwrap_or(0);
            for (name, outcome) in names.iter().zip(&outcomes) {
                let what = match outcome {
                    NodeOutcome::Deleted => "deleted".to_owned(),
                    NodeOutcome::NotHeld => "not held (absent, or another token)".to_owned(),
                    NodeOutcome::Failed(error) => format!("failed: {error}"),
                };
                text.push_str(&format!("  {name:width$}  {what}\n"));
            }
            let summary = match decision {
                Decision::Released => format!(
                    "released {:?}: deleted on {deleted}/{total} nodes (quorum {quorum})",
                    args.resource
                ),
                Decision::NotHeld => format!(
                    "not released: the token does not hold {:?} (deleted on {deleted}/{total} \
                     nodes, quorum {quorum})",
                    args.resource
                ),
                Decision::Unknown => format!(
                    "not confirmed: deleted on {deleted}/{total} nodes (quorum {quorum}), \
                     too many nodes failed to tell"
                ),
            };
            text.push_str(&summary);
            text
        },
    );
    match decision {
        Decision::Released => Ok(0),
        Decision::NotHeld => {
            let error = CliError::new(
                Kind::NotHeld,
                format!(
                    "token {} does not hold {:?} on a quorum of nodes; nothing of another \
                     owner was touched",
                    args.token, args.resource
                ),
            )
            .hint("the lock expired, was released, or belongs to another token: see `quorumlock status NAME`");
            out.error(&error);
            Ok(error.code())
        }
        Decision::Unknown => {
            let error = CliError::new(
                Kind::Unavailable,
                format!(
                    "release of {:?} not confirmed: deleted on {deleted} of {total} nodes, \
                     quorum {quorum}",
                    args.resource
                ),
            )
            .hint("run it again once the failed nodes answer; deleting twice is harmless");
            out.error(&error);
            Ok(error.code())
        }
    }
}

/// The lock on `urls` that deletes by token, read and checked as `run` reads its nodes
/// (servers, Redis Cluster members and Sentinel-managed masters; a malformed URL, or TLS
/// options a node would ignore, is an error before anything is deleted), each node given
/// the operator's budget to connect and to answer.
async fn operator_lock(global: &GlobalArgs, urls: &[String]) -> Result<Redlock, CliError> {
    let budget = operator_timeout(global);
    let nodes = check_urls(global, urls)?.connect_timeout(budget);
    // The TTL is never used to delete; it only has to leave the budget room, in whole
    // seconds (a tenth of the TTL at most may go to one node).
    let room = budget.as_secs().saturating_add(1).saturating_mul(10);
    let ttl = LockConfig::DEFAULT_TTL.max(Duration::from_secs(room));
    let mut config = LockConfig::builder().ttl(ttl).node_timeout(budget);
    if let Some(prefix) = &global.key_prefix {
        config = config.key_prefix(prefix.clone());
    }
    let config = config
        .build()
        .map_err(|error| explain::config_error(&error, global))?;
    Redlock::connect(nodes, config)
        .await
        .map_err(|error| explain::lock_error(&error, global))
}

/// What the node `name` did with the delete, as `tally` counts it.
fn outcome(tally: &Tally, name: &str) -> NodeOutcome {
    if let Some(failure) = tally.failures.iter().find(|failure| failure.node == name) {
        NodeOutcome::Failed(failure.error.to_string())
    } else if tally.refused.iter().any(|refused| refused == name) {
        NodeOutcome::NotHeld
    } else {
        NodeOutcome::Deleted
    }
}

/// How many outcomes are `which`.
fn count(outcomes: &[NodeOutcome], which: impl Fn(&NodeOutcome) -> bool) -> usize {
    outcomes.iter().filter(|outcome| which(outcome)).count()
}

/// Decides what the deletes achieved; see [`Decision`].
pub fn decide(outcomes: &[NodeOutcome], quorum: usize) -> Decision {
    let deleted = count(outcomes, |outcome| *outcome == NodeOutcome::Deleted);
    let failed = count(outcomes, |outcome| {
        matches!(outcome, NodeOutcome::Failed(_))
    });
    if deleted >= quorum {
        Decision::Released
    } else if deleted + failed < quorum {
        Decision::NotHeld
    } else {
        Decision::Unknown
    }
}

/// The result as JSON, for `--json`.
fn report_json(
    args: &ReleaseArgs,
    key: &str,
    names: &[String],
    outcomes: &[NodeOutcome],
    quorum: usize,
    decision: Decision,
) -> Value {
    let nodes: Vec<Value> = names
        .iter()
        .zip(outcomes)
        .map(|(name, outcome)| match outcome {
            NodeOutcome::Deleted => json!({"node": name, "outcome": "deleted", "error": null}),
            NodeOutcome::NotHeld => json!({"node": name, "outcome": "not_held", "error": null}),
            NodeOutcome::Failed(error) => {
                json!({"node": name, "outcome": "failed", "error": error})
            }
        })
        .collect();
    json!({
        "resource": args.resource,
        "key": key,
        "token": args.token,
        "released": decision == Decision::Released,
        "decision": match decision {
            Decision::Released => "released",
            Decision::NotHeld => "not_held",
            Decision::Unknown => "unknown",
        },
        "deleted_nodes": count(outcomes, |outcome| *outcome == NodeOutcome::Deleted),
        "node_count": names.len(),
        "quorum": quorum,
        "nodes": nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeOutcome::{Deleted, NotHeld};

    fn failed() -> NodeOutcome {
        NodeOutcome::Failed("connection refused".into())
    }

    #[test]
    fn a_quorum_of_deletes_releases() {
        assert_eq!(decide(&[Deleted, Deleted, NotHeld], 2), Decision::Released);
        assert_eq!(decide(&[Deleted, Deleted, failed()], 2), Decision::Released);
        assert_eq!(decide(&[Deleted], 1), Decision::Released);
    }

    #[test]
    fn a_token_that_cannot_be_on_a_quorum_did_not_hold_the_lock() {
        assert_eq!(decide(&[NotHeld, NotHeld, NotHeld], 2), Decision::NotHeld);
        assert_eq!(decide(&[Deleted, NotHeld, NotHeld], 2), Decision::NotHeld);
        assert_eq!(decide(&[NotHeld, NotHeld, failed()], 2), Decision::NotHeld);
        assert_eq!(decide(&[NotHeld], 1), Decision::NotHeld);
    }

    #[test]
    fn failures_that_could_hide_a_quorum_leave_it_unknown() {
        assert_eq!(decide(&[Deleted, NotHeld, failed()], 2), Decision::Unknown);
        assert_eq!(decide(&[NotHeld, failed(), failed()], 2), Decision::Unknown);
        assert_eq!(decide(&[failed()], 1), Decision::Unknown);
    }
}
