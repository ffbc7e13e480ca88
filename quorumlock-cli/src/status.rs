//! `quorumlock status`: the lock as each node sees it, and whether they agree.

use std::time::Duration;

use futures::future::join_all;
use quorumlock::backend::redact_url;
use serde_json::{json, Value};

use crate::args::{GlobalArgs, StatusArgs};
use crate::duration::{format_duration, millis};
use crate::exit::{CliError, Kind, UNAVAILABLE};
use crate::nodes::{check_urls, lock_key, node_urls, operator_timeout, quorum};
use crate::output::Output;

/// What one node says about the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeView {
    /// The key holds this token; `ttl` is the time it has left (`None`: no expiry set,
    /// which no lock client does).
    Held {
        /// The stored value.
        token: String,
        /// `PTTL`, when the key has an expiry.
        ttl: Option<Duration>,
    },
    /// The key does not exist.
    Free,
    /// The node did not answer properly.
    Failed(String),
}

/// What the nodes say together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// One token is on a quorum of nodes.
    Held {
        /// The holder's token.
        token: String,
        /// On how many nodes.
        nodes: usize,
    },
    /// No node that answered has the key, and too few failed for a holder to hide among
    /// them.
    Free,
    /// Keys on some nodes, but no token on a quorum (and too few failures to change that).
    Split,
    /// Too many nodes failed to tell.
    Unknown,
}

impl Verdict {
    /// A stable name for JSON output.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Held { .. } => "held",
            Verdict::Free => "free",
            Verdict::Split => "split",
            Verdict::Unknown => "unknown",
        }
    }
}

/// Reads the lock on every node and reports; exit code 0, or 69 when the nodes that
/// answered cannot tell.
pub async fn status(global: &GlobalArgs, args: &StatusArgs, out: Output) -> Result<u8, CliError> {
    let key = lock_key(global, &args.resource)?;
    let urls = node_urls(global)?;
    let members = members(global, &urls)?;
    let budget = operator_timeout(global);
    // The family's sections read standalone members only (see `status_family`).
    let servers: Vec<Option<redis::Client>> = members
        .iter()
        .map(|member| match member {
            Member::Server(client) => Some(client.clone()),
            Member::Cluster(_) | Member::Sentinel(_) => None,
        })
        .collect();
    let family =
        crate::status_family::read(global, &args.resource, &key, args.permits, &servers, budget)
            .await?;
    let (views, placements): (Vec<NodeView>, Vec<Option<String>>) = join_all(
        members
            .into_iter()
            .map(|member| read_member(member, &key, budget)),
    )
    .await
    .into_iter()
    .unzip();
    let plain: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
    // Where the key lives, for cluster and Sentinel members: named after the member.
    let names: Vec<String> = plain
        .iter()
        .zip(&placements)
        .map(|(name, placement)| match placement {
            Some(placement) => format!("{name} ({placement})"),
            None => name.clone(),
        })
        .collect();
    let quorum = quorum(names.len());
    let verdict = verdict(&views, quorum);
    let agree = agree(&views);
    let mut json = report_json(
        &args.resource,
        &key,
        &plain,
        &views,
        quorum,
        &verdict,
        agree,
    );
    if let Some(nodes) = json["nodes"].as_array_mut() {
        for (node, placement) in nodes.iter_mut().zip(&placements) {
            node["placement"] = json!(placement);
        }
    }
    family.add_json(&mut json, &names);
    out.result(&json, || {
        let mut text = report_text(
            &args.resource,
            &key,
            &names,
            &views,
            quorum,
            &verdict,
            agree,
        );
        family.add_text(&mut text);
        text
    });
    if verdict == Verdict::Unknown {
        let failed = views
            .iter()
            .filter(|view| matches!(view, NodeView::Failed(_)))
            .count();
        out.error(
            &CliError::new(
                Kind::Unavailable,
                format!(
                    "cannot tell who holds {:?}: {failed} of {} nodes did not answer (quorum {quorum})",
                    args.resource,
                    names.len()
                ),
            )
            .hint(
                "check that the failed nodes are running and reachable, \
                 or raise --node-timeout if they are slow",
            ),
        );
        return Ok(UNAVAILABLE);
    }
    Ok(0)
}

/// How `status` reaches one member.
enum Member {
    /// A standalone server.
    Server(redis::Client),
    /// A Redis Cluster, through its seeds.
    Cluster(Vec<String>),
    /// The master a Sentinel names.
    Sentinel(redis::sentinel::SentinelClient),
}

