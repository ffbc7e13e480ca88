//! [`Woken`]: futures polled together, each only when it was woken.
//!
//! Like a `FuturesUnordered`, each future has a waker of its own, which marks it and wakes
//! the task; so a wake polls the futures that were woken, not all of them (a round's five
//! replies come as five wakes: polling every request on each costs 25 polls for 5
//! answers). Unlike it, the set never wakes its own task: having polled every future it
//! holds and found all pending, a `FuturesUnordered` wakes its task to yield, and tokio
//! reschedules a task woken as it runs through another worker: a thread wake-up per round
//! (see docs/design.md, "Where we wrote our own"). A fan-out's [`Round`](crate::fan_out::Round)
//! and a node's keeper of unawaited requests poll their requests through it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Futures in the order they were added, each polled only once woken (or new).
pub(crate) struct Woken<F> {
    futures: Vec<OneWoken<F>>,
    /// The task polling the set, woken by any of its futures.
    task: Arc<AtomicWaker>,
}

/// One future, with its waker and the flag the waker sets.
struct OneWoken<F> {
    future: F,
    flag: Arc<Flag>,
    waker: Waker,
}

/// One future's waker: marks it for polling and wakes the task.
struct Flag {
    woken: AtomicBool,
    task: Arc<AtomicWaker>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future + Unpin> Woken<F> {
    /// An empty set with room for `capacity` futures.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Woken {
            futures: Vec::with_capacity(capacity),
            task: Arc::default(),
        }
    }

    /// How many futures the set holds.
    pub(crate) fn len(&self) -> usize {
        self.futures.len()
    }

    /// Adds `future`, to be polled at the next poll.
    pub(crate) fn push(&mut self, future: F) {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: Arc::clone(&self.task),
        });
        let waker = Waker::from(Arc::clone(&flag));
        self.futures.push(OneWoken {
            future,
            flag,
            waker,
        });
    }

    /// Removes the future at `position`; the others keep their order.
    pub(crate) fn remove(&mut self, position: usize) {
        drop(self.futures.remove(position));
    }

    /// Polls the futures woken since they were last polled, in the order they were added,
    /// and removes and returns the first that is ready, with its position; pending when
    /// none is. Never wakes the task itself.
    ///
    /// # Cancel safety
    ///
    /// An output is taken from its future only when it is returned.
    pub(crate) fn poll_woken(&mut self, cx: &mut Context<'_>) -> Poll<(usize, F::Output)> {
        self.task.register(cx.waker());
        for position in 0..self.futures.len() {
            let one = &mut self.futures[position];
            if !one.flag.woken.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut context = Context::from_waker(&one.waker);
            if let Poll::Ready(output) = Pin::new(&mut one.future).poll(&mut context) {
                drop(self.futures.remove(position));
                return Poll::Ready((position, output));
            }
        }
        Poll::Pending
    }
}
