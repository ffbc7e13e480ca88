//! [`ShardedListener`]: release announcements on a Redis Cluster member, over sharded
//! pub/sub (`SSUBSCRIBE`, Redis 7).
//!
//! Classic `PUBLISH` on a cluster is broadcast over the cluster bus to every node, so its
//! cost grows with the cluster. A sharded channel belongs to a slot: the release script
//! `SPUBLISH`es on `quorumlock:shard-released:<key>`, in the key's slot, and only the shard
//! serving that slot carries it. Waiters subscribe through redis-rs's async cluster client,
//! which sends each `SSUBSCRIBE` to the master of the channel's slot, receives the messages
//! as RESP3 pushes, and subscribes again after a reconnect. As on a standalone node the
//! announcements are a speed-up only: a lost one (a failover, a slot that moved away,
//! whose subscribers Redis unsubscribes) leaves waiters on their jittered retry delay.
//!
//! Reservations for queued waiters are not announced on a cluster: the channel of a
//! waiter's client would hash to another slot than the key's, which a script may not
//! publish to on the shard that serves the key. Queued waiters claim a reservation on their
//! retry delay (docs/operations.md, "Redis Cluster members").

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind};

use crate::node::WatchedChannels;
use crate::node::{Announcement, ReleaseWatch};
use crate::protocol::keys::sharded_release_channel;

/// The sharded pub/sub side of one cluster member.
pub(crate) struct ShardedListener {
    shared: Arc<Shared>,
}

struct Shared {
    /// Seeds of the cluster, for the pub/sub connection (RESP3, pushes to this listener).
    seeds: Vec<redis::ConnectionInfo>,
    connect_timeout: Duration,
    /// How long a new watch waits for its subscription: one request's time.
    confirm_timeout: Duration,
    channels: Mutex<WatchedChannels>,
    connection: tokio::sync::Mutex<Option<ClusterConnection>>,
}

impl ShardedListener {
    /// A listener on the cluster of `seeds`, connecting within `connect_timeout`, whose
    /// new watches wait at most `confirm_timeout` for their subscription.
    pub(crate) fn new(
        seeds: Vec<redis::ConnectionInfo>,
        connect_timeout: Duration,
        confirm_timeout: Duration,
    ) -> Self {
        ShardedListener {
            shared: Arc::new(Shared {
                seeds,
                connect_timeout,
                confirm_timeout,
                channels: Mutex::default(),
                connection: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// Watches the releases of `key` announced free by the shard that serves it.
    pub(crate) async fn watch_key(&self, key: &str) -> Option<ReleaseWatch> {
        let channel = sharded_release_channel(key);
        let (receiver, newly_watched) = lock(&self.shared.channels).watch(&channel);
        let registration = Registration {
            shared: Arc::downgrade(&self.shared),
            channel: channel.clone(),
        };
        if newly_watched {
            let subscribed = tokio::time::timeout(
                self.shared.confirm_timeout.max(self.shared.connect_timeout),
                self.shared.subscribe(&channel),
            )
            .await;
            if !matches!(subscribed, Ok(Ok(()))) {
                // Dropping the registration forgets the channel: the waiter retries.
                return None;
            }
        }
        Some(ReleaseWatch::new(receiver, Box::new(registration)))
    }
}

impl Shared {
    /// `SSUBSCRIBE channel` on the pub/sub connection, made first if needed.
    async fn subscribe(self: &Arc<Self>, channel: &str) -> redis::RedisResult<()> {
        let mut connection = self.connection.lock().await;
        let mut open = match connection.take() {
            Some(open) => open,
            None => self.connect().await?,
        };
        *connection = Some(open.clone());
        open.ssubscribe(channel).await
    }

    async fn connect(self: &Arc<Self>) -> redis::RedisResult<ClusterConnection> {
        let listener = Arc::downgrade(self);
        let client = ClusterClient::builder(self.seeds.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(self.connect_timeout)
            .push_sender(move |push: PushInfo| {
                if let Some(shared) = listener.upgrade() {
                    shared.deliver(push);
                }
                Ok::<(), std::convert::Infallible>(())
            })
            .build()?;
        client.get_async_connection().await
    }

    /// Hands a sharded message to the watches of its channel.
    fn deliver(&self, push: PushInfo) {
        if push.kind != PushKind::SMessage {
            return;
        }
        let [channel, ..] = push.data.as_slice() else {
            return;
        };
        let Ok(channel) = redis::from_redis_value_ref::<String>(channel) else {
            return;
        };
        // The payload is empty: free for anybody.
        lock(&self.channels).announce(&channel, Announcement::default());
    }
}

impl Drop for ShardedListener {
    fn drop(&mut self) {
        // Drop the pub/sub connection with the node, not with the last watch.
        if let Ok(mut connection) = self.shared.connection.try_lock() {
            connection.take();
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
        if !lock(&shared.channels).unwatch(&self.channel) {
            return;
        }
        let channel = std::mem::take(&mut self.channel);
        // Not in `Drop`'s thread: unsubscribing is a network call, done in the background.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(async move {
                if let Some(connection) = shared.connection.lock().await.as_mut() {
                    let _ = connection.sunsubscribe(channel).await;
                }
            }));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[tokio::test]
    async fn a_sharded_message_reaches_the_watches_of_its_channel_only() {
        let listener =
            ShardedListener::new(vec![], Duration::from_millis(10), Duration::from_millis(10));
        let (receiver, _) = lock(&listener.shared.channels).watch("quorumlock:shard-released:{a}");
        let mut receiver = Some(receiver);
        let message = |kind, channel: &str| PushInfo {
            kind,
            data: vec![Value::BulkString(channel.into()), Value::BulkString(vec![])],
        };
        listener
            .shared
            .deliver(message(PushKind::SMessage, "quorumlock:shard-released:{b}"));
        listener
            .shared
            .deliver(message(PushKind::Message, "quorumlock:shard-released:{a}"));
        let receiver = receiver.as_mut().unwrap();
        assert!(receiver.try_recv().is_err());
        listener
            .shared
            .deliver(message(PushKind::SMessage, "quorumlock:shard-released:{a}"));
        assert_eq!(receiver.try_recv().unwrap(), Announcement::default());
    }
}