/// The member behind each URL; a malformed URL is a configuration error (exit 78).
fn members(global: &GlobalArgs, urls: &[String]) -> Result<Vec<Member>, CliError> {
    urls.iter()
        .map(|url| {
            let invalid = |error: quorumlock::LockError| CliError::from_lock(&error);
            if let Some(seeds) = quorumlock::backend::cluster_seeds(url) {
                return seeds.map(Member::Cluster).map_err(invalid);
            }
            if let Some(sentinel) = quorumlock::backend::sentinel_client(url) {
                return sentinel.map(Member::Sentinel).map_err(invalid);
            }
            let mut client = check_urls(global, std::slice::from_ref(url))?;
            Ok(Member::Server(client.remove(0)))
        })
        .collect()
}

/// What `member` says of `key`, and where the key lives when that is not the URL's one
/// server: `slot S on HOST:PORT` on a cluster, `master HOST:PORT` behind a Sentinel.
async fn read_member(member: Member, key: &str, budget: Duration) -> (NodeView, Option<String>) {
    match member {
        Member::Server(client) => (read_node(client, key, budget).await, None),
        Member::Sentinel(mut sentinel) => match within(budget, sentinel.async_get_client()).await {
            Err(failed) => (failed, None),
            Ok(client) => {
                let placement = format!("master {}", client.get_connection_info().addr());
                (read_node(client, key, budget).await, Some(placement))
            }
        },
        Member::Cluster(seeds) => match within(budget, read_cluster(seeds, key)).await {
            Err(failed) => (failed, None),
            Ok((view, placement)) => (view, Some(placement)),
        },
    }
}

/// `request`'s answer within `budget`, or the failed view that says why not.
async fn within<T>(
    budget: Duration,
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, NodeView> {
    match tokio::time::timeout(budget, request).await {
        Err(_) => Err(NodeView::Failed(format!(
            "timed out after {}",
            format_duration(budget)
        ))),
        Ok(Err(error)) => Err(NodeView::Failed(error.to_string())),
        Ok(Ok(answer)) => Ok(answer),
    }
}

/// `GET` and `PTTL` of `key` (two plain commands in one pipeline), as a node's view.
async fn get_and_pttl(
    connection: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> redis::RedisResult<NodeView> {
    let (value, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .cmd("GET")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query_async(connection)
        .await?;
    Ok(view_of(value, pttl))
}

/// `GET`, `PTTL` and the master of `key`'s slot (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`) on the
/// cluster of `seeds`.
async fn read_cluster(seeds: Vec<String>, key: &str) -> redis::RedisResult<(NodeView, String)> {
    let client = redis::cluster::ClusterClient::new(seeds)?;
    let mut connection = client.get_async_connection().await?;
    let view = get_and_pttl(&mut connection, key).await?;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut connection)
        .await?;
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut connection)
        .await?;
    let master = slot_master(&slots, slot).unwrap_or_else(|| "no master".to_owned());
    Ok((view, format!("slot {slot} on {master}")))
}

/// `host:port` of the master serving `slot` in a `CLUSTER SLOTS` reply.
fn slot_master(slots: &redis::Value, slot: u16) -> Option<String> {
    use redis::Value as V;
    let V::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let V::Array(fields) = range else {
            return None;
        };
        let int = |value: Option<&V>| match value {
            Some(V::Int(n)) => Some(*n),
            _ => None,
        };
        let (first, last) = (int(fields.first())?, int(fields.get(1))?);
        if !(first..=last).contains(&i64::from(slot)) {
            return None;
        }
        let Some(V::Array(master)) = fields.get(2) else {
            return None;
        };
        let host = match master.first()? {
            V::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            V::SimpleString(host) => host.clone(),
            _ => return None,
        };
        Some(format!("{host}:{}", int(master.get(1))?))
    })
}

/// A node's view from the replies to `GET` and `PTTL`.
fn view_of(value: Option<Vec<u8>>, pttl: i64) -> NodeView {
    match (value, pttl) {
        (None, _) | (Some(_), -2) => NodeView::Free,
        (Some(value), pttl) => NodeView::Held {
            token: String::from_utf8_lossy(&value).into_owned(),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        },
    }
}

