//! [`Round`]: the requests one operation sends to the nodes at once, under one deadline;
//! and the background, where the rounds and remainders nobody awaits run.
//!
//! Every request of a round starts at the same moment with the same per-node timeout, so
//! one timer serves the whole round: when it fires, each node that has not answered yet
//! counts as timed out and its request is abandoned. (A timer per request costs a
//! registration in tokio's timer wheel for every node of every round, for nothing.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::{Instant, Sleep};

use crate::error::NodeError;
use crate::node::LockNode;

/// The nodes of a lock, shared by every lock instance derived from the same connections.
pub(crate) type NodeSet = Arc<[Arc<dyn LockNode>]>;

/// A node's index, its answer, and how long after the round started it came.
pub(crate) type Reply<T> = (usize, Result<T, NodeError>, Duration);

/// Requests in flight to some of the nodes, all bounded by one deadline.
pub(crate) struct Round<T> {
    requests: FuturesUnordered<BoxFuture<'static, (usize, Result<T, NodeError>)>>,
    /// The nodes that have not answered yet, in the order they were asked.
    waiting_on: Vec<usize>,
    started: Instant,
    timeout: Duration,
    /// Made on the first wait, so a round whose answers are all ready needs no timer.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T: Send + 'static> Round<T> {
    /// Sends nothing yet: each request goes out when the round is first polled. Has room
    /// for requests to `nodes` nodes.
    fn with_capacity(timeout: Duration, nodes: usize) -> Self {
        Round {
            requests: FuturesUnordered::new(),
            waiting_on: Vec::with_capacity(nodes),
            started: Instant::now(),
            timeout,
            deadline: None,
        }
    }

    /// Sends one request to each node of `nodes` at `indices`, under one `timeout`. The
    /// requests own their data, so the stragglers of a round can outlive it.
    pub(crate) fn fan_out<F, R>(
        nodes: &[Arc<dyn LockNode>],
        indices: impl IntoIterator<Item = usize>,
        timeout: Duration,
        request: F,
    ) -> Self
    where
        F: Fn(Arc<dyn LockNode>) -> R,
        R: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let mut round = Round::with_capacity(timeout, nodes.len());
        for index in indices {
            round.push(index, request(Arc::clone(&nodes[index])));
        }
        round
    }

    /// Adds the request to node `index`.
    pub(crate) fn push(
        &mut self,
        index: usize,
        request: impl Future<Output = Result<T, NodeError>> + Send + 'static,
    ) {
        self.waiting_on.push(index);
        self.requests
            .push(async move { (index, request.await) }.boxed());
    }

    /// How many nodes have not answered yet.
    pub(crate) fn len(&self) -> usize {
        self.waiting_on.len()
    }

    /// The nodes that have not answered yet.
    pub(crate) fn pending(&self) -> &[usize] {
        &self.waiting_on
    }

    /// Whether every node answered (or timed out).
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting_on.is_empty()
    }

    /// The next answer, in the order they come; once the deadline passed, each node still
    /// silent answers [`NodeError::Timeout`]. `None` when no node is left.
    pub(crate) async fn next(&mut self) -> Option<Reply<T>> {
        let started = self.started;
        let timeout = self.timeout;
        loop {
            if self.waiting_on.is_empty() {
                return None;
            }
            // A deadline too far off to compute never fires, which is what it would do.
            let deadline = self.deadline.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep_until(
                    started.checked_add(timeout).unwrap_or_else(far_future),
                ))
            });
            let answered = tokio::select! {
                biased;
                Some(answered) = self.requests.next() => Some(answered),
                () = deadline.as_mut() => None,
            };
            match answered {
                Some((index, reply)) => {
                    // A node already counted as timed out may still answer: ignore it.
                    let Some(position) = self.waiting_on.iter().position(|&i| i == index) else {
                        continue;
                    };
                    self.waiting_on.remove(position);
                    return Some((index, reply, started.elapsed()));
                }
                None => {
                    // Past the deadline: the silent nodes time out, one answer each.
                    let index = self.waiting_on.remove(0);
                    if self.waiting_on.is_empty() {
                        self.requests = FuturesUnordered::new();
                    }
                    return Some((index, Err(NodeError::Timeout(timeout)), timeout));
                }
            }
        }
    }

    /// Waits for every answer, discarding them: lets the requests of a decided round reach
    /// their nodes (a request never polled has not been sent).
    pub(crate) async fn finish(mut self) {
        while self.next().await.is_some() {}
    }
}

/// An instant so far off that no round lasts until then: a year from now (a day, should
/// the clock not reach a year further).
fn far_future() -> Instant {
    let now = Instant::now();
    let day = Duration::from_secs(24 * 60 * 60);
    now.checked_add(day * 365)
        .or_else(|| now.checked_add(day))
        .unwrap_or(now)
}

/// Runs `future` (what is left of a round, or rounds that nobody awaits) on the current
/// tokio runtime without waiting for it; does nothing outside a runtime (the lock keys then
/// expire by their TTL).
pub(crate) fn spawn_detached(future: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn(future));
    }
}
