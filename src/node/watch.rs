//! [`ReleaseWatch`]: the release announcements of one node, as a waiter hears them.

use std::fmt;
use std::sync::Arc;

use tokio::sync::broadcast;

/// A release that a node announced; see [`ReleaseWatch`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// The waiter the released key is now reserved for, or granted to
    /// ([`QueuePlace::waiter`](super::QueuePlace::waiter)), or `None` when it is free for
    /// anybody.
    pub next_waiter: Option<Arc<str>>,
    /// When the key was granted to `next_waiter` outright (set to its token: the direct
    /// grant), the stamp of the refresh that wrote the place it was granted on, as that
    /// refresh sent it to the node (see
    /// [`NodeRequest::LockQueued`](super::NodeRequest::LockQueued) and
    /// [`GrantStamp`](super::GrantStamp)); `None` for a reservation.
    pub grant: Option<u64>,
}

impl Announcement {
    /// The announcement a release script's message carries: a waiter's id for a
    /// reservation, the id and a stamp (`"<waiter> <stamp>"`) for a grant, or anything
    /// else (empty, not UTF-8) for a key free for anybody.
    pub(crate) fn from_message(message: &[u8]) -> Self {
        let Some(text) = std::str::from_utf8(message)
            .ok()
            .filter(|text| !text.is_empty())
        else {
            return Announcement::default();
        };
        match text.split_once(' ') {
            Some((waiter, stamp)) => match stamp.parse() {
                Ok(stamp) => Announcement {
                    next_waiter: Some(Arc::from(waiter)),
                    grant: Some(stamp),
                },
                // Not a message of ours: it wakes the waiters, who then ask the nodes.
                Err(_) => Announcement::default(),
            },
            None => Announcement {
                next_waiter: Some(Arc::from(text)),
                grant: None,
            },
        }
    }
}

/// Announcements of releases on one node; see
/// [`NodeRequest::WatchReleases`](super::NodeRequest::WatchReleases) and
/// [`NodeRequest::WatchReservations`](super::NodeRequest::WatchReservations).
///
/// It wraps a [`broadcast`] receiver of the node's [`Announcement`]s, and a registration
/// that the node keeps while any watch sharing it is alive (dropped with the last of them,
/// for example to unsubscribe). Cloning a watch shares the registration and sees only the
/// announcements made after the clone.
pub struct ReleaseWatch {
    announcements: broadcast::Receiver<Announcement>,
    registration: Arc<dyn std::any::Any + Send + Sync>,
}

impl ReleaseWatch {
    /// A watch over `announcements`, keeping `registration` alive as long as the watch.
    pub fn new(
        announcements: broadcast::Receiver<Announcement>,
        registration: Box<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        ReleaseWatch {
            announcements,
            registration: Arc::from(registration),
        }
    }

    /// Forgets the releases announced so far.
    pub(crate) fn mark_seen(&mut self) {
        self.announcements = self.announcements.resubscribe();
    }

    /// The next announcement not yet seen; never resolves once the node stops announcing.
    /// When announcements were missed (more arrived than the channel keeps), it answers
    /// "free for anybody", which makes the waiter try at once rather than sleep.
    pub(crate) async fn next_release(&mut self) -> Announcement {
        match self.announcements.recv().await {
            Ok(announcement) => announcement,
            Err(broadcast::error::RecvError::Lagged(_)) => Announcement::default(),
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

impl Clone for ReleaseWatch {
    fn clone(&self) -> Self {
        ReleaseWatch {
            announcements: self.announcements.resubscribe(),
            registration: Arc::clone(&self.registration),
        }
    }
}

impl fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseWatch").finish_non_exhaustive()
    }
}

/// How many announcements a watch keeps before it lags (and then its waiter simply tries
/// at once).
const ANNOUNCEMENTS_KEPT: usize = 64;

/// The channels a node's waiters watch, with how many watches each has and the sender
/// they all receive from: the bookkeeping every listener of announcements keeps (a Redis
/// node's, a Cluster member's, a simulated node's), whatever it subscribes through.
#[derive(Debug, Default)]
pub(crate) struct WatchedChannels {
    channels: std::collections::HashMap<String, Watched>,
}

#[derive(Debug)]
struct Watched {
    watchers: usize,
    announcements: broadcast::Sender<Announcement>,
}

impl WatchedChannels {
    /// One more watch of `channel`: the receiver of its announcements, and whether it is
    /// the channel's first (which the listener then subscribes to).
    pub(crate) fn watch(&mut self, channel: &str) -> (broadcast::Receiver<Announcement>, bool) {
        let entry = self
            .channels
            .entry(channel.to_owned())
            .or_insert_with(|| Watched {
                watchers: 0,
                announcements: broadcast::Sender::new(ANNOUNCEMENTS_KEPT),
            });
        entry.watchers += 1;
        (entry.announcements.subscribe(), entry.watchers == 1)
    }

    /// One watch of `channel` fewer; whether that was its last (which the listener then
    /// unsubscribes from).
    pub(crate) fn unwatch(&mut self, channel: &str) -> bool {
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        entry.watchers -= 1;
        if entry.watchers > 0 {
            return false;
        }
        self.channels.remove(channel);
        true
    }

    /// Hands `announcement` to the watches of `channel`, if it has any.
    pub(crate) fn announce(&self, channel: &str, announcement: Announcement) {
        if let Some(entry) = self.channels.get(channel) {
            // No receiver left is fine: the watch is being dropped.
            let _ = entry.announcements.send(announcement);
        }
    }

    /// The sender of `channel`'s announcements, to announce later (after a delay) to the
    /// watches of that moment: the simulation's delayed announcements.
    #[cfg(feature = "test-util")]
    pub(crate) fn sender(&self, channel: &str) -> Option<broadcast::Sender<Announcement>> {
        self.channels
            .get(channel)
            .map(|entry| entry.announcements.clone())
    }

    /// Every watched channel.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.channels.keys().map(String::as_str)
    }
}
