//! Release notifications over Redis pub/sub: how waiters learn at once that a lock was
//! released instead of sleeping out a blind retry delay.
//!
//! The release script publishes the released token on a channel named after the key. A
//! [`ReleaseListener`] holds one pub/sub connection per node, opened on the first wait and
//! re-opened when lost, subscribed to the channels that local waiters watch. Notifications
//! are a speed-up only: a lost message or a broken connection leaves waiters on their
//! jittered retry delay, which is always running as the fallback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::watch;

use super::ReleaseWatch;
use crate::quorum::spawn_detached;

/// The channel on which releases of a key are announced is this prefix and the key.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "quorumlock:released:";

/// The channel on which releases of `key` are announced.
fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}

/// How long to wait before reconnecting a lost pub/sub connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// The pub/sub side of one node.
pub(crate) struct ReleaseListener {
    shared: Arc<Shared>,
}

struct Shared {
    client: redis::Client,
    connect_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Watched channels: how many local waiters watch each, and the counter they observe.
    channels: HashMap<String, Channel>,
    /// The connection's command side, while connected.
    sink: Option<PubSubSink>,
    /// The connection task, once started.
    task: Option<tokio::task::AbortHandle>,
}

struct Channel {
    watchers: usize,
    notifications: watch::Sender<u64>,
}

impl ReleaseListener {
    pub(crate) fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        ReleaseListener {
            shared: Arc::new(Shared {
                client,
                connect_timeout,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Watches releases of `key`: the returned watch's counter moves on each release
    /// announced by this node. Waits at most the connect timeout for the subscription to be
    /// confirmed; an unconfirmed watch may miss notifications (the fallback delay covers it).
    pub(crate) async fn watch(&self, key: &str) -> ReleaseWatch {
        let channel = release_channel(key);
        let (receiver, newly_watched, sink, task_running) = {
            let mut state = lock(&self.shared.state);
            let entry = state
                .channels
                .entry(channel.clone())
                .or_insert_with(|| Channel {
                    watchers: 0,
                    notifications: watch::Sender::new(0),
                });
            entry.watchers += 1;
            let receiver = entry.notifications.subscribe();
            let newly_watched = entry.watchers == 1;
            (
                receiver,
                newly_watched,
                state.sink.clone(),
                state.task.is_some(),
            )
        };
        if !task_running {
            // The task subscribes to every registered channel once connected, this one too.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let task = runtime.spawn(run(Arc::downgrade(&self.shared)));
                lock(&self.shared.state).task = Some(task.abort_handle());
            }
        } else if let (true, Some(mut sink)) = (newly_watched, sink) {
            let _ =
                tokio::time::timeout(self.shared.connect_timeout, sink.subscribe(&channel)).await;
        }
        let registration = Registration {
            shared: Arc::downgrade(&self.shared),
            channel,
        };
        ReleaseWatch::new(receiver, Box::new(registration))
    }
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
        let sink = {
            let mut state = lock(&shared.state);
            let Some(entry) = state.channels.get_mut(&self.channel) else {
                return;
            };
            entry.watchers -= 1;
            if entry.watchers > 0 {
                return;
            }
            state.channels.remove(&self.channel);
            state.sink.clone()
        };
        if let Some(mut sink) = sink {
            let channel = std::mem::take(&mut self.channel);
            spawn_detached(async move {
                let _ = sink.unsubscribe(&channel).await;
            });
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
        let (mut sink, mut messages) = pubsub.split();
        let channels: Vec<String> = {
            let mut state = lock(&strong.state);
            state.sink = Some(sink.clone());
            state.channels.keys().cloned().collect()
        };
        if !channels.is_empty() {
            let _ = tokio::time::timeout(strong.connect_timeout, sink.subscribe(&channels)).await;
        }
        drop(strong); // hold only the weak reference while idle
        while let Some(message) = messages.next().await {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let state = lock(&strong.state);
            if let Some(channel) = state.channels.get(message.get_channel_name()) {
                channel
                    .notifications
                    .send_modify(|count| *count = count.wrapping_add(1));
            }
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
