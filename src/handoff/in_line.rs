//! [`InLine`]: a queued waiter as the nodes' lines know it.

use crate::token::LockToken;

/// A queued waiter as the nodes know it: its place's id, and its token when it takes grants
/// (a key granted to it is handed on when it leaves the line).
#[derive(Debug, Clone)]
pub(crate) struct InLine {
    /// [`QueuePlace::waiter`](crate::node::QueuePlace::waiter).
    pub(crate) waiter: LockToken,
    /// [`Grants::token`](super::Grants::token), once it sent a refresh that takes grants.
    pub(crate) token: Option<LockToken>,
}
