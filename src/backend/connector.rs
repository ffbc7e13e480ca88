//! [`Connector`]: how a [`Link`](super::link::Link) reaches its server, at a fixed address
//! or at the master that Redis Sentinel names.
//!
//! A Sentinel-managed master (the one node of a [`RedisLock`](crate::RedisLock), or, opted
//! in, a member of a quorum) is a link whose every new connection asks the sentinels which
//! server is the master now, so the node follows a failover: its connection breaks, the
//! next one reaches the promoted replica, which the server check admits once it reports
//! `role:master`. Its URL is read with the others' ([`NodeAddress`](super::NodeAddress)).

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, RedisResult};

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
    /// The database number of a fixed address's URL; `None` behind a Sentinel.
    pub(crate) fn database(&self) -> Option<i64> {
        match self {
            Connector::Client(client) => Some(client.get_connection_info().redis_settings().db()),
            Connector::Sentinel(_) => None,
        }
    }

    /// The host and port of a fixed `rediss://` address.
    pub(crate) fn tls_address(&self) -> Option<(String, u16)> {
        match self {
            Connector::Client(client) => match client.get_connection_info().addr() {
                redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                _ => None,
            },
            Connector::Sentinel(_) => None,
        }
    }

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
