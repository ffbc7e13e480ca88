//! What `status` makes of the nodes' answers: each node's view of the key, and the verdict
//! of them together, for the lock and for each permit slot alike.

use std::time::Duration;

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
}
