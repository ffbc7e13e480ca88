//! [`Unawaited`]: requests to a node that nobody awaits any more, driven to their answer by
//! one long-lived task per node so that they still go out.
//!
//! redis-rs queues a request for its connection's writer when the request is first polled,
//! and the writer skips a queued request whose answer nobody waits for any more. A lock
//! round decided by a quorum leaves the last nodes' requests unawaited, and they must still
//! reach their nodes: a late `SET` must land before the release's unlock that follows it
//! on the same connection, and a release's last unlocks must delete the keys. Handing each
//! such request to the node's keeper task makes that so without a task per round.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use redis::{RedisResult, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A request to the node, owning what it sends.
pub(super) type Request = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// Where one node's unawaited requests go: its keeper task, which awaits each to the end.
#[derive(Clone)]
pub(super) struct Unawaited {
    keeper: mpsc::UnboundedSender<Request>,
    /// How long after it went out a dropped request is still handed over: a request
    /// dropped later was abandoned for its slowness, and is let go (see [`Awaited`]).
    patience: Duration,
}

impl Unawaited {
    /// Starts the node's keeper task, which ends once every handle is gone and every
    /// request handed to it is answered. Needs a tokio runtime; without one, requests
    /// dropped unanswered are simply dropped (redis-rs may then skip them).
    pub(super) fn start(patience: Duration) -> Self {
        let (keeper, requests) = mpsc::unbounded_channel();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(keep(requests)));
        }
        Unawaited { keeper, patience }
    }

    /// Hands `request` to the keeper.
    fn keep(&self, request: Request) {
        // Refused only when the keeper is gone (the runtime shut down): nothing to do then.
        let _ = self.keeper.send(request);
    }
}

/// The keeper: awaits every request it is handed until answered, and drops the answers.
async fn keep(mut handed: mpsc::UnboundedReceiver<Request>) {
    let mut requests = FuturesUnordered::new();
    loop {
        tokio::select! {
            request = handed.recv() => match request {
                Some(request) => requests.push(request),
                None => break,
            },
            Some(_answer) = requests.next(), if !requests.is_empty() => {}
        }
    }
    while requests.next().await.is_some() {}
}

/// A request being awaited: if dropped once sent and before its answer, it is handed to
/// its node's [`Unawaited`] keeper instead of being cancelled.
///
/// Only while the node's patience lasts: a request dropped because it timed out (a round
/// gave up on a slow node) is cancelled, as before, so that an overloaded node sheds the
/// requests nobody can use instead of being sent every one of them late.
pub(super) struct Awaited<'a> {
    request: Option<Request>,
    /// When it was first polled, and so queued for the writer (or waiting for a connection).
    polled: Option<Instant>,
    unawaited: &'a Unawaited,
}

impl<'a> Awaited<'a> {
    pub(super) fn new(request: Request, unawaited: &'a Unawaited) -> Self {
        Awaited {
            request: Some(request),
            polled: None,
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
        this.polled.get_or_insert_with(Instant::now);
        let answer = request.as_mut().poll(context);
        if answer.is_ready() {
            this.request = None;
        }
        answer
    }
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            // Never polled: it never went out, and nothing needs it to.
            if let Some(polled) = self.polled {
                if polled.elapsed() < self.unawaited.patience {
                    self.unawaited.keep(request);
                }
            }
        }
    }
}
