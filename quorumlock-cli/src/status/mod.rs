//! `quorumlock status`: the lock as each node sees it, and whether they agree.
//!
//! Layers, each file using only those below it: [`view`] (a node's answer and the verdict of
//! all), [`read`] (asking one member), [`readers_and_permits`] (the lock family's sections),
//! and this command, which reads, decides and reports.

mod read;
mod readers_and_permits;
mod view;

use futures::future::join_all;
use quorumlock::backend::{check_members, MemberCheck, NodeClient};
use quorumlock::LockConfig;
use serde_json::{json, Value};

use crate::args::{GlobalArgs, StatusArgs};
use crate::duration::{format_duration, millis};
use crate::exit::{CliError, Kind, UNAVAILABLE};
use crate::nodes::{check_urls, lock_key, node_urls, operator_timeout};
use crate::output::Output;

use self::read::{members, read_member};
use self::readers_and_permits::ReadersAndPermits;
use self::view::{agree, verdict, NodeView, Verdict};

/// A member's view, unless a lock would not count the member: a replica's copy of the key,
/// or the key on a server that abstains after a restart, is no vote.
fn standing(view: NodeView, check: MemberCheck) -> NodeView {
    match check {
        MemberCheck::Refused(why) => NodeView::Failed(format!("refused: {why}")),
        MemberCheck::Abstaining(why) => NodeView::Failed(why),
        _ => view,
    }
}

