//! [`Unawaited`]: requests to a node that nobody awaits any more, driven to their answer by
//! one long-lived task per node so that they still go out.
//!
//! redis-rs queues a request for its connection's writer when the request is first polled,
//! and the writer skips a queued request whose answer nobody waits for any more. A lock
//! round decided by a quorum leaves the last nodes' requests unawaited, and they must still
//! reach their nodes: a late `SET` must land before the release's unlock that follows it
//! on the same connection, and a release's last unlocks must delete the keys. Handing each
//! such request to the node's keeper task makes that so without a task per round.
//!
//! The keeper is bounded (see [`Bounds`]): a node that stopped answering would otherwise
//! collect every round's last request, without end, and receive them all at once when it
//! answers again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{RedisResult, Value};
use tokio::sync::mpsc;
use tokio::time::{Instant, Timeout};

use crate::metrics::Counters;
use crate::woken::Woken;

/// A request to the node, owning what it sends.
pub(super) type Request = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// Where one node's unawaited requests go: its keeper task, which awaits each to the end,
/// within bounds.
#[derive(Clone)]
pub(super) struct Unawaited {
    keeper: mpsc::UnboundedSender<(Instant, Request)>,
    /// How long after it went out a dropped lock request is still handed over: a request
    /// dropped later was abandoned for its slowness, and is let go (see [`Awaited`]).
    patience: Duration,
}

/// How long the keeper awaits a request, and how many it holds at once: past either it
/// drops them (counted), so that a node that stopped answering costs bounded memory and
/// receives no burst of stale requests when it answers again.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// From when the request was handed over.
    pub(super) kept_for: Duration,
    pub(super) most: usize,
}

impl Unawaited {
    /// Starts the node's keeper task, which ends once every handle is gone and every
    /// request handed to it is answered or dropped. Needs a tokio runtime; without one,
    /// requests dropped unanswered are simply dropped (redis-rs may then skip them).
    pub(super) fn start(patience: Duration, bounds: Bounds, counters: Arc<Counters>) -> Self {
        let (keeper, requests) = mpsc::unbounded_channel();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(keep(requests, bounds, counters)));
        }
        Unawaited { keeper, patience }
    }

    /// Hands `request` to the keeper.
    fn keep(&self, request: Request) {
        // Refused only when the keeper is gone (the runtime shut down): nothing to do then.
        let _ = self.keeper.send((Instant::now(), request));
    }
}

/// The keeper: awaits every request it is handed until answered, for at most
/// `bounds.kept_for` and at most `bounds.most` at once, and drops the answers.
async fn keep(
    mut handed: mpsc::UnboundedReceiver<(Instant, Request)>,
    bounds: Bounds,
    counters: Arc<Counters>,
) {
    let mut requests = Kept::default();
    let drop_one = || Counters::bump(&counters.unawaited_dropped);
    loop {
        // Unbiased: under a burst, neither new requests nor answers wait on the other.
        tokio::select! {
            request = handed.recv() => match request {
                Some((handed_at, request)) => {
                    if requests.len() >= bounds.most {
                        drop_one();
                        continue;
                    }
                    let until = handed_at.checked_add(bounds.kept_for).unwrap_or(handed_at);
                    requests.push(tokio::time::timeout_at(until, request));
                }
                None => break,
            },
            timed_out = requests.next_answer(), if requests.len() > 0 => {
                if timed_out {
                    drop_one();
                }
            }
        }
    }
    while requests.len() > 0 {
        if requests.next_answer().await {
            drop_one();
        }
    }
}

/// The requests the keeper awaits, each polled only once woken: not a `FuturesUnordered`,
/// which wakes its own task (a thread wake-up for every round a quorum decided); see
/// [`Woken`].
struct Kept(Woken<Pin<Box<Timeout<Request>>>>);

impl Default for Kept {
    fn default() -> Self {
        Kept(Woken::with_capacity(0))
    }
}

