//! How a [`RedisNode`] answers each [`NodeRequest`]: the Redis command or script call that
//! carries it out, with the keys and arguments its script takes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::{Cmd, Value};

use super::RedisNode;
use crate::config::millis;
use crate::error::NodeError;
use crate::node::scripts::ScriptCall;
use crate::node::{LockNode, NodeHints, NodeReply, NodeRequest, QueuePlace};
use crate::token::LockToken;

impl LockNode for RedisNode {
    fn name(&self) -> &str {
        &self.name
    }

    /// While the node answers, its requests go out when first polled: each is one command
    /// (a script goes whole until the node has it), queued on the open connection.
    fn hints(&self) -> NodeHints {
        let open = self.answering.load(Ordering::Relaxed) && self.link.is_open();
        NodeHints::new().sends_when_polled(open)
    }

    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
        async move {
            let reply = match request {
                NodeRequest::Lock { keys, token, ttl } => {
                    NodeReply::Done(self.lock(keys, token, ttl).await?)
                }
                NodeRequest::Unlock { keys, token } => {
                    NodeReply::Done(self.unlock(keys, token).await?)
                }
                NodeRequest::Extend { keys, token, ttl } => {
                    NodeReply::Done(self.extend(keys, token, ttl).await?)
                }
                NodeRequest::Holds { keys, token } => {
                    NodeReply::Done(self.holds(keys, token).await?)
                }
                NodeRequest::ReadCounter { keys } => {
                    NodeReply::Counter(self.read_counter(keys).await?)
                }
                NodeRequest::RaiseCounter { keys, value } => {
                    NodeReply::Counter(self.raise_counter(keys, value).await?)
                }
                NodeRequest::LockWatching {
                    keys,
                    token,
                    ttl,
                    interest,
                } => NodeReply::Done(self.lock_watching(keys, token, ttl, interest).await?),
                NodeRequest::LockQueued {
                    keys,
                    token,
                    ttl,
                    place,
                } => NodeReply::Done(self.lock_queued(keys, token, ttl, place).await?),
                NodeRequest::LeaveQueue { keys, waiter } => {
                    self.leave_queue(keys, waiter).await?;
                    NodeReply::Done(true)
                }
                NodeRequest::WatchReleases { key } if self.announce_releases => {
                    NodeReply::Watch(self.releases.watch_key(key).await)
                }
                NodeRequest::WatchReservations { client } if self.announce_releases => {
                    NodeReply::Watch(self.releases.watch_waiters(client).await)
                }
                NodeRequest::WatchReleases { .. } | NodeRequest::WatchReservations { .. } => {
                    NodeReply::Unsupported
                }
                NodeRequest::LockShared {
                    keys,
                    token,
                    ttl,
                    writer,
                } => NodeReply::Done(self.lock_shared(keys, token, ttl, writer).await?),
                NodeRequest::LockExclusive {
                    keys,
                    token,
                    ttl,
                    waiting,
                } => NodeReply::Done(self.lock_exclusive(keys, token, ttl, waiting).await?),
                NodeRequest::Proclaim {
                    keys,
                    token,
                    record,
                } => NodeReply::Done(self.proclaim(keys, token, record).await?),
                NodeRequest::ReadProclamation { keys } => {
                    NodeReply::Text(self.read_proclamation(keys).await?)
                }
            };
            Ok(reply)
        }
        .boxed()
    }
}

/// The requests, as Redis commands and script calls.
impl RedisNode {
    async fn lock(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
    ) -> Result<bool, NodeError> {
        let ttl = millis(ttl);
        let [key] = keys else {
            let args = [token.as_str(), &ttl.to_string()];
            let call = ScriptCall::new(&self.scripts.lock, keys, &args);
            let taken = self.run_script(&call).await?;
            return Ok(taken == 1);
        };
        // The common case: one plain command, no script.
        let mut set = Cmd::with_capacity(6, key.len() + token.as_str().len() + 32);
        set.arg("SET")
            .arg(&**key)
            .arg(token.as_str())
            .arg("NX")
            .arg("PX")
            .arg(ttl);
        let reply: Value = self.query(set).await.map_err(|err| self.node_error(err))?;
        match reply {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            other => Err(NodeError::Redis(format!(
                "unexpected reply to SET NX: {other:?}"
            ))),
        }
    }

