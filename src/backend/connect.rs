//! A lock's [`Nodes`] connected: a [`RedisNode`] for each member, connected and checked
//! at once, with the facts of the deployment the coordinator needs (the key layout).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use super::abstention::{Abstention, AbstentionCause};
use super::clock::{ClockRules, ClockWatch};
use super::identity::{Admission, Refusal, Rejection};
use super::nodes::Nodes;
use super::redis_node::{NodeSetup, NodeTimeouts, RedisNode};
use crate::config::LockConfig;
use crate::error::LockError;
use crate::metrics::Counters;
use crate::node::LockNode;
use crate::resource::KeyLayout;

/// A node set connected for one lock.
pub(crate) struct Connected {
    /// One node per member, in the order given.
    pub(crate) nodes: Vec<Arc<dyn LockNode>>,
    /// How the lock's keys are laid out on them.
    pub(crate) layout: KeyLayout,
}

/// The nodes of `nodes` for a lock with `config` and `quorum`, counting into `counters`,
/// connected and checked at once. It returns as soon as `quorum` members are connected
/// and checked (or every member was heard out): the others go on connecting in the
/// background, and count as failed until their server is checked, so that no server votes
/// before it is known to be the member's own.
///
/// A rule of the node set broken (see [`Nodes::check`]), or two members that reach one
/// server, is an error. A member whose server cannot serve the lock (see
/// [`identity`](super::identity)) counts as failed, as a member that cannot be reached
/// does, unless [`Nodes::strict_members`] asks for an error; and it is an error when too
/// few members are left to form a quorum.
pub(crate) async fn connect(
    nodes: &Nodes,
    config: &LockConfig,
    quorum: usize,
    counters: &Arc<Counters>,
) -> Result<Connected, LockError> {
    let made = open_all(nodes, config, counters)?;
    hear_out(&made, quorum, nodes.deployment().strict_members).await?;
    Ok(Connected {
        nodes: made
            .into_iter()
            .map(|node| Arc::new(node) as Arc<dyn LockNode>)
            .collect(),
        layout: nodes.layout(),
    })
}

/// A node for each member of `nodes`, for a lock with `config`, not connected yet: the
/// node set's rules checked first (see [`Nodes::check`]).
fn open_all(
    nodes: &Nodes,
    config: &LockConfig,
    counters: &Arc<Counters>,
) -> Result<Vec<RedisNode>, LockError> {
    nodes.check(config)?;
    let deployment = nodes.deployment();
    let setup = NodeSetup {
        timeouts: NodeTimeouts {
            connect: deployment.connect_timeout,
            request: config.node_timeout(),
        },
        admission: Arc::new(
            Admission::new(config.fencing() && !deployment.fencing_on_volatile_nodes)
                .restart_window(deployment.restart_window(config))
                .clock_rules(deployment.clock_rules(config)),
        ),
        counters: Arc::clone(counters),
        announce: config.notify_releases(),
        replica_acks: deployment.replica_acks,
    };
    nodes
        .addresses()
        .iter()
        .zip(nodes.clients()?)
        .map(|(address, client)| RedisNode::open(client, address.name().to_owned(), &setup))
        .collect()
}

/// How one member of a node set stands, as a lock connecting to it now would find it
/// ([`check_members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberCheck {
    /// Connected, and its server may vote.
    Admitted,
    /// Not connected within the connect timeout (down, unreachable, a wrong password): the
    /// error. A lock counts it as failed until it answers.
    Unreachable(String),
    /// Its server answered but cannot serve the lock (a replica, a Redis Cluster node
    /// given as a server, the same server as an earlier member, a database it does not
    /// have...): why. A lock counts it as failed (see [`Nodes::strict_members`]).
    Refused(String),
    /// Its server may serve the lock, but started too recently without a durable
    /// append-only file (see [`Nodes::restart_abstention`]): why, and for how long. A lock
    /// counts it as failed until then.
    Abstaining(String),
}

/// Connects to every member of `nodes` once, as a lock with `config` would (the same
/// checks of who answers, the same rule of one vote per server: of two URLs of one
/// server, whichever answers later is refused), waits for each (all at once, each within
/// the connect timeout), with clock checks on samples each admitted server's clock twice,
/// 350 ms apart (a step, a stopped clock or one several times fast shows as an
/// abstention), and says how each stands: for operator
/// tools (`quorumlock status`) that read the nodes with clients of their own and must not
/// count a member a lock would not. Fails only on the rules of the node set itself (see
/// [`Redlock::connect`](crate::Redlock::connect)). The connections are dropped on return.
///
/// ```no_run
/// use quorumlock::backend::{check_members, MemberCheck};
/// use quorumlock::{LockConfig, Nodes};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let nodes = Nodes::new(["redis://a:6379", "redis://b:6379", "redis://c:6379"])?;
/// for (address, check) in nodes.addresses().iter().zip(check_members(&nodes, &LockConfig::default()).await?) {
///     if let MemberCheck::Refused(why) = check {
///         eprintln!("{}: {why}", address.name());
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub async fn check_members(
    nodes: &Nodes,
    config: &LockConfig,
) -> Result<Vec<MemberCheck>, LockError> {
    let made = open_all(nodes, config, &Arc::default())?;
    let rules = nodes.deployment().clock_rules(config);
    let checks = futures::future::join_all(made.iter().map(|node| async move {
        node.check().await?;
        match rules {
            Some(rules) => check_clock(node, rules).await,
            None => Ok(()),
        }
    }))
    .await;
    Ok(checks
        .into_iter()
        .map(|check| match check {
            Ok(()) => MemberCheck::Admitted,
            Err(Rejection::Refused(refusal)) => MemberCheck::Refused(refusal.to_string()),
            Err(Rejection::Failed(error)) => MemberCheck::Unreachable(error.to_string()),
            Err(Rejection::Abstaining(abstention)) => {
                MemberCheck::Abstaining(abstention.to_string())
            }
        })
        .collect())
}

