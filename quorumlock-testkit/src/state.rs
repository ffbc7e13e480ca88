//! [`NodeState`]: what the harness last did to a node, shared by both backends.

use std::fmt;

/// Lifecycle state of a node, as driven by the harness.
///
/// The state is what the harness last did to the node; a node that crashes on
/// its own still reports [`NodeState::Running`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// The node is serving requests.
    Running,
    /// The node is suspended (`SIGSTOP`, or a paused container): connections
    /// are accepted by the kernel but nothing is answered.
    Frozen,
    /// The node is not running: connections are refused.
    Stopped,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Running => "running",
            NodeState::Frozen => "frozen",
            NodeState::Stopped => "stopped",
        })
    }
}