/// `GET` and `PTTL` of `key` on one node, within `budget` (connection included).
///
/// Two plain commands in one pipeline, no `MULTI`/`EXEC`: a lock's user needs no
/// transaction rights (docs/operations.md, "ACL users"). A key that expires between the
/// two reads (`PTTL` -2) is reported free, as it is by then.
pub(crate) async fn read_node(client: redis::Client, key: &str, budget: Duration) -> NodeView {
    let query = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        get_and_pttl(&mut connection, key).await
    };
    within(budget, query).await.unwrap_or_else(|failed| failed)
}

/// Decides what the nodes say together; see [`Verdict`].
pub fn verdict(views: &[NodeView], quorum: usize) -> Verdict {
    let failed = views
        .iter()
        .filter(|view| matches!(view, NodeView::Failed(_)))
        .count();
    let mut best: Option<(&str, usize)> = None;
    for view in views {
        if let NodeView::Held { token, .. } = view {
            let count = holders(views, token);
            if best.is_none_or(|(_, most)| count > most) {
                best = Some((token, count));
            }
        }
    }
    let most = best.map_or(0, |(_, count)| count);
    match best {
        Some((token, count)) if count >= quorum => Verdict::Held {
            token: token.to_owned(),
            nodes: count,
        },
        // A token could be on a quorum if the nodes that failed hold it.
        _ if most + failed >= quorum => Verdict::Unknown,
        Some(_) => Verdict::Split,
        None => Verdict::Free,
    }
}

/// On how many nodes `token` is stored.
fn holders(views: &[NodeView], token: &str) -> usize {
    views
        .iter()
        .filter(|view| matches!(view, NodeView::Held { token: held, .. } if held == token))
        .count()
}

/// Whether every node answered and all say the same: all free, or all the same token.
pub fn agree(views: &[NodeView]) -> bool {
    let stored = |view: &NodeView| match view {
        NodeView::Held { token, .. } => Some(Some(token.clone())),
        NodeView::Free => Some(None),
        NodeView::Failed(_) => None,
    };
    let Some(first) = views.first().map(stored) else {
        return false;
    };
    first.is_some() && views.iter().all(|view| stored(view) == first)
}

/// The report as JSON, for `--json`.
fn report_json(
    resource: &str,
    key: &str,
    names: &[String],
    views: &[NodeView],
    quorum: usize,
    verdict: &Verdict,
    agree: bool,
) -> Value {
    let nodes: Vec<Value> = names
        .iter()
        .zip(views)
        .map(|(name, view)| match view {
            NodeView::Held { token, ttl } => json!({
                "node": name, "state": "held", "token": token,
                "ttl_ms": ttl.map(millis), "error": null,
            }),
            NodeView::Free => json!({
                "node": name, "state": "free", "token": null, "ttl_ms": null, "error": null,
            }),
            NodeView::Failed(error) => json!({
                "node": name, "state": "failed", "token": null, "ttl_ms": null, "error": error,
            }),
        })
        .collect();
    let (holder, holding) = match verdict {
        Verdict::Held { token, nodes } => (Some(token.as_str()), *nodes),
        _ => (None, 0),
    };
    json!({
        "resource": resource,
        "key": key,
        "verdict": verdict.name(),
        "holder": holder,
        "holding_nodes": holding,
        "node_count": names.len(),
        "quorum": quorum,
        "answered": views.iter().filter(|view| !matches!(view, NodeView::Failed(_))).count(),
        "agree": agree,
        "nodes": nodes,
    })
}

