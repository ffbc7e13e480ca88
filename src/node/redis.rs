//! [`RedisNode`]: a [`LockNode`] on a real Redis server, over one multiplexed connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script, Value};

use super::releases::{release_channel, ReleaseListener};
use super::{redact_url, LockNode, ReleaseWatch};
use crate::error::{LockError, NodeError};
use crate::fencing::RAISE_COUNTER_SCRIPT;
use crate::token::LockToken;

/// Deletes the key only if it still holds our token, atomically, and then announces the
/// release on the channel in ARGV[2] (none when empty) so that waiters retry at once.
const UNLOCK_SCRIPT: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    if ARGV[2] ~= "" then
        redis.call("PUBLISH", ARGV[2], ARGV[1])
    end
    return 1
end
return 0
"#;

/// Sets the key's TTL only if it still holds our token. PEXPIRE never creates a key, so a
/// lock that expired or was flushed cannot be revived.
const EXTEND_SCRIPT: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"#;

/// A Redis server used as a lock node.
///
/// It keeps one long-lived multiplexed connection that reconnects by itself when the server
/// goes away, so concurrent lock operations share it without a mutex and without a new TCP
/// connection per call. The connection is made lazily: a node that is down when the lock is
/// created counts as failed on each operation until it comes back, which is what lets a
/// quorum lock start while a minority of its nodes is down.
///
/// Scripts run by `EVALSHA`, falling back to loading the script when the server answers
/// `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
///
/// Releases are announced by `PUBLISH` on the channel `quorumlock:released:<key>`, and
/// waiters subscribe to it over a second, pub/sub connection opened on the first wait; see
/// [`announce_releases`](Self::announce_releases).
///
/// URLs follow the redis crate: `redis://[[user]:password@]host[:port][/db]`, `rediss://`
/// for TLS (with the default `tls` feature), and `redis+unix:///path`.
#[derive(Clone)]
pub struct RedisNode {
    name: String,
    connection: ConnectionManager,
    unlock: Script,
    extend: Script,
    raise_counter: Script,
    releases: Arc<ReleaseListener>,
    announce_releases: bool,
}

impl RedisNode {
    /// Prepares a node for `url`, without waiting for a connection.
    ///
    /// `connect_timeout` bounds each attempt to (re)connect. Fails only when the URL is
    /// malformed. Must be called inside a tokio runtime, which the connection's background
    /// task runs on.
    pub async fn connect(url: &str, connect_timeout: Duration) -> Result<Self, LockError> {
        let name = redact_url(url);
        let invalid = |err: RedisError| LockError::InvalidNode {
            node: name.clone(),
            reason: err.to_string(),
        };
        let client = redis::Client::open(url).map_err(invalid)?;
        let releases = Arc::new(ReleaseListener::new(client.clone(), connect_timeout));
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // Surface a dead node quickly as an error rather than hiding it behind a long
            // reconnect loop: the lock's own retries decide when to try again, and every
            // new command on a broken connection starts a new reconnect.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            // Requests to a node that stopped answering would otherwise stay queued forever.
            .set_response_timeout(Some(
                connect_timeout
                    .saturating_mul(20)
                    .max(Duration::from_secs(1)),
            ));
        let connection =
            ConnectionManager::new_lazy_with_config(client, config).map_err(invalid)?;
        Ok(RedisNode {
            name,
            connection,
            unlock: Script::new(UNLOCK_SCRIPT),
            extend: Script::new(EXTEND_SCRIPT),
            raise_counter: Script::new(RAISE_COUNTER_SCRIPT),
            releases,
            announce_releases: true,
        })
    }

    /// Whether releases are announced over pub/sub and waited for (on by default). Off,
    /// waiters retry after their jittered delay only, as with other Redlock clients.
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }

    async fn run_script(
        &self,
        script: &Script,
        key: &str,
        args: &[&str],
    ) -> Result<bool, NodeError> {
        let mut connection = self.connection.clone();
        let mut invocation = script.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        let reply: i64 = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(node_error)?;
        Ok(reply == 1)
    }
}

impl fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNode")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LockNode for RedisNode {
    fn name(&self) -> &str {
        &self.name
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let mut connection = self.connection.clone();
            let reply: Value = redis::cmd("SET")
                .arg(key)
                .arg(token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .query_async(&mut connection)
                .await
                .map_err(node_error)?;
            match reply {
                Value::Okay => Ok(true),
                Value::Nil => Ok(false),
                other => Err(NodeError::Redis(format!(
                    "unexpected reply to SET NX: {other:?}"
                ))),
            }
        }
        .boxed()
    }

    fn unlock<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let channel = if self.announce_releases {
                release_channel(key)
            } else {
                String::new()
            };
            self.run_script(&self.unlock, key, &[token.as_str(), &channel])
                .await
        }
        .boxed()
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let ttl = millis(ttl).to_string();
            self.run_script(&self.extend, key, &[token.as_str(), &ttl])
                .await
        }
        .boxed()
    }

    fn holds<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let mut connection = self.connection.clone();
            let value: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut connection)
                .await
                .map_err(node_error)?;
            Ok(value.as_deref() == Some(token.as_str()))
        }
        .boxed()
    }

    fn read_counter<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, NodeError>> {
        async move {
            let mut connection = self.connection.clone();
            let value: Option<u64> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut connection)
                .await
                .map_err(node_error)?;
            Ok(value.unwrap_or(0))
        }
        .boxed()
    }

    fn raise_counter<'a>(
        &'a self,
        key: &'a str,
        value: u64,
    ) -> BoxFuture<'a, Result<u64, NodeError>> {
        async move {
            let mut connection = self.connection.clone();
            let stored: u64 = self
                .raise_counter
                .key(key)
                .arg(value)
                .invoke_async(&mut connection)
                .await
                .map_err(node_error)?;
            Ok(stored)
        }
        .boxed()
    }

    fn watch_releases<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        async move {
            if self.announce_releases {
                Some(self.releases.watch(key).await)
            } else {
                None
            }
        }
        .boxed()
    }
}

/// The TTL in whole milliseconds, as Redis `PX` takes it. Configuration validation keeps
/// TTLs whole and far below `u64::MAX` milliseconds, so nothing is lost here.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// Separates "could not talk to the node" from "the node said no".
fn node_error(err: RedisError) -> NodeError {
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
    {
        NodeError::Connection(err.to_string())
    } else {
        NodeError::Redis(err.to_string())
    }
}