/// How far apart the two clock samples of [`check_members`] are: long enough that a clock
/// that stands still, or runs three times fast, moves outside the default drift
/// allowance (302 ms for a 30 s lease) between them.
const CLOCK_PROBE_GAP: Duration = Duration::from_millis(350);

/// Two samples of `node`'s clock, [`CLOCK_PROBE_GAP`] apart, judged by `rules`: an operator
/// tool has no history of the node, so only a gross fault shows (a step, a stopped clock, a
/// clock several times fast); a node whose samples fail is left to its other checks.
async fn check_clock(node: &RedisNode, rules: ClockRules) -> Result<(), Rejection> {
    let watch = ClockWatch::new(rules);
    let Some(first) = node.sample_clock().await else {
        return Ok(());
    };
    watch.observe(first);
    tokio::time::sleep(CLOCK_PROBE_GAP).await;
    let Some(second) = node.sample_clock().await else {
        return Ok(());
    };
    match watch.observe(second) {
        Some(anomaly) => Err(Rejection::Abstaining(Abstention {
            remaining: rules.abstain_for,
            cause: AbstentionCause::Clock {
                anomaly,
                window: rules.abstain_for,
            },
        })),
        None => Ok(()),
    }
}

/// Once a quorum is admitted, the other checks still get as long again as that took, and
/// at least this (a loaded host resolves `localhost` and connects in tens of
/// milliseconds): two URLs of one server answer about as fast as each other, so a
/// duplicate is caught here rather than only counted as failed later, while a frozen node
/// delays `connect` by no more than the quorum took.
const ALIAS_GRACE: Duration = Duration::from_millis(100);

/// Checks every node at once, each in a task of its own so that a check still under way
/// when this returns goes on: until `quorum` of them are admitted and the others had the
/// grace of [`ALIAS_GRACE`], or all of them have answered (in strict mode, until all have
/// answered).
async fn hear_out(nodes: &[RedisNode], quorum: usize, strict: bool) -> Result<(), LockError> {
    let started = Instant::now();
    let mut grace_ends: Option<Instant> = None;
    let mut checks: FuturesUnordered<_> = nodes
        .iter()
        .cloned()
        .map(|node| tokio::spawn(async move { node.check().await }))
        .zip(nodes.iter().map(RedisNode::name))
        .map(|(check, name)| check.map(move |outcome| (name, outcome)))
        .collect();
    let mut admitted = 0;
    let mut refused: Vec<(&str, Refusal)> = Vec::new();
    loop {
        let next = match grace_ends {
            Some(end) => match tokio::time::timeout_at(end, checks.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => checks.next().await,
        };
        let Some((name, outcome)) = next else {
            break;
        };
        let outcome = outcome.unwrap_or_else(|_| {
            Err(Rejection::Failed(redis::RedisError::from(
                std::io::Error::other("the check of the node panicked"),
            )))
        });
        match outcome {
            Ok(()) => admitted += 1,
            Err(Rejection::Refused(refusal @ Refusal::SameServer { .. })) => {
                return Err(invalid(name, &refusal));
            }
            Err(Rejection::Refused(refusal)) if strict => return Err(invalid(name, &refusal)),
            // Said by the node itself, at error level (see `Link::settle`).
            Err(Rejection::Refused(refusal)) => refused.push((name, refusal)),
            Err(Rejection::Failed(reason)) => {
                tracing::warn!(node = %name, %reason, "node unreachable; it counts as failed until it answers");
            }
            // Said by the node itself, once per abstention (see `Link::settle`).
            Err(Rejection::Abstaining(_)) => {}
        }
        if nodes.len() - refused.len() < quorum {
            let (name, refusal) = &refused[0];
            let mut error = invalid(name, refusal);
            if let (LockError::InvalidNode { reason, .. }, true) = (&mut error, nodes.len() > 1) {
                reason.push_str(&format!(
                    "; with {} of {} members refused, no quorum of {quorum} can form",
                    refused.len(),
                    nodes.len()
                ));
            }
            return Err(error);
        }
        if admitted >= quorum && !strict && grace_ends.is_none() {
            let now = Instant::now();
            grace_ends = Some(now + (now - started).max(ALIAS_GRACE));
        }
    }
    Ok(())
}

/// The error of connecting to a member refused for `refusal`.
fn invalid(node: &str, refusal: &Refusal) -> LockError {
    LockError::InvalidNode {
        node: node.to_owned(),
        reason: refusal.to_string(),
    }
}
