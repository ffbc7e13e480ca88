//! [`ReleaseWatch`]: the release announcements of one node, as a waiter hears them.

use std::fmt;
use std::sync::Arc;

use tokio::sync::broadcast;

/// A release that a node announced; see [`ReleaseWatch`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// The waiter the released key is now reserved for
    /// ([`QueuePlace::waiter`](super::QueuePlace::waiter)), or `None` when it is free for
    /// anybody.
    pub next_waiter: Option<Arc<str>>,
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
