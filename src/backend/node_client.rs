//! [`NodeClient`]: a [`NodeAddress`] made into the redis-rs client that reaches it, with
//! the TLS options of its node set; and [`TlsOptions::client`], the same for one server's
//! URL.

use std::fmt;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::ConnectionInfo;

use super::address::{NodeAddress, Reach};
use super::names::client_name;
use crate::error::LockError;

/// The redis-rs client of one member, made with its node set's TLS options
/// ([`Nodes::clients`](super::Nodes::clients)): for commands of your own on a lock's
/// servers beside the lock, such as an operator's reads.
#[non_exhaustive]
pub enum NodeClient {
    /// A standalone server.
    Server(redis::Client),
    /// A Redis Cluster: the seeds a `redis::cluster::ClusterClient` starts from.
    Cluster(Vec<ConnectionInfo>),
    /// The master that Redis Sentinel names (ask it with `async_get_client`).
    Sentinel(SentinelClient),
}

impl fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeClient::Server(client) => f
                .debug_tuple("Server")
                .field(&client_name(client.get_connection_info()))
                .finish(),
            NodeClient::Cluster(seeds) => f
                .debug_tuple("Cluster")
                .field(&seeds.iter().map(client_name).collect::<Vec<_>>())
                .finish(),
            NodeClient::Sentinel(_) => f.debug_tuple("Sentinel").finish_non_exhaustive(),
        }
    }
}

impl NodeAddress {
    /// The client that reaches this member, a server's made with `tls` (refused where they
    /// would be ignored: on a plain `redis://` server, a cluster, a caller's client).
    pub(crate) fn client(
        &self,
        #[cfg(feature = "tls")] tls: &super::tls::TlsOptions,
    ) -> Result<NodeClient, LockError> {
        let invalid = |reason: String| LockError::InvalidNode {
            node: self.name.clone(),
            reason,
        };
        #[cfg(feature = "tls")]
        let ignored = |what: &str| {
            if tls.is_default() {
                Ok(())
            } else {
                Err(invalid(format!("TLS options are not applied to {what}")))
            }
        };
        match &self.reach {
            #[cfg(feature = "tls")]
            Reach::Server(info) => tls.client_for(info.clone()).map(NodeClient::Server),
            #[cfg(not(feature = "tls"))]
            Reach::Server(info) => redis::Client::open(info.clone())
                .map(NodeClient::Server)
                .map_err(|err| err.to_string()),
            Reach::Client(client) => {
                #[cfg(feature = "tls")]
                ignored(
                    "a client you built; build it with its TLS settings \
                     (redis::Client::build_with_tls)",
                )?;
                Ok(NodeClient::Server(client.clone()))
            }
            Reach::Cluster(seeds) => {
                #[cfg(feature = "tls")]
                ignored("cluster members; a `rediss+cluster://` URL uses the public roots")?;
                Ok(NodeClient::Cluster(seeds.clone()))
            }
            Reach::Sentinel {
                sentinels,
                service,
                master,
            } => {
                let node =
                    SentinelNodeConnectionInfo::default().set_redis_connection_info(master.clone());
                SentinelClient::build(
                    sentinels.clone(),
                    service.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )
                .map(NodeClient::Sentinel)
                .map_err(|err| err.to_string())
            }
        }
        .map_err(invalid)
    }
}

#[cfg(feature = "tls")]
impl super::tls::TlsOptions {
    /// The client for the server at `url` (read as a [`NodeAddress`]) with these options,
    /// as a lock's node set makes it: for a node of your own
    /// ([`RedisNode::connect`](super::RedisNode::connect)), or commands beside the lock. A
    /// `redis://` (plain) URL is refused when any option is set, since they would be
    /// silently ignored, and so is a URL that is not one server's.
    pub fn client(&self, url: &str) -> Result<redis::Client, LockError> {
        let address = NodeAddress::parse(url)?;
        match address.client(self)? {
            NodeClient::Server(client) => Ok(client),
            _ => Err(LockError::InvalidNode {
                node: address.name().to_owned(),
                reason: "not one server's URL: a cluster's or a Sentinel's clients are \
                         made by its node set (Nodes::clients)"
                    .to_owned(),
            }),
        }
    }
}
