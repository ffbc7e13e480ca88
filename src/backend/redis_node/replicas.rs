//! Replica acknowledgements ([`ReplicaAcks`]): a grant counts only once enough replicas
//! have it, so that a failover that promotes one of them keeps the lock.

use std::sync::Arc;

use redis::{Cmd, Value};
use tokio::time::Instant;

use super::RedisNode;
use crate::backend::deployment::ReplicaAcks;
use crate::config::millis;
use crate::error::NodeError;
use crate::node::{NodeReply, NodeRequest};

impl RedisNode {
    /// After `reply` granted `request` (a lock taken, or extended), waits for the replicas
    /// the configuration asks for: `WAIT replicas timeout` on the connection the write went
    /// out on (a standalone master's), or to the master of the key's slot (a cluster's).
    /// Too few acknowledgements make the node fail this request: its grant must not count,
    /// and the coordinator's rollback deletes the key if the lock is not taken.
    pub(super) async fn acknowledged(
        &self,
        request: &NodeRequest<'_>,
        reply: NodeReply,
    ) -> Result<NodeReply, NodeError> {
        let (Some(acks), NodeReply::Done(true), Some(key)) =
            (self.replica_acks, &reply, granted_key(request))
        else {
            return Ok(reply);
        };
        let mut wait = Cmd::with_capacity(3, 32);
        wait.arg("WAIT")
            .arg(acks.replicas())
            .arg(millis(acks.timeout()));
        let acknowledged = self
            .link
            .clone()
            .send_after_write(key, &wait, Instant::now())
            .await
            .and_then(Value::extract_error)
            .map_err(|err| self.node_error(err))?;
        let replicas: u64 = redis::from_redis_value(acknowledged)
            .map_err(|err| NodeError::Redis(format!("unexpected reply to WAIT: {err}")))?;
        if replicas < u64::from(acks.replicas()) {
            return Err(too_few(acks, replicas));
        }
        Ok(reply)
    }
}

/// The first key of a request that writes a lock its grant depends on.
fn granted_key<'a>(request: &NodeRequest<'a>) -> Option<&'a str> {
    let keys: &'a [Arc<str>] = match *request {
        NodeRequest::Lock { keys, .. }
        | NodeRequest::LockWatching { keys, .. }
        | NodeRequest::LockQueued { keys, .. }
        | NodeRequest::Extend { keys, .. }
        | NodeRequest::ExtendListed { keys, .. }
        | NodeRequest::ExtendLeader { keys, .. } => keys,
        NodeRequest::ExtendMany { renewals, .. } => renewals.first()?.keys,
        _ => return None,
    };
    keys.first().map(|key| &**key)
}

fn too_few(acks: ReplicaAcks, replicas: u64) -> NodeError {
    NodeError::Redis(format!(
        "only {replicas} of the {} replicas asked for acknowledged the grant within {:?} \
         (WAIT); it does not count",
        acks.replicas(),
        acks.timeout()
    ))
}
