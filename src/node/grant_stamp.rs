//! [`GrantStamp`]: the stamp of a direct-grant refresh as one node gets it.

/// The stamp of a direct-grant refresh as one node gets it, and announces it back with its
/// grant: the refresh's number and the node's place among the lock's nodes, in one number.
///
/// A waiter hears a node's grants on that node's pub/sub connection, which, unlike the
/// node's lock connection, is not checked for the server it reaches (see
/// the `backend` module's server identity check): after a DNS or VIP change, or a reconnect that resolved the name
/// anew, it may reach another member's server. Counted by the connection it came on, that
/// member's grant would count twice, as its own and as the node's whose connection carried
/// it, and a waiter could hold with fewer grants than a quorum. Counted by the node the
/// stamp names, it counts once, for the right node: a refresh writes its place through each
/// node's lock connection, stamped for that node, so a grant on a place stamped for node
/// `i` was made by node `i`'s server, whichever connection brings its announcement.
///
/// ```
/// use quorumlock::node::GrantStamp;
///
/// let stamp = GrantStamp { refresh: 3, node: 2 };
/// assert_eq!(stamp.encode(), Some(3002));
/// assert_eq!(GrantStamp::decode(3002), stamp);
/// // A node past the last one a stamp can name: sent without a stamp (a reservation).
/// assert_eq!(GrantStamp { refresh: 3, node: 1000 }.encode(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantStamp {
    /// The refresh's number: raised with every refresh of the waiter's place.
    pub refresh: u64,
    /// The node's index among the lock's nodes.
    pub node: usize,
}

impl GrantStamp {
    /// How many nodes a stamp tells apart: its last three decimal digits name the node, so
    /// that a stamp reads as itself in a node's keyspace (`3002`: refresh 3, node 2).
    pub const NODES: usize = 1000;

    /// The number sent to the node (`refresh × 1000 + node`); `None` when it would not
    /// decode to this stamp (a node index of [`NODES`](Self::NODES) or more, or a refresh
    /// number too large), in which case the refresh goes without a stamp and the node
    /// reserves the key for the waiter instead of granting it.
    pub fn encode(self) -> Option<u64> {
        let node = u64::try_from(self.node)
            .ok()
            .filter(|&node| node < Self::NODES as u64)?;
        self.refresh
            .checked_mul(Self::NODES as u64)?
            .checked_add(node)
    }

    /// The refresh and the node that a stamp sent with [`encode`](Self::encode) names.
    pub fn decode(stamp: u64) -> GrantStamp {
        let nodes = Self::NODES as u64;
        GrantStamp {
            refresh: stamp / nodes,
            // Below 1000: fits any usize.
            node: (stamp % nodes) as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stamp_that_encodes_decodes_to_itself() {
        for refresh in [0, 1, 2, 999, 1000, u64::MAX / 1000 - 1] {
            for node in [0, 1, 4, 999] {
                let stamp = GrantStamp { refresh, node };
                assert_eq!(stamp.encode().map(GrantStamp::decode), Some(stamp));
            }
        }
    }

    #[test]
    fn a_stamp_that_would_not_decode_to_itself_does_not_encode() {
        assert_eq!(
            GrantStamp {
                refresh: 1,
                node: 1000
            }
            .encode(),
            None
        );
        assert_eq!(
            GrantStamp {
                refresh: u64::MAX,
                node: 0
            }
            .encode(),
            None
        );
        assert_eq!(
            GrantStamp {
                refresh: u64::MAX / 1000,
                node: 999
            }
            .encode(),
            None
        );
    }
}
