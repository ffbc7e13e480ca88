//! [`NodeHints`]: what the coordinator may assume about how a node handles requests.

/// Hints about how a node handles requests, which let the coordinator save work. Nothing
/// depends on them for correctness: [`NodeHints::new`] claims nothing, and is always right.
///
/// ```
/// # use quorumlock::node::NodeHints;
/// let hints = NodeHints::new().sends_when_polled(true);
/// assert!(hints.sends_when_polled);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHints {
    /// Whether a request to this node goes out when its future is first polled, and then
    /// takes effect on the node whether or not anybody awaits its answer: true for a
    /// connected Redis node, whose request is one command queued on the open connection.
    ///
    /// The coordinator then leaves the requests whose answers it no longer needs (the
    /// last nodes of a decided lock or unlock round) unawaited, instead of driving them to
    /// the end in a background task.
    pub sends_when_polled: bool,
    /// Whether the node applies this client's requests in the order they were sent: true
    /// for a Redis server over one connection; false for a Redis Cluster, whose client
    /// routes each request on its own.
    ///
    /// Where it is false, a release hears every node out, and waits until the late lock
    /// requests of its acquisition were undone, before it returns: else an unlock still in
    /// flight could land after the holder's next lock request, and refuse it.
    pub applies_in_order: bool,
}

impl NodeHints {
    /// Hints that claim nothing.
    pub const fn new() -> Self {
        NodeHints {
            sends_when_polled: false,
            applies_in_order: false,
        }
    }

    /// These hints, with [`applies_in_order`](Self::applies_in_order) set to `in_order`.
    pub const fn applies_in_order(mut self, in_order: bool) -> Self {
        self.applies_in_order = in_order;
        self
    }

    /// These hints, with [`sends_when_polled`](Self::sends_when_polled) set to `sends`.
    pub const fn sends_when_polled(mut self, sends: bool) -> Self {
        self.sends_when_polled = sends;
        self
    }
}
