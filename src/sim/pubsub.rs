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

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::server::Published;
use crate::node::{Announcement, ReleaseWatch};

/// How many announcements a watch keeps before it lags (then its waiter tries at once),
/// as a Redis node's listener keeps.
const ANNOUNCEMENTS_KEPT: usize = 64;

/// The pub/sub side of one simulated node.
#[derive(Debug, Default)]
pub(super) struct PubSub {
    /// Whether the node's scripts announce releases at all.
    pub(super) announcing: bool,
    /// Whether published messages vanish before they reach any watch.
    pub(super) losing: bool,
    /// The watched channels and their watches.
    channels: HashMap<Vec<u8>, broadcast::Sender<Announcement>>,
    /// Every message the scripts published, with when, oldest first.
    published: Vec<(Instant, Published)>,
}

impl PubSub {
    /// A watch of `channel`: it sees every message published on it from now on.
    pub(super) fn watch(&mut self, channel: &str) -> ReleaseWatch {
        let sender = self
            .channels
            .entry(channel.as_bytes().to_vec())
            .or_insert_with(|| broadcast::Sender::new(ANNOUNCEMENTS_KEPT));
        ReleaseWatch::new(sender.subscribe(), Box::new(()))
    }

    /// Records `messages`, published at `at`, and hands them to the watches of their
    /// channels after `delay` (at once when it is zero), unless announcements are lost.
    pub(super) fn publish(&mut self, at: Instant, messages: Vec<Published>, delay: Duration) {
        for message in messages {
            if !self.losing {
                if let Some(sender) = self.channels.get(&message.channel) {
                    let announcement = announcement(&message.message);
                    deliver(sender.clone(), announcement, delay);
                }
            }
            self.published.push((at, message));
        }
    }

    /// Every message published so far, oldest first.
    pub(super) fn published(&self) -> Vec<(Instant, Published)> {
        self.published.clone()
    }
}

/// What a waiter reads in a message, as a Redis node's listener reads it: a waiter's id,
/// or (empty, unreadable) free for anybody.
fn announcement(message: &[u8]) -> Announcement {
    let next_waiter = std::str::from_utf8(message)
        .ok()
        .filter(|waiter| !waiter.is_empty())
        .map(Into::into);
    Announcement { next_waiter }
}

/// Sends `announcement` to the watches of `sender` after `delay`.
fn deliver(sender: broadcast::Sender<Announcement>, announcement: Announcement, delay: Duration) {
    // No watch left is fine: its waiter is gone.
    if delay.is_zero() {
        let _ = sender.send(announcement);
        return;
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = sender.send(announcement);
        }));
    }
}
