//! Release notifications over Redis pub/sub: how waiters learn at once that a lock was
//! released instead of sleeping out a blind retry delay.
//!
//! The release script publishes on one of two channels: when the key is handed to a queued
//! waiter (see [`QueuePlace`](crate::node::QueuePlace)), on the channel of that waiter's client,
//! naming the waiter, so that only its process wakes; otherwise on a channel named after
//! the key, with an empty message: free for anybody. A
//! [`ReleaseListener`] holds one pub/sub connection per node, opened on the first wait and
//! re-opened when lost, subscribed to the channels that local waiters watch. Notifications
//! are a speed-up only: a lost message or a broken connection leaves waiters on their
//! jittered retry delay, which is always running as the fallback.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use redis::aio::PubSubSink;
use tokio::sync::watch;

use crate::node::WatchedChannels;
use crate::node::{Announcement, ReleaseWatch};
use crate::protocol::keys::{release_channel, waiter_channel};

/// How long to wait before reconnecting a lost pub/sub connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// The pub/sub side of one node.
pub(crate) struct ReleaseListener {
    shared: Arc<Shared>,
}

struct Shared {
    client: redis::Client,
    connect_timeout: Duration,
    /// How long a new watch waits for its subscription to be confirmed: one request's
    /// time, so that a waiter on a frozen node falls back to its retry delay at once.
    confirm_timeout: Duration,
    state: Mutex<State>,
    /// Bumped each time the connection task has (re)subscribed every watched channel.
    ready: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    /// Watched channels: how many local waiters watch each, and the sender they observe.
    channels: WatchedChannels,
    /// The connection's command side, while connected.
    sink: Option<PubSubSink>,
    /// The connection task, once started.
    task: Option<tokio::task::AbortHandle>,
}

impl ReleaseListener {
    /// A listener whose connection attempts take at most `connect_timeout`, and whose new
    /// watches wait at most `confirm_timeout` for their subscription.
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        confirm_timeout: Duration,
    ) -> Self {
        ReleaseListener {
            shared: Arc::new(Shared {
                client,
                connect_timeout,
                confirm_timeout,
                state: Mutex::new(State::default()),
                ready: watch::Sender::new(0),
            }),
        }
    }

    /// Watches releases of `key`: the returned watch sees each release of the key announced
    /// freed by this node.
    pub(crate) async fn watch_key(&self, key: &str) -> ReleaseWatch {
        self.watch(release_channel(key)).await
    }

    /// Watches the keys this node reserves for the queued waiters of `client`.
    pub(crate) async fn watch_waiters(&self, client: &str) -> ReleaseWatch {
        self.watch(waiter_channel(client)).await
    }

    /// Watches `channel`. Waits at most the connect timeout for the subscription to be
    /// confirmed; an unconfirmed watch may miss notifications (the fallback delay covers it).
    ///
    /// Every `SUBSCRIBE` and `UNSUBSCRIBE` is queued on the connection while the state lock
    /// is held, so the commands reach the node in the order the registrations changed: a
    /// channel dropped by one waiter and watched again by the next ends up subscribed.
    async fn watch(&self, channel: String) -> ReleaseWatch {
        let mut ready = self.shared.ready.subscribe();
        let (receiver, subscribing, connected) = {
            let mut state = lock(&self.shared.state);
            let (receiver, newly_watched) = state.channels.watch(&channel);
            let subscribing = match (&state.sink, newly_watched) {
                (Some(sink), true) => queue(sink.clone(), Subscription::On(vec![channel.clone()])),
                _ => None,
            };
            if state.task.is_none() {
                // The task subscribes to every registered channel once connected, this one too.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let task = runtime.spawn(run(Arc::downgrade(&self.shared)));
                    state.task = Some(task.abort_handle());
                }
            }
            (receiver, subscribing, state.sink.is_some())
        };
        let timeout = self.shared.confirm_timeout;
        if let Some(subscribing) = subscribing {
            let _ = tokio::time::timeout(timeout, subscribing).await;
        } else if !connected {
            let _ = tokio::time::timeout(timeout, ready.changed()).await;
        }
        let registration = Registration {
            shared: Arc::downgrade(&self.shared),
            channel,
        };
        ReleaseWatch::new(receiver, Box::new(registration))
    }
}

/// A subscription change for [`queue`].
enum Subscription {
    On(Vec<String>),
    Off(String),
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Puts a subscription change on the connection at once (its first poll writes the
/// command to the connection's queue) and returns what is left: waiting for the reply.
/// Called with the state lock held, which orders the commands.
fn queue(mut sink: PubSubSink, change: Subscription) -> Option<Pending> {
    let mut pending: Pending = Box::pin(async move {
        let _ = match change {
            Subscription::On(channels) => sink.subscribe(channels).await,
            Subscription::Off(channel) => sink.unsubscribe(channel).await,
        };
    });
    pending.as_mut().now_or_never().is_none().then_some(pending)
}

impl Drop for ReleaseListener {
    fn drop(&mut self) {
        // The task would otherwise keep its pub/sub connection open for nobody.
        if let Some(task) = lock(&self.shared.state).task.take() {
            task.abort();
        }
    }
}

/// Keeps a channel subscribed while a waiter watches it.
struct Registration {
    shared: Weak<Shared>,
    channel: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut state = lock(&shared.state);
        if !state.channels.unwatch(&self.channel) {
            return;
        }
        if let Some(sink) = state.sink.clone() {
            // Queued under the lock; the reply is not needed.
            let channel = std::mem::take(&mut self.channel);
            drop(queue(sink, Subscription::Off(channel)));
        }
    }
}

/// The connection task: connects, subscribes to every watched channel, forwards
/// notifications, and reconnects when the connection is lost, until the listener is gone.
async fn run(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let connected =
            tokio::time::timeout(strong.connect_timeout, strong.client.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            drop(strong);
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        };
        let (sink, mut messages) = pubsub.split();
        let subscribing = {
            let mut state = lock(&strong.state);
            state.sink = Some(sink.clone());
            let channels: Vec<String> = state.channels.names().map(str::to_owned).collect();
            if channels.is_empty() {
                None
            } else {
                queue(sink, Subscription::On(channels))
            }
        };
        if let Some(subscribing) = subscribing {
            let _ = tokio::time::timeout(strong.connect_timeout, subscribing).await;
        }
        strong
            .ready
            .send_modify(|generation| *generation = generation.wrapping_add(1));
        drop(strong); // hold only the weak reference while idle
        while let Some(message) = messages.next().await {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let announcement = Announcement::from_message(message.get_payload_bytes());
            lock(&strong.state)
                .channels
                .announce(message.get_channel_name(), announcement);
        }
        // The connection ended: forget its sink, then reconnect after a pause.
        if let Some(strong) = shared.upgrade() {
            lock(&strong.state).sink = None;
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Locks the state, recovering it if a panicking thread poisoned the mutex: the state is a
/// plain map and counters, valid after any interrupted update.
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
