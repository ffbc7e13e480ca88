//! How a [`RedisNode`] answers each [`NodeRequest`]: the Redis command or script call that
//! [`wire`] gives it, sent over the node's connection.

use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::Value;

use super::RedisNode;
use crate::error::NodeError;
use crate::node::{LockNode, NodeHints, NodeReply, NodeRequest};
use crate::protocol::{wire_announcing, Resend, Wire};

impl LockNode for RedisNode {
    fn name(&self) -> &str {
        &self.name
    }

    /// While the node answers, its requests go out when first polled: each is one command
    /// (a script goes whole until the node has it), queued on the open connection. A
    /// server's requests take effect in order; a cluster's may not.
    fn hints(&self) -> NodeHints {
        let open = self.answering.load(Ordering::Relaxed) && self.link.is_open();
        NodeHints::new()
            .sends_when_polled(open)
            .applies_in_order(self.link.applies_in_order())
    }

    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
        // The rare branches (watches, replica acknowledgements) are boxed: inline, they
        // made this future, copied into its box on every request, 3.2 KB instead of 0.7.
        async move {
            let reply = match wire_announcing(request, &self.scripts, self.channel())? {
                Wire::Command { command, read } => {
                    let reply: Value = self
                        .query(command)
                        .await
                        .map_err(|err| self.node_error(err))?;
                    read.reply(reply)
                }
                Wire::Script {
                    script,
                    command,
                    resend,
                    read,
                } => {
                    let reply = match resend {
                        Resend::AfterReload => self.run_script(script, command).await,
                        Resend::AlsoAfterReconnect => {
                            self.run_repeatable_script(script, command).await
                        }
                    };
                    read.reply(reply.map_err(|err| self.node_error(err))?)
                }
                Wire::WatchReleases(key) => Ok(Box::pin(self.watch_releases(key)).await),
                Wire::WatchReservations(client) => {
                    Ok(Box::pin(self.watch_reservations(client)).await)
                }
                Wire::Unsupported => Ok(NodeReply::Unsupported),
            }?;
            if self.replica_acks.is_none() {
                return Ok(reply);
            }
            Box::pin(self.acknowledged(&request, reply)).await
        }
        .boxed()
    }
}