/// The report as text: one line per node, then the verdict.
fn report_text(
    resource: &str,
    key: &str,
    names: &[String],
    views: &[NodeView],
    quorum: usize,
    verdict: &Verdict,
    agree: bool,
) -> String {
    let total = names.len();
    let mut text = format!("lock {resource:?}");
    if key != resource {
        text.push_str(&format!(" (key {key:?})"));
    }
    text.push_str(&format!(" on {total} node(s), quorum {quorum}\n"));
    let width = names.iter().map(String::len).max().unwrap_or(0);
    for (name, view) in names.iter().zip(views) {
        let state = match view {
            NodeView::Held { token, ttl } => {
                let ttl = ttl.map_or("no expiry".to_owned(), |ttl| {
                    format!("{} left", format_duration(ttl))
                });
                format!("{token}  {ttl}")
            }
            NodeView::Free => "-".to_owned(),
            NodeView::Failed(error) => format!("failed: {error}"),
        };
        text.push_str(&format!("  {name:width$}  {state}\n"));
    }
    let summary = match verdict {
        Verdict::Held { token, nodes } => {
            format!("held by {token} on {nodes}/{total} nodes (quorum {quorum})")
        }
        Verdict::Free => "free".to_owned(),
        Verdict::Split => format!(
            "split: no token is on a quorum ({quorum} of {total}); an acquisition, release or \
             expiry may be in progress, or a node lost its keys"
        ),
        Verdict::Unknown => {
            format!("unknown: too few nodes answered to tell (quorum {quorum} of {total})")
        }
    };
    text.push_str(&summary);
    let failed = views
        .iter()
        .filter(|view| matches!(view, NodeView::Failed(_)))
        .count();
    if failed > 0 {
        text.push_str(&format!("; {failed} node(s) did not answer"));
    } else if !agree && matches!(verdict, Verdict::Held { .. }) {
        text.push_str("; the nodes disagree");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &str) -> NodeView {
        NodeView::Held {
            token: token.to_owned(),
            ttl: Some(Duration::from_secs(10)),
        }
    }

    fn failed() -> NodeView {
        NodeView::Failed("connection refused".to_owned())
    }

    #[test]
    fn a_token_on_a_quorum_holds_the_lock() {
        let views = [held("a"), held("a"), NodeView::Free];
        assert_eq!(
            verdict(&views, 2),
            Verdict::Held {
                token: "a".into(),
                nodes: 2
            }
        );
        assert!(!agree(&views));
        let views = [held("a"), held("a"), held("a")];
        assert!(agree(&views));
        let views = [held("a"), held("a"), failed()];
        assert!(matches!(verdict(&views, 2), Verdict::Held { nodes: 2, .. }));
    }

    #[test]
    fn free_needs_enough_answers() {
        let views = [NodeView::Free, NodeView::Free, NodeView::Free];
        assert_eq!(verdict(&views, 2), Verdict::Free);
        assert!(agree(&views));
        // One failure cannot hide a quorum of two.
        let views = [NodeView::Free, NodeView::Free, failed()];
        assert_eq!(verdict(&views, 2), Verdict::Free);
        assert!(!agree(&views));
        // Two failures could.
        let views = [NodeView::Free, failed(), failed()];
        assert_eq!(verdict(&views, 2), Verdict::Unknown);
    }

    #[test]
    fn keys_without_a_quorum_are_split_or_unknown() {
        let views = [held("a"), NodeView::Free, NodeView::Free];
        assert_eq!(verdict(&views, 2), Verdict::Split);
        let views = [held("a"), held("b"), NodeView::Free];
        assert_eq!(verdict(&views, 2), Verdict::Split);
        // "a" may also be on the failed node.
        let views = [held("a"), NodeView::Free, failed()];
        assert_eq!(verdict(&views, 2), Verdict::Unknown);
        let views = [held("a"), held("b"), held("b"), NodeView::Free, failed()];
        assert_eq!(verdict(&views, 3), Verdict::Unknown);
        let views = [
            held("a"),
            held("b"),
            held("c"),
            NodeView::Free,
            NodeView::Free,
        ];
        assert_eq!(verdict(&views, 3), Verdict::Split);
    }

    #[test]
    fn a_single_node_decides_alone() {
        assert_eq!(verdict(&[NodeView::Free], 1), Verdict::Free);
        assert_eq!(verdict(&[failed()], 1), Verdict::Unknown);
        assert!(matches!(verdict(&[held("a")], 1), Verdict::Held { .. }));
    }

    #[test]
    fn reports_name_the_holder() {
        let names = vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()];
        let views = [held("tok"), failed()];
        let verdict = verdict(&views, 2);
        let text = report_text("job", "job", &names, &views, 2, &verdict, false);
        assert!(text.contains("redis://a:1  tok  10s left"), "{text}");
        assert!(text.contains("failed: connection refused"), "{text}");
        assert!(text.contains("unknown"), "{text}");
        let value = report_json("job", "job", &names, &views, 2, &verdict, false);
        assert_eq!(value["verdict"], "unknown");
        assert_eq!(value["nodes"][0]["token"], "tok");
        assert_eq!(value["nodes"][0]["ttl_ms"], 10_000);
        assert_eq!(value["nodes"][1]["state"], "failed");
    }
}
