//! How a [`RedisNode`] answers each [`NodeRequest`]: the Redis command or script call that
//! the protocol gives it ([`wire_announcing`]), sent over the node's transport, with the
//! node's way of driving a request to its end once sent and of telling a failure to reach
//! the node from the node's refusal.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::cluster_routing::Slot;
use redis::{Cmd, RedisError, Value};
use tokio::time::Instant;

use super::RedisNode;
use crate::backend::unawaited::{Awaited, Keep, Request};
use crate::error::NodeError;
use crate::node::{LockNode, NodeHints, NodeReply, NodeRequest, Renewal, SharedEncoding};
use crate::protocol::keys::{RELEASE_CHANNEL_PREFIX, SHARDED_RELEASE_CHANNEL_PREFIX};
use crate::protocol::{is_unreachable, wire_announcing, CachedScript, Resend, Wire};

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

    /// A server refused when its connection was made (a replica, say), or one that
    /// abstains after a restart or a clock anomaly.
    fn excluded(&self) -> Option<String> {
        self.link.exclusion()
    }

    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
        if let NodeRequest::ExtendMany { renewals, ttl, .. } = request {
            if self.link.routes_by_slot() && spans_slots(renewals) {
                return self.extend_by_slot(renewals, ttl).boxed();
            }
        }
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

/// Whether `renewals` lie in more than one hash slot (each one's keys share a slot: see
/// [`crate::resource`]).
fn spans_slots(renewals: &[Renewal<'_>]) -> bool {
    let slot = |renewal: &Renewal<'_>| {
        renewal
            .keys
            .first()
            .map(|key| Slot::for_key(key.as_bytes()))
    };
    let first = renewals.first().map(slot);
    renewals.iter().any(|renewal| Some(slot(renewal)) != first)
}

