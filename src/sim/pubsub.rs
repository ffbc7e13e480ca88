//! Release announcements on a simulated node: the channels that lock clients watch, and the
//! messages the node's scripts publish on them, delivered as a Redis node's pub/sub
//! connection delivers them.
//!
//! A Redis node's release script publishes on the key's channel (free for anybody) or on
//! the channel of the client whose waiter the key is now reserved for, naming the waiter;
//! a client's listener hears it on a pub/sub connection of its own. Here the node keeps
//! the watched channels itself and hands each message to the watches of its channel once
//! the script that published it has run, after the node's reply delay (the message crosses
//! the same network as the reply). Announcements are off until
//! [`SimNode::announce_releases`](super::SimNode::announce_releases) turns them on, as
//! the coordinator's waiters then fall back to their retry delay, and they can be lost
//! while the scripts still publish ([`SimNode::lose_announcements`](super::SimNode::lose_announcements)).

use std::time::Duration;

use tokio::time::Instant;

use super::server::Published;
use crate::node::WatchedChannels;
use crate::node::{Announcement, ReleaseWatch};

/// The pub/sub side of one simulated node.
#[derive(Debug, Default)]
pub(super) struct PubSub {
    /// Whether the node's scripts announce releases at all.
    pub(super) announcing: bool,
    /// Whether published messages vanish before they reach any watch.
    pub(super) losing: bool,
    /// The watched channels and their watches.
    channels: WatchedChannels,
    /// Every message the scripts published, with when, oldest first.
    published: Vec<(Instant, Published)>,
}

impl PubSub {
    /// A watch of `channel`: it sees every message published on it from now on. A node
    /// is always subscribed, so a watch registers nothing, and the channel stays watched.
    pub(super) fn watch(&mut self, channel: &str) -> ReleaseWatch {
        let (receiver, _) = self.channels.watch(channel);
        ReleaseWatch::new(receiver, Box::new(()))
    }

    /// Records `messages`, published at `at`, and hands them to the watches of their
    /// channels after `delay` (at once when it is zero), unless announcements are lost.
    pub(super) fn publish(&mut self, at: Instant, messages: Vec<Published>, delay: Duration) {
        for message in messages {
            if !self.losing {
                let channel = String::from_utf8_lossy(&message.channel).into_owned();
                let announcement = Announcement::from_message(&message.message);
                deliver(&self.channels, channel, announcement, delay);
            }
            self.published.push((at, message));
        }
    }

    /// Every message published so far, oldest first.
    pub(super) fn published(&self) -> Vec<(Instant, Published)> {
        self.published.clone()
    }
}

/// Hands `announcement` to the watches of `channel` after `delay` (at once when it is
/// zero), from a task of its own then; the watches are those of that moment.
fn deliver(
    channels: &WatchedChannels,
    channel: String,
    announcement: Announcement,
    delay: Duration,
) {
    if delay.is_zero() {
        channels.announce(&channel, announcement);
        return;
    }
    let Some(sender) = channels.sender(&channel) else {
        return;
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            // No watch left is fine: its waiter is gone.
            let _ = sender.send(announcement);
        }));
    }
}
