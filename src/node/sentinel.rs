//! A master managed by Redis Sentinel, as the one node of a [`RedisLock`](crate::RedisLock):
//! each new connection asks the sentinels which server is the master now, so the node
//! follows a failover (its connection breaks, the next one reaches the promoted replica,
//! which the server check admits once it reports `role:master`).
//!
//! A Sentinel URL is `redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]`:
//! the sentinels' addresses, the name of the monitored master (`sentinel monitor <service>
//! ...`), and the credentials and database of the master (the sentinels themselves are
//! reached without them).

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisResult};

use crate::error::LockError;

use super::redact_url;

/// How a link reaches its server.
// One per node, made when the lock connects: its size is of no concern.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Connector {
    /// At a fixed address.
    Client(redis::Client),
    /// At whichever address the sentinels give for the master now.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

impl Connector {
    /// A new connection to the server, with `config`.
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        match self {
            Connector::Client(client) => {
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
            Connector::Sentinel(sentinel) => {
                // One lookup at a time: the client caches its sentinel connections.
                let master = sentinel.lock().await.async_get_client().await?;
                master
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
        }
    }
}

/// The sentinel client for a URL
/// `redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]` (the
/// sentinels, the monitored master's name, and the master's credentials and database);
/// `None` for another scheme, and an [`InvalidNode`](LockError::InvalidNode)
/// error for a malformed Sentinel URL.
///
/// ```
/// # use quorumlock::node::sentinel_client;
/// assert!(sentinel_client("redis+sentinel://10.0.0.1:26379/mymaster").unwrap().is_ok());
/// assert!(sentinel_client("redis+sentinel://10.0.0.1:26379").unwrap().is_err());
/// assert!(sentinel_client("redis://10.0.0.1:6379").is_none());
/// ```
pub fn sentinel_client(url: &str) -> Option<Result<SentinelClient, LockError>> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("redis+sentinel") {
        return None;
    }
    let invalid = |reason: String| LockError::InvalidNode {
        node: redact_url(url),
        reason,
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let Some((authority, path)) = rest.split_once('/') else {
        return Some(Err(invalid(
            "a Sentinel URL names the monitored master: redis+sentinel://host:port/<service>"
                .to_owned(),
        )));
    };
    let (service, db) = match path.split_once('/') {
        Some((service, db)) => (service, db),
        None => (path, ""),
    };
    if service.is_empty() {
        return Some(Err(invalid(
            "the master's service name is empty".to_owned(),
        )));
    }
    let (credentials, hosts) = super::address::hosts_of(authority);
    let sentinels: Vec<String> = hosts.map(|host| format!("redis://{host}")).collect();
    if sentinels.is_empty() {
        return Some(Err(invalid(
            "a Sentinel URL needs at least one sentinel".to_owned(),
        )));
    }
    // The master's credentials and database, as a plain URL on any host would carry them.
    let db = if db.is_empty() {
        String::new()
    } else {
        format!("/{db}")
    };
    let master = match format!("redis://{credentials}localhost{db}").into_connection_info() {
        Ok(info) => info.redis_settings().clone(),
        Err(err) => return Some(Err(invalid(err.to_string()))),
    };
    let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(master);
    // Owned: without TLS support `build` takes a `String`.
    let service: String = service.to_owned();
    Some(
        SentinelClient::build(sentinels, service, Some(node), SentinelServerType::Master)
            .map_err(|err| invalid(err.to_string())),
    )
}

#[cfg(test)]
mod tests {
    use super::sentinel_client;

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_service() {
        assert!(sentinel_client("redis://h:1").is_none());
        assert!(
            sentinel_client("redis+sentinel://:pw@h:26379,g:26379/mymaster/2")
                .unwrap()
                .is_ok()
        );
        for bad in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel:///m",
        ] {
            assert!(sentinel_client(bad).unwrap().is_err(), "{bad}");
        }
    }
}
