//! Fan-out: the requests one operation sends to the nodes at once, under one deadline
//! ([`Round`]); and the background, where the rounds and remainders nobody awaits run.
//! The coordinator's rounds (`quorum::votes`) and the hand-off's watches send through it.
//!
//! Every request of a round starts at the same moment with the same per-node timeout, so
//! one timer serves the whole round: when it fires, each node that has not answered yet
//! counts as timed out and its request is abandoned. (A timer per request costs a
//! registration in tokio's timer wheel for every node of every round, for nothing.)
//!
//! A round polls its few requests itself rather than through a `FuturesUnordered`, which,
//! having polled every future it holds and found all pending, wakes its own task to yield
//! it. On tokio's multi-thread runtime a task woken while it runs is rescheduled as a yield,
//! which wakes a parked worker: two futex calls and a thread hop per round, on every
//! acquire and release (see docs/design.md, "Where we wrote our own").
//!
//! Like a `FuturesUnordered`, though, each request has a waker of its own (see
//! [`Woken`]), so that a wake polls only the requests that were woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::{Instant, Sleep};

use crate::error::NodeError;
use crate::node::LockNode;
use crate::woken::Woken;

/// The nodes of a lock, shared by every lock instance derived from the same connections.
pub(crate) type NodeSet = Arc<[Arc<dyn LockNode>]>;

/// A node's index, its answer, and how long after the round started it came.
pub(crate) type Reply<T> = (usize, Result<T, NodeError>, Duration);

/// Requests in flight to some of the nodes, all bounded by one deadline.
pub(crate) struct Round<T> {
    /// The requests not answered yet, at the same positions as their nodes in
    /// `waiting_on`.
    requests: Woken<BoxFuture<'static, Result<T, NodeError>>>,
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
            requests: Woken::with_capacity(nodes),
            waiting_on: Vec::with_capacity(nodes),
            started: Instant::now(),
            timeout,
            deadline: None,
        }
    }

    /// Sends one request to each node of `nodes` at `indices`, under one `timeout`, made by
    /// `request` from the node's index and the node. The requests own their data, so the
    /// stragglers of a round can outlive it.
    pub(crate) fn fan_out<F, R>(
        nodes: &[Arc<dyn LockNode>],
        indices: impl IntoIterator<Item = usize>,
        timeout: Duration,
        request: F,
    ) -> Self
    where
        F: Fn(usize, Arc<dyn LockNode>) -> R,
        R: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let mut round = Round::with_capacity(timeout, nodes.len());
        for index in indices {
            round.push(index, request(index, Arc::clone(&nodes[index])));
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
        self.requests.push(request.boxed());
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
        if self.waiting_on.is_empty() {
            return None;
        }
        let Round {
            requests,
            waiting_on,
            started,
            timeout,
            deadline,
        } = self;
        let (started, timeout) = (*started, *timeout);
        // A deadline too far off to compute never fires, which is what it would do.
        let deadline = deadline.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(
                started.checked_add(timeout).unwrap_or_else(far_future),
            ))
        });
        // Cancel safety: an answer is taken from its request only when it is returned.
        futures::future::poll_fn(|cx| {
            if let Poll::Ready((position, reply)) = requests.poll_woken(cx) {
                let index = waiting_on.remove(position);
                return Poll::Ready(Some((index, reply, started.elapsed())));
            }
            if deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // Past the deadline: the silent nodes time out, one answer each, and their
            // requests are abandoned.
            requests.remove(0);
            let index = waiting_on.remove(0);
            Poll::Ready(Some((index, Err(NodeError::Timeout(timeout)), timeout)))
        })
        .await
    }

    /// Waits for every answer, discarding them: lets the requests of a decided round reach
    /// their nodes (a request never polled has not been sent).
    pub(crate) async fn finish(mut self) {
        while self.next().await.is_some() {}
    }
}

