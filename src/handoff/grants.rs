//! [`Grants`]: how a waiter of the direct grant asks the nodes, and hears of the keys they
//! grant it (docs/safety.md, "The direct grant").
//!
//! A release hands the key to the first waiter in line outright, setting it to the token
//! of the waiter's refresh that wrote its place there; the waiter holds once the nodes that
//! took its keys in its refresh round and the nodes whose grants it heard of make a quorum,
//! without a round of its own to claim them. It counts a node's grant only when the grant
//! was made on the place this refresh wrote (the announcement carries the refresh's stamp),
//! so that the validity it counts from the refresh's sending holds on that node: the node's
//! script ran after the refresh arrived, and set the key's TTL then. And it counts the
//! grant for the node the stamp names ([`GrantStamp`](crate::node::GrantStamp)), whichever
//! connection brought the announcement.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::watches::ReleaseWatches;
use crate::token::LockToken;

/// One refresh of a direct-grant waiter's place: its stamp, and the announcements it hears
/// its grants on. The refresh asks in a token of its own, as every attempt does, which its
/// place records and a grant sets the key to: a late rollback of an earlier refresh
/// deletes only a key in that refresh's token (a grant to an earlier place is taken by the
/// next refresh in its own token).
pub(crate) struct Grants {
    /// This refresh's stamp: raised with every refresh, recorded in the place it writes.
    pub(crate) stamp: u64,
    /// The grants announced to this client, watched since before the refresh was sent;
    /// `None` where no node announces them (a Redis Cluster member: the next refresh finds
    /// the key granted instead).
    announced: Option<ReleaseWatches>,
    /// The longest a refresh that some nodes refused waits for their grants: the retry
    /// delay, jittered, shorter than the place's lifetime.
    pub(crate) wait: Duration,
}

impl Grants {
    pub(super) fn new(stamp: u64, announced: Option<ReleaseWatches>, wait: Duration) -> Self {
        Grants {
            stamp,
            announced,
            wait,
        }
    }

    /// Whether the grants of this refresh can be heard of (some node announces them).
    pub(crate) fn announced(&self) -> bool {
        self.announced.is_some()
    }

    /// The announcements to hear this refresh's grants on, from now on: taken before the
    /// refresh is sent, so that none of its grants is missed.
    pub(crate) fn listen(&self, waiter: &LockToken) -> Option<Heard> {
        Some(Heard {
            announced: self.announced.clone()?,
            waiter: Arc::from(waiter.as_str()),
            stamp: self.stamp,
        })
    }
}

/// The announcements of one refresh's grants, from the moment it was taken.
pub(crate) struct Heard {
    announced: ReleaseWatches,
    waiter: Arc<str>,
    stamp: u64,
}

impl Heard {
    /// The index of the next node that announces a grant of this refresh, until `until`;
    /// `None` at `until`, or when a node announced a reservation for the waiter instead
    /// (which the next refresh claims).
    ///
    /// # Cancel safety
    ///
    /// An announcement is consumed only when it is returned or skipped.
    pub(crate) async fn next(&mut self, until: Instant) -> Option<usize> {
        let grant = self.announced.next_grant(&self.waiter, self.stamp);
        tokio::time::timeout_at(until, grant).await.ok().flatten()
    }
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants")
            .field("stamp", &self.stamp)
            .field("announced", &self.announced.is_some())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}