    async fn unlock(&self, keys: &[Arc<str>], token: &LockToken) -> Result<bool, NodeError> {
        if keys.is_empty() {
            return Err(no_keys());
        }
        let args = [token.as_str(), self.channel_prefix()];
        let call = ScriptCall::new(&self.scripts.unlock, keys, &args)
            .with_queues_of(keys)
            .with_markers_of(keys);
        let all = self.run_repeatable_script(&call).await?;
        Ok(all == 1)
    }

    async fn extend(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
    ) -> Result<bool, NodeError> {
        let ttl = millis(ttl).to_string();
        let args = [token.as_str(), &ttl];
        let call = ScriptCall::new(&self.scripts.extend, keys, &args);
        let extended = self.run_repeatable_script(&call).await?;
        Ok(extended == 1)
    }

    async fn holds(&self, keys: &[Arc<str>], token: &LockToken) -> Result<bool, NodeError> {
        let values = self.values(keys).await?;
        Ok(values
            .iter()
            .all(|value| value.as_deref() == Some(token.as_str())))
    }

    async fn read_counter(&self, keys: &[Arc<str>]) -> Result<u64, NodeError> {
        let mut highest = 0;
        for value in self.values(keys).await?.into_iter().flatten() {
            let counter = value.parse::<u64>().map_err(|_| {
                NodeError::Redis(format!("a fencing counter holds {value:?}, not a number"))
            })?;
            highest = highest.max(counter);
        }
        Ok(highest)
    }

    async fn raise_counter(&self, keys: &[Arc<str>], value: u64) -> Result<u64, NodeError> {
        let value = value.to_string();
        let args = [value.as_str()];
        let call = ScriptCall::new(&self.scripts.raise_counter, keys, &args);
        self.run_repeatable_script(&call).await
    }

    async fn lock_watching(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
        interest: Duration,
    ) -> Result<bool, NodeError> {
        if !self.announce_releases {
            return self.lock(keys, token, ttl).await;
        }
        let first = &keys[..1.min(keys.len())];
        let args = [
            token.as_str(),
            &millis(ttl).to_string(),
            &millis(interest).max(1).to_string(),
        ];
        let call = ScriptCall::new(&self.scripts.lock_watching, keys, &args).with_markers_of(first);
        let taken = self.run_script(&call).await?;
        Ok(taken == 1)
    }

    async fn lock_queued(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
        place: &QueuePlace,
    ) -> Result<bool, NodeError> {
        let ttl = millis(ttl).to_string();
        let ticket = place.ticket.to_string();
        let lifetime = millis(place.lifetime).max(1).to_string();
        let args = [
            token.as_str(),
            &ttl,
            place.waiter.as_str(),
            &ticket,
            &lifetime,
            self.channel_prefix(),
        ];
        // A waiter for several keys may move between their queues and pass on a key
        // reserved for it, so it needs every key's queue and marker, and the channel
        // prefix to announce what it passes on.
        let call = match keys {
            [] => return Err(no_keys()),
            [_] => {
                ScriptCall::new(&self.scripts.lock_queued, keys, &args[..5]).with_queues_of(keys)
            }
            _ => ScriptCall::new(&self.scripts.lock_queued_many, keys, &args)
                .with_queues_of(keys)
                .with_markers_of(keys),
        };
        let taken = self.run_script(&call).await?;
        Ok(taken == 1)
    }

    async fn leave_queue(&self, keys: &[Arc<str>], waiter: &LockToken) -> Result<(), NodeError> {
        if keys.is_empty() {
            return Err(no_keys());
        }
        // A waiter for several keys may be queued under any of them.
        let args = [waiter.as_str(), self.channel_prefix()];
        let call = ScriptCall::new(&self.scripts.leave_queue, keys, &args)
            .with_queues_of(keys)
            .with_markers_of(keys);
        self.run_repeatable_script(&call).await.map(drop)
    }
}

/// The error for a script call without keys, which a lock never makes.
fn no_keys() -> NodeError {
    NodeError::Redis("a lock needs at least one key".to_owned())
}