/// Reads the lock on every node and reports; exit code 0, or 69 when the nodes that
/// answered cannot tell.
pub async fn status(global: &GlobalArgs, args: &StatusArgs, out: Output) -> Result<u8, CliError> {
    let key = lock_key(global, &args.resource)?;
    let urls = node_urls(global)?;
    let (plain, members) = members(global, &urls)?;
    let budget = operator_timeout(global);
    // The family's sections read standalone members only (see `readers_and_permits`).
    let servers: Vec<Option<redis::Client>> = members
        .iter()
        .map(|member| match member {
            NodeClient::Server(client) => Some(client.clone()),
            _ => None,
        })
        .collect();
    // The lock family's sections, the key on each member, and how each member stands (a
    // member a lock would not count must not count here), all at once: a frozen node costs
    // one budget, not one per read.
    let mut nodes = check_urls(global, &urls)?;
    if global.connect_timeout.is_none() {
        nodes = nodes.connect_timeout(budget);
    }
    let config = LockConfig::default();
    let (family, reads, checks) = tokio::join!(
        ReadersAndPermits::read(global, &args.resource, &key, args.permits, &servers, budget),
        join_all(
            members
                .into_iter()
                .map(|member| read_member(member, &key, budget)),
        ),
        check_members(&nodes, &config),
    );
    let family = family?;
    let checks = checks.map_err(|error| CliError::from_lock(&error))?;
    let (views, placements): (Vec<NodeView>, Vec<Option<String>>) = reads
        .into_iter()
        .zip(checks)
        .map(|((view, placement), check)| (standing(view, check), placement))
        .unzip();
    // Where the key lives, for cluster and Sentinel members: named after the member.
    let names: Vec<String> = plain
        .iter()
        .zip(&placements)
        .map(|(name, placement)| match placement {
            Some(placement) => format!("{name} ({placement})"),
            None => name.clone(),
        })
        .collect();
    let quorum = quorumlock::quorum_of(names.len());
    let verdict = verdict(&views, quorum);
    let report = Report {
        resource: &args.resource,
        key: &key,
        views: &views,
        quorum,
        verdict: &verdict,
        agree: agree(&views),
        others: family.holders(),
        permits_read: family.permits_read(),
    };
    let mut json = report.json(&plain);
    if let Some(nodes) = json["nodes"].as_array_mut() {
        for (node, placement) in nodes.iter_mut().zip(&placements) {
            node["placement"] = json!(placement);
        }
    }
    family.add_json(&mut json, &names);
    out.result(&json, || {
        let mut text = report.text(&names);
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

/// What the nodes said of the lock, for the report in either form.
struct Report<'a> {
    resource: &'a str,
    key: &'a str,
    views: &'a [NodeView],
    quorum: usize,
    verdict: &'a Verdict,
    agree: bool,
    /// Who holds the name other than an exclusive holder (readers, permits), if anyone:
    /// the key's verdict is the exclusive side's alone, and "free" would not be true.
    others: Option<String>,
    /// Whether the permits were read, so that "free" may say they were not.
    permits_read: bool,
}

impl Report<'_> {
    /// The report as JSON, for `--json`, the nodes under `names`.
    fn json(&self, names: &[String]) -> Value {
        let nodes: Vec<Value> = names
            .iter()
            .zip(self.views)
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
        let (holder, holding) = match self.verdict {
            Verdict::Held { token, nodes } => (Some(token.as_str()), *nodes),
            _ => (None, 0),
        };
        json!({
            "resource": self.resource,
            "key": self.key,
            "verdict": self.verdict.name(),
            "holder": holder,
            "holding_nodes": holding,
            "node_count": names.len(),
            "quorum": self.quorum,
            "answered": self.views.iter().filter(|view| !matches!(view, NodeView::Failed(_))).count(),
            "agree": self.agree,
            "nodes": nodes,
        })
    }

    /// The report as text: one line per node (under `names`), then the verdict.
    fn text(&self, names: &[String]) -> String {
        let (resource, key, quorum) = (self.resource, self.key, self.quorum);
        let total = names.len();
        let mut text = format!("lock {resource:?}");
        if key != resource {
            text.push_str(&format!(" (key {key:?})"));
        }
        text.push_str(&format!(" on {total} node(s), quorum {quorum}\n"));
        let width = names.iter().map(String::len).max().unwrap_or(0);
        for (name, view) in names.iter().zip(self.views) {
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
        let summary = match self.verdict {
            Verdict::Held { token, nodes } => {
                format!("held by {token} on {nodes}/{total} nodes (quorum {quorum})")
            }
            Verdict::Free => match (&self.others, self.permits_read) {
                (Some(others), _) => format!("{others}; no exclusive holder"),
                (None, true) => "free".to_owned(),
                // Permit slots are keys of their own, found only by their count.
                (None, false) => {
                    "free (no holder, no reader; permits are read with --permits K)".to_owned()
                }
            },
            Verdict::Split => format!(
                "split: no token is on a quorum ({quorum} of {total}); an acquisition, release or \
                 expiry may be in progress, or a node lost its keys"
            ),
            Verdict::Unknown => {
                format!("unknown: too few nodes answered to tell (quorum {quorum} of {total})")
            }
        };
        text.push_str(&summary);
        let failed = self
            .views
            .iter()
            .filter(|view| matches!(view, NodeView::Failed(_)))
            .count();
        if failed > 0 {
            text.push_str(&format!("; {failed} node(s) did not answer"));
        } else if !self.agree && matches!(self.verdict, Verdict::Held { .. }) {
            text.push_str("; the nodes disagree");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reports_name_the_holder() {
        let names = vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()];
        let views = [
            NodeView::Held {
                token: "tok".to_owned(),
                ttl: Some(Duration::from_secs(10)),
            },
            NodeView::Failed("connection refused".to_owned()),
        ];
        let verdict = verdict(&views, 2);
        let report = Report {
            resource: "job",
            key: "job",
            views: &views,
            quorum: 2,
            verdict: &verdict,
            agree: false,
            others: None,
            permits_read: false,
        };
        let text = report.text(&names);
        assert!(text.contains("redis://a:1  tok  10s left"), "{text}");
        assert!(text.contains("failed: connection refused"), "{text}");
        assert!(text.contains("unknown"), "{text}");
        let value = report.json(&names);
        assert_eq!(value["verdict"], "unknown");
        assert_eq!(value["nodes"][0]["token"], "tok");
        assert_eq!(value["nodes"][0]["ttl_ms"], 10_000);
        assert_eq!(value["nodes"][1]["state"], "failed");
    }

    #[test]
    fn a_name_held_by_readers_or_permits_is_not_free() {
        let names = vec!["redis://a:1".to_owned()];
        let views = [NodeView::Free];
        let verdict = verdict(&views, 1);
        let report = |others: Option<&str>, permits_read| Report {
            resource: "job",
            key: "job",
            views: &views,
            quorum: 1,
            verdict: &verdict,
            agree: true,
            others: others.map(str::to_owned),
            permits_read,
        };
        let text = report(Some("held by 2 reader(s)"), false).text(&names);
        let last = text.lines().last().unwrap();
        assert_eq!(last, "held by 2 reader(s); no exclusive holder");
        let text = report(None, false).text(&names);
        assert!(
            text.ends_with("permits are read with --permits K)"),
            "{text}"
        );
        assert!(report(None, true).text(&names).ends_with("\nfree"));
    }
}