impl Kept {
    fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds `request`, to be polled (and so sent, if it was not yet) on the next wait.
    fn push(&mut self, request: Timeout<Request>) {
        self.0.push(Box::pin(request));
    }

    /// Waits until one request ends, and says whether it ran out of time; pending while
    /// none is held.
    async fn next_answer(&mut self) -> bool {
        let (_, answer) = futures::future::poll_fn(|cx| self.0.poll_woken(cx)).await;
        answer.is_err()
    }
}

/// Whether a request dropped unanswered is still driven to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// While the node's patience lasts: a lock request.
    WhilePatient,
    /// Always (within the keeper's bounds): an unlock, an extension, a queue exit, a
    /// counter raise, whose loss would leave state behind on the node.
    Always,
}

/// A request being awaited: if dropped once sent and before its answer, it is handed to
/// its node's [`Unawaited`] keeper instead of being cancelled.
///
/// A lock request only while the node's patience lasts: one dropped because it timed out (a
/// round gave up on a slow node) is cancelled, so that an overloaded node sheds the
/// requests nobody can use instead of being sent every one of them late. A request that
/// undoes or keeps up state ([`Keep::Always`]) is always handed over: an unlock that a
/// decided release, or a timed-out rollback, no longer awaits must still delete the key,
/// with its script reload or reconnect (the request is the whole operation).
pub(super) struct Awaited<'a> {
    request: Option<Request>,
    keep: Keep,
    /// When it was made (its first poll follows at once), and whether it was polled, and so
    /// queued for the writer (or waiting for a connection).
    made: Instant,
    polled: bool,
    unawaited: &'a Unawaited,
}

impl<'a> Awaited<'a> {
    /// `made` is when the request was made, which its caller knows already: one clock read
    /// per request, not two.
    pub(super) fn new(
        request: Request,
        made: Instant,
        keep: Keep,
        unawaited: &'a Unawaited,
    ) -> Self {
        Awaited {
            request: Some(request),
            keep,
            made,
            polled: false,
            unawaited,
        }
    }
}

impl Future for Awaited<'_> {
    type Output = RedisResult<Value>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(request) = this.request.as_mut() else {
            // Polled after it answered: a caller bug, reported, not a panic.
            return Poll::Ready(Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a node request polled after its answer",
            ))));
        };
        this.polled = true;
        let answer = request.as_mut().poll(context);
        if answer.is_ready() {
            this.request = None;
        }
        answer
    }
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        // A request never polled never went out, and nothing needs it to.
        let wanted = self.polled
            && (self.keep == Keep::Always || self.made.elapsed() < self.unawaited.patience);
        if let Some(request) = self.request.take().filter(|_| wanted) {
            self.unawaited.keep(request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    use crate::fan_out::tests::Wakes;

    fn kept(
        request: impl Future<Output = RedisResult<Value>> + Send + 'static,
    ) -> Timeout<Request> {
        let request: Request = Box::pin(request);
        tokio::time::timeout(Duration::from_secs(60), request)
    }

    fn silent() -> Timeout<Request> {
        kept(futures::future::pending())
    }

    #[tokio::test]
    async fn the_keeper_handed_a_request_does_not_wake_its_own_task() {
        // See `Kept`: a self-wake costs a thread wake-up on the multi-thread runtime.
        let mut held = Kept::default();
        held.push(silent());
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut next = std::pin::pin!(held.next_answer());
        assert!(next
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        assert_eq!(wakes.count(), 0, "the keeper woke its own task");
    }

    #[tokio::test(start_paused = true)]
    async fn the_keeper_polls_each_request_it_holds_until_it_ends() {
        let mut held = Kept::default();
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        held.push(silent());
        held.push(kept(async move {
            answered.await.expect("sent");
            Ok(Value::Okay)
        }));
        answer.send(()).expect("waiting");
        assert!(!held.next_answer().await, "answered, not timed out");
        assert_eq!(held.len(), 1);
        assert!(held.next_answer().await, "the silent one times out");
        assert_eq!(held.len(), 0);
    }
}