/// Polls every future of `futures` in turn, and removes and returns the first that is
/// ready, with its position; pending when none is (or there is none).
///
/// Unlike a `FuturesUnordered`, this never wakes the task itself: see the module's
/// documentation. Every future is polled on each wake, which suits the handful of nodes a
/// round or a set of watches has.
///
/// # Cancel safety
///
/// An output is taken from its future only when it is returned.
pub(crate) fn poll_first<F: Future + Unpin>(
    futures: &mut Vec<F>,
    cx: &mut Context<'_>,
) -> Poll<(usize, F::Output)> {
    for position in 0..futures.len() {
        if let Poll::Ready(output) = Pin::new(&mut futures[position]).poll(cx) {
            drop(futures.remove(position));
            return Poll::Ready((position, output));
        }
    }
    Poll::Pending
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts the wakes of the task that polls.
    #[derive(Default)]
    pub(crate) struct Wakes(AtomicUsize);

    impl Wakes {
        /// How many times the task was woken.
        pub(crate) fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A request that is pending until `answer` comes, counting its polls.
    fn counted(
        polls: &Arc<AtomicUsize>,
        answer: tokio::sync::oneshot::Receiver<usize>,
    ) -> impl Future<Output = Result<usize, NodeError>> + Send + 'static {
        let polls = Arc::clone(polls);
        let mut answer = answer;
        futures::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut answer)
                .poll(cx)
                .map(|answer| Ok(answer.expect("sent")))
        })
    }

    #[tokio::test]
    async fn a_wake_polls_only_the_request_that_was_woken() {
        let mut round: Round<usize> = Round::with_capacity(Duration::from_secs(60), 5);
        let polls: Vec<_> = (0..5).map(|_| Arc::new(AtomicUsize::new(0))).collect();
        let mut senders = Vec::new();
        for (index, polls) in polls.iter().enumerate() {
            let (sender, answer) = tokio::sync::oneshot::channel();
            senders.push(Some(sender));
            round.push(index, counted(polls, answer));
        }
        // Answered one at a time, last node first: each answer wakes the round once.
        for index in (0..5).rev() {
            senders[index]
                .take()
                .expect("once")
                .send(index)
                .expect("waiting");
            let (answered, reply, _) = round.next().await.expect("an answer");
            assert_eq!((answered, reply.ok()), (index, Some(index)));
        }
        let counts: Vec<usize> = polls.iter().map(|p| p.load(Ordering::SeqCst)).collect();
        // Each request: polled when first sent, and once more when its answer woke it (the
        // last node's answer was there at the first poll). Polling every request on each
        // wake makes it [5, 4, 3, 2, 1].
        assert_eq!(counts, [2, 2, 2, 2, 1], "polls per request");
    }

    #[tokio::test]
    async fn a_round_of_silent_nodes_does_not_wake_its_own_task() {
        // A self-wake makes tokio's multi-thread runtime reschedule the task as a yield,
        // through a parked worker: a futex call and a thread hop per round.
        let mut round: Round<()> = Round::with_capacity(Duration::from_secs(60), 3);
        for index in 0..3 {
            round.push(index, futures::future::pending());
        }
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut next = std::pin::pin!(round.next());
        assert!(next
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        assert_eq!(wakes.count(), 0, "the round woke its own task");
    }

    #[tokio::test]
    async fn a_round_answers_in_the_order_the_answers_come() {
        let mut round: Round<usize> = Round::with_capacity(Duration::from_secs(60), 2);
        let (first, first_answer) = tokio::sync::oneshot::channel();
        let (second, second_answer) = tokio::sync::oneshot::channel();
        round.push(0, async move { Ok(first_answer.await.expect("sent")) });
        round.push(1, async move { Ok(second_answer.await.expect("sent")) });
        second.send(20).expect("waiting");
        let (index, answer, _) = round.next().await.expect("an answer");
        assert_eq!((index, answer.ok()), (1, Some(20)));
        assert_eq!(round.pending(), [0]);
        first.send(10).expect("waiting");
        let (index, answer, _) = round.next().await.expect("an answer");
        assert_eq!((index, answer.ok()), (0, Some(10)));
        assert!(round.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn silent_nodes_time_out_one_answer_each() {
        let mut round: Round<()> = Round::with_capacity(Duration::from_millis(50), 2);
        round.push(3, futures::future::pending());
        round.push(4, futures::future::pending());
        for expected in [3, 4] {
            let (index, answer, after) = round.next().await.expect("a timeout");
            assert_eq!(index, expected);
            assert!(matches!(answer, Err(NodeError::Timeout(_))));
            assert_eq!(after, Duration::from_millis(50));
        }
        assert!(round.is_empty());
    }
}