impl RedisNode {
    /// An `ExtendMany` on a Redis Cluster: one call per hash slot (a script touches one
    /// slot), all at once, the cluster client routing each to its slot's master; the flags
    /// put back in the order of `renewals`. A slot that fails fails the whole, as one
    /// request would.
    async fn extend_by_slot(
        &self,
        renewals: &[Renewal<'_>],
        ttl: Duration,
    ) -> Result<NodeReply, NodeError> {
        let mut by_slot: HashMap<Option<Slot>, (Vec<usize>, Vec<Renewal<'_>>)> = HashMap::new();
        for (index, renewal) in renewals.iter().enumerate() {
            let slot = renewal
                .keys
                .first()
                .map(|key| Slot::for_key(key.as_bytes()));
            let (indices, group) = by_slot.entry(slot).or_default();
            indices.push(index);
            group.push(*renewal);
        }
        // Each slot's group is a request of its own, its encoding its own.
        let groups: Vec<_> = by_slot
            .values()
            .map(|group| (group, SharedEncoding::new()))
            .collect();
        let calls = groups.iter().map(|((indices, group), encoding)| {
            let request = NodeRequest::ExtendMany {
                renewals: group,
                ttl,
                encoding,
            };
            self.call(request)
                .map(move |reply| (indices, reply, group.len()))
        });
        let mut flags = vec![false; renewals.len()];
        for (indices, reply, count) in futures::future::join_all(calls).await {
            match reply? {
                NodeReply::Renewed(answers) if answers.len() == count => {
                    for (index, answer) in indices.iter().zip(answers) {
                        flags[*index] = answer;
                    }
                }
                other => {
                    return Err(NodeError::Redis(format!(
                        "unexpected reply to extend many: {other:?}"
                    )))
                }
            }
        }
        Ok(NodeReply::Renewed(flags))
    }

    /// Sends `command` and notes whether the node answered. Once sent, the command goes
    /// out even if this future is dropped (see [`Unawaited`](crate::backend::unawaited::Unawaited)), while the node's patience
    /// lasts.
    pub(super) async fn query<T, C>(&self, command: C) -> redis::RedisResult<T>
    where
        T: redis::FromRedisValue,
        C: Borrow<Cmd> + Send + 'static,
    {
        let link = self.link.clone();
        let now = Instant::now();
        let request: Request = Box::pin(async move { link.send(command.borrow(), now).await });
        let result = self.await_request(request, now, Keep::WhilePatient).await;
        Ok(redis::from_redis_value(result?)?)
    }

    /// Awaits `request`, noting whether the node answered: any reply, even an error reply,
    /// shows the connection up; a failure to reach the node shows it down.
    async fn await_request(
        &self,
        request: Request,
        made: Instant,
        keep: Keep,
    ) -> redis::RedisResult<Value> {
        // An error reply comes as a value: made an error here, as `query_async` does.
        let result = Awaited::new(request, made, keep, &self.unawaited)
            .await
            .and_then(Value::extract_error);
        let answered = match &result {
            Ok(_) => true,
            Err(err) => !is_unreachable(err),
        };
        self.answering.store(answered, Ordering::Relaxed);
        result
    }

    /// Runs `command`, a call of `script`, and returns its reply, loading the script when
    /// the node lost it. For the lock scripts: a lock call dropped midway took nothing, and
    /// need not go on.
    async fn run_script(
        &self,
        script: &CachedScript,
        command: Arc<Cmd>,
    ) -> redis::RedisResult<Value> {
        // Shared by its sends rather than copied for each (a copy was two allocations and
        // the whole command copied, per node per round); only the SCRIPT LOAD of a reload
        // is copied.
        script
            .invoke(&command, Resend::AfterReload, |sent| {
                let sent = if std::ptr::eq(sent, &*command) {
                    Arc::clone(&command)
                } else {
                    Arc::new(sent.clone())
                };
                self.query::<Value, _>(sent)
            })
            .await
    }

    /// Runs a script that is safe to repeat (compare-and-delete, compare-and-pexpire, leave
    /// a queue, raise a counter) to its end once started, whether or not this future is
    /// still awaited, reload and one reconnect included: an unlock that never arrives would
    /// leave our key on that node for a whole TTL.
    async fn run_repeatable_script(
        &self,
        script: &Arc<CachedScript>,
        command: Arc<Cmd>,
    ) -> redis::RedisResult<Value> {
        let script = Arc::clone(script);
        let link = self.link.clone();
        let made = Instant::now();
        let request: Request = Box::pin(async move {
            let mut first = Some(made);
            let resend = Resend::AlsoAfterReconnect;
            script
                .invoke(&command, resend, |command| {
                    let now = first.take().unwrap_or_else(Instant::now);
                    link.clone()
                        .send(command, now)
                        .map(|reply| reply.and_then(Value::extract_error))
                })
                .await
        });
        self.await_request(request, made, Keep::Always).await
    }

    /// The channel prefix the scripts announce releases on: the classic one, a cluster
    /// member's sharded one, or none (empty) when releases are not announced.
    fn channel(&self) -> &'static str {
        match (self.announce_releases, &self.sharded) {
            (false, _) => "",
            (true, Some(_)) => SHARDED_RELEASE_CHANNEL_PREFIX,
            (true, None) => RELEASE_CHANNEL_PREFIX,
        }
    }

    /// A watch of `key`'s releases, where they are announced.
    async fn watch_releases(&self, key: &str) -> NodeReply {
        let watch = match (&self.releases, &self.sharded) {
            (Some(releases), _) => Some(releases.watch_key(key).await),
            (None, Some(sharded)) => sharded.watch_key(key).await,
            (None, None) => None,
        };
        watch.map_or(NodeReply::Unsupported, NodeReply::Watch)
    }

    /// A watch of the keys reserved for `client`'s waiters: on a standalone master only
    /// (see [`ShardedListener`](crate::backend::sharded::ShardedListener) for why a cluster member has none).
    async fn watch_reservations(&self, client: &str) -> NodeReply {
        match &self.releases {
            Some(releases) => NodeReply::Watch(releases.watch_waiters(client).await),
            None => NodeReply::Unsupported,
        }
    }

    /// Separates "did not answer in time" and "could not talk to the node" from "the node
    /// said no".
    pub(super) fn node_error(&self, err: RedisError) -> NodeError {
        if err.is_timeout() {
            NodeError::Timeout(self.request_timeout)
        } else if is_unreachable(&err) {
            NodeError::Connection(err.to_string())
        } else {
            NodeError::Redis(err.to_string())
        }
    }
}
