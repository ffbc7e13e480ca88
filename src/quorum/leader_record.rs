//! An election leader's record, written beside the lock key on a quorum of nodes while
//! the leader holds the lock, and read back from a quorum.

use tokio::time::Instant;

use super::stragglers::finish_in_background;
use super::votes::{Command, Wait};
use super::Coordinator;
use crate::error::LockError;
use crate::fan_out::Round;
use crate::lease::Lease;
use crate::resource::Keys;

impl Coordinator {
    /// Records `record` beside the lease's key on every node that still holds its token;
    /// `Ok` once a quorum did, before the lease's deadline.
    pub(crate) async fn proclaim(&self, lease: &Lease, record: &str) -> Result<(), LockError> {
        let resource = lease.resource();
        let deadline = lease.deadline();
        // Marked first: an extension from now on keeps the record as long as the key,
        // whether it lands on a node before the record or after it.
        lease.mark_proclaimed();
        let command = Command::Proclaim(record.into());
        let mut in_flight = self.send(command, &lease.keys, &lease.token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut [])
            .await;
        // On every node, not only the quorum that decided: observers read any quorum.
        finish_in_background(in_flight);
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Expired {
                resource: resource.to_owned(),
                ago: now.saturating_duration_since(deadline),
            });
        }
        if tally.has_quorum() {
            Ok(())
        } else {
            Err(self.loss(resource, tally))
        }
    }

    /// The leader records that a quorum of nodes answered for the election key `keys`: on
    /// each, the record of the token its key holds now, if any.
    pub(crate) async fn read_proclamations(
        &self,
        resource: &str,
        keys: &Keys,
    ) -> Result<Vec<String>, LockError> {
        let timeout = self.config.node_timeout();
        let mut in_flight = Round::fan_out(&self.nodes, 0..self.nodes.len(), timeout, |_, node| {
            let keys = keys.clone();
            async move { node.read_proclamation(&keys).await }
        });
        let mut tally = self.empty_tally();
        let mut records = Vec::new();
        while let Some((index, reply, _)) = in_flight.next().await {
            match reply {
                Ok(record) => {
                    tally.granted += 1;
                    records.extend(record);
                }
                Err(error) => self.record_failure(&mut tally, index, error),
            }
            if tally.has_quorum() {
                return Ok(records);
            }
            if tally.granted + in_flight.len() < self.quorum {
                break;
            }
        }
        Err(LockError::NoQuorum {
            resource: resource.to_owned(),
            tally,
        })
    }
}
