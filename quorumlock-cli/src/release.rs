//! `quorumlock release`: compare-and-delete a lock by its token, for operators.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use quorumlock::backend::{redact_url, RedisNode};
use quorumlock::node::LockNode;
use quorumlock::LockToken;
use serde_json::{json, Value};

use crate::args::{GlobalArgs, ReleaseArgs};
use crate::duration::format_duration;
use crate::exit::{CliError, Kind};
use crate::nodes::{lock_key, node_urls, operator_timeout, quorum, tls_options};
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
    if args.token.is_empty() {
        return Err(CliError::new(Kind::Usage, "the token is empty").hint(
            "pass the holder's token with --token: see `quorumlock status NAME`, or the \
             holder's QUORUMLOCK_TOKEN",
        ));
    }
    let urls = node_urls(global)?;
    let budget = operator_timeout(global);
    let nodes = nodes_for(global, &urls, budget).await?;
    let token = LockToken::from_string(args.token.clone());
    let outcomes = join_all(nodes.iter().map(|node| unlock(node, &key, &token, budget))).await;
    let names: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
    let quorum = quorum(names.len());
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

/// A node for each of `urls`, in their order, read as `run` reads them (see
/// [`RedisNode::connect_tls`]): servers, Redis Cluster members and Sentinel-managed masters.
/// A malformed URL, or TLS options it would ignore, is an error before anything is deleted.
async fn nodes_for(
    global: &GlobalArgs,
    urls: &[String],
    budget: Duration,
) -> Result<Vec<Arc<dyn LockNode>>, CliError> {
    // Through the options even when they are the defaults: a rediss:// client needs the
    // TLS crypto provider installed before its first connection.
    let tls = tls_options(global)?;
    let mut nodes: Vec<Arc<dyn LockNode>> = Vec::with_capacity(urls.len());
    for url in urls {
        let node = RedisNode::connect_tls(url, &tls, budget)
            .await
            .map_err(|error| CliError::from_lock(&error))?;
        nodes.push(Arc::new(node));
    }
    Ok(nodes)
}

/// Compare-and-delete on one node, within `budget` (connection included).
async fn unlock(
    node: &Arc<dyn LockNode>,
    key: &str,
    token: &LockToken,
    budget: Duration,
) -> NodeOutcome {
    let keys: [Arc<str>; 1] = [Arc::from(key)];
    match tokio::time::timeout(budget, node.unlock(&keys, token)).await {
        Err(_) => NodeOutcome::Failed(format!("timed out after {}", format_duration(budget))),
        Ok(Err(error)) => NodeOutcome::Failed(error.to_string()),
        Ok(Ok(true)) => NodeOutcome::Deleted,
        Ok(Ok(false)) => NodeOutcome::NotHeld,
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
