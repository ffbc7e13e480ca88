//! [`Unawaited`]: requests to a node that nobody awaits any more, kept until they are
//! answered so that they still go out.
//!
//! redis-rs queues a request for its connection's writer when the request is first polled,
//! and the writer skips a queued request whose answer nobody waits for any more. A lock
//! round decided by a quorum leaves the last nodes' requests unawaited, and they must still
//! reach their nodes: a late `SET` must land before the release's unlock that follows it
//! on the same connection, and a release's last unlocks must delete the keys. Keeping each
//! such request here until its answer comes (or until far more have been kept since) makes
//! that so without a task to await them.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use redis::{RedisResult, Value};

/// A request to the node, owning what it sends.
pub(super) type Request = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// The most requests one node keeps. Past it the oldest goes: a request kept that long was
/// taken by the connection's writer long ago, unless the node's connection is stuck, and
/// then the node is failing anyway.
const MOST_KEPT: usize = 4096;

/// The requests one node keeps; see the module documentation.
#[derive(Default)]
pub(super) struct Unawaited {
    requests: Mutex<VecDeque<Request>>,
}

impl Unawaited {
    /// Keeps `request` until it is answered, and lets go of those already answered.
    fn keep(&self, request: Request) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        // Polling needs the runtime (a failed request may start a reconnect); without one,
        // answered requests are let go of on a later call.
        if tokio::runtime::Handle::try_current().is_ok() {
            let mut context = Context::from_waker(Waker::noop());
            requests.retain_mut(|request| request.as_mut().poll(&mut context).is_pending());
        }
        if requests.len() >= MOST_KEPT {
            drop(requests.pop_front());
        }
        requests.push_back(request);
    }
}

/// A request being awaited: if dropped once sent and before its answer, it is kept in its
/// node's [`Unawaited`] instead of being cancelled.
pub(super) struct Awaited {
    request: Option<Request>,
    /// Whether it was polled, and so queued for the writer (or waiting for a connection).
    polled: bool,
    unawaited: Arc<Unawaited>,
}

impl Awaited {
    pub(super) fn new(request: Request, unawaited: Arc<Unawaited>) -> Self {
        Awaited {
            request: Some(request),
            polled: false,
            unawaited,
        }
    }
}

impl Future for Awaited {
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

impl Drop for Awaited {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            // Never polled: it never went out, and nothing needs it to.
            if self.polled {
                self.unawaited.keep(request);
            }
        }
    }
}
