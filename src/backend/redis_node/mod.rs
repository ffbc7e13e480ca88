//! [`RedisNode`]: a [`LockNode`](crate::node::LockNode) on a real Redis server, over one
//! multiplexed connection (or a Redis Cluster's client): how it is made and checked.
//! `requests` is how it answers each request, `replicas` how a grant waits for replicas.

mod replicas;
mod requests;

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;

use super::address::{clients_for_urls, Target};
use super::cluster::ClusterLink;
use super::connector::Connector;
use super::identity::{Admission, Rejection};
use super::link::{Link, LinkSettings};
use super::names::{client_name, redact_url};
use super::releases::ReleaseListener;
use super::sharded::ShardedListener;
use super::transport::Transport;
use super::unawaited::{Bounds, Unawaited};
use crate::config::{LockConfig, ReplicaAcks};
use crate::error::LockError;
use crate::metrics::Counters;
use crate::protocol::NodeScripts;

/// A Redis server used as a lock node.
///
/// It keeps one long-lived multiplexed connection, so concurrent lock operations share it
/// without a mutex and without a new TCP connection per call. The connection is checked
/// when made (the server must be a standalone master, and no other node of the same lock
/// may reach the same server; see [`Redlock::connect`](crate::Redlock::connect)), re-made
/// in the background when it breaks or goes silent, and requests made while it is being
/// made reach the server in the order they were made. A node that is down counts as
/// failed on each operation until it comes back, which is what lets a quorum lock start
/// while a minority of its nodes is down.
///
/// Scripts run by `EVALSHA`, falling back to loading the script when the server answers
/// `NOSCRIPT` (after a restart or `SCRIPT FLUSH`). An unlock, an extension, a queue exit
/// and a counter raise are each driven to their end (a script reload and one reconnect
/// included) once started, whether or not anybody still awaits them.
///
/// Releases are announced by `PUBLISH`, only when somebody waits: on
/// `quorumlock:waiter:<client>` when the key was handed to a queued waiter of that client,
/// else on `quorumlock:released:<key>` while a racing waiter marked the key as watched.
/// Waiters subscribe over a second, pub/sub connection opened on the first wait; see
/// [`announce_releases`](Self::announce_releases).
///
/// URLs follow the redis crate: `redis://[[user]:password@]host[:port][/db]`, `rediss://`
/// for TLS (with the default `tls` feature), and `redis+unix:///path`.
#[derive(Clone)]
pub struct RedisNode {
    name: String,
    link: Transport,
    scripts: Arc<NodeScripts>,
    /// Whether the last request that ended had an answer from the node (see
    /// [`NodeHints::sends_when_polled`](crate::node::NodeHints::sends_when_polled)).
    answering: Arc<AtomicBool>,
    /// Takes requests sent and no longer awaited, so that they still go out.
    unawaited: Unawaited,
    /// The pub/sub side of a standalone master.
    releases: Option<Arc<ReleaseListener>>,
    /// The sharded pub/sub side of a Redis Cluster member.
    sharded: Option<Arc<ShardedListener>>,
    announce_releases: bool,
    /// The replica acknowledgements a grant waits for (`WAIT`), if any.
    replica_acks: Option<ReplicaAcks>,
    /// What a request that timed out on the link reports.
    request_timeout: Duration,
}

/// The timeouts a node runs with, from the lock's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeTimeouts {
    /// Bounds each attempt to (re)connect, the server check included.
    pub(crate) connect: Duration,
    /// How long one request may take (the lock's per-node timeout).
    pub(crate) request: Duration,
}

impl NodeTimeouts {
    /// How long a connection may leave requests unanswered, with no reply at all, before it
    /// is given up as silent: four request timeouts (a node that misses that many rounds in
    /// a row is not merely slow), and never under 100 ms (scheduling noise).
    fn silence_limit(self) -> Duration {
        self.request
            .saturating_mul(4)
            .max(Duration::from_millis(100))
    }

    /// How long a request nobody awaits is driven: room for one reconnect and a script
    /// reload after it.
    fn kept_for(self) -> Duration {
        self.connect.saturating_add(self.request.saturating_mul(2))
    }
}

/// How many requests nobody awaits one node may have in hand; see [`Bounds`].
const MOST_UNAWAITED: usize = 1024;

impl RedisNode {
    /// Prepares a node for `url`, without waiting for a connection: a server
    /// (`redis://`, `rediss://`, `redis+unix://`), a Redis Cluster member
    /// (`redis+cluster://`, `rediss+cluster://`: one vote, whichever master serves a key) or
    /// a Sentinel-managed master (`redis+sentinel://`), as a lock's node URLs are read.
    ///
    /// `timeout` bounds each attempt to (re)connect, and is taken as the time one request
    /// may take. Fails only when the URL is malformed. Must be called inside a tokio
    /// runtime, which the connection's background tasks run on.
    ///
    /// Unlike the nodes of [`Redlock::connect`](crate::Redlock::connect), a node made here
    /// is not checked before its first request (which server answers, and may it vote).
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, LockError> {
        let read = clients_for_urls(
            [url],
            #[cfg(feature = "tls")]
            None,
        );
        Self::from_read(url, read, timeout)
    }

    /// [`connect`](Self::connect) with `tls` for a `rediss://` URL, as
    /// [`RedisLock::connect_tls`](crate::RedisLock::connect_tls) reads its URL: options
    /// that would be ignored (on a `redis://` URL, or a cluster member's) are an error.
    #[cfg(feature = "tls")]
    pub async fn connect_tls(
        url: &str,
        tls: &super::tls::TlsOptions,
        timeout: Duration,
    ) -> Result<Self, LockError> {
        Self::from_read(url, clients_for_urls([url], Some(tls)), timeout)
    }

    /// The node for `url`, read into `read`.
    fn from_read(
        url: &str,
        read: Result<Vec<(String, Target)>, LockError>,
        timeout: Duration,
    ) -> Result<Self, LockError> {
        let Some((name, target)) = read?.into_iter().next() else {
            return Err(LockError::InvalidNode {
                node: redact_url(url),
                reason: "no node in the URL".to_owned(),
            });
        };
        match target {
            // Named after the client's address, as `from_client` names its nodes.
            Target::Server(client) => Ok(Self::from_client(client, timeout)),
            target => {
                let timeouts = NodeTimeouts {
                    connect: timeout,
                    request: timeout,
                };
                Self::open_target(target, name, timeouts, Arc::default(), Arc::default(), true)
            }
        }
    }

    /// A node on `target` (see [`open`](Self::open) for the other arguments), which
    /// announces its releases when `announce` says so and the kind of node can.
    fn open_target(
        target: Target,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
        announce: bool,
    ) -> Result<Self, LockError> {
        match target {
            Target::Server(client) => {
                Ok(Self::open(client, name, timeouts, admission, counters)
                    .announce_releases(announce))
            }
            Target::Sentinel(sentinel) => Ok(Self::open_sentinel(
                sentinel, name, timeouts, admission, counters,
            )),
            Target::Cluster(seeds) => {
                Self::open_cluster(seeds, name, timeouts, admission, counters)
                    .map(|node| node.announce_releases(announce))
            }
        }
    }

    /// Prepares a node on a client made by the caller (its TLS settings, username,
    /// protocol, resolver), without waiting for a connection; see
    /// [`connect`](Self::connect). The node is named after the client's address, without
    /// credentials ([`client_name`]).
    pub fn from_client(client: redis::Client, timeout: Duration) -> Self {
        let timeouts = NodeTimeouts {
            connect: timeout,
            request: timeout,
        };
        let name = client_name(client.get_connection_info());
        Self::open(client, name, timeouts, Arc::default(), Arc::default())
    }

    /// A node on `client`, called `name` (which must hold no credentials), among the nodes
    /// sharing `admission`, counting into `counters`.
    pub(crate) fn open(
        client: redis::Client,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Self {
        #[cfg(feature = "tls")]
        if matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ) {
            super::tls::install_crypto_provider();
        }
        let releases = Arc::new(ReleaseListener::new(
            client.clone(),
            timeouts.connect,
            timeouts.request,
        ));
        let connector = Connector::Client(client);
        Self::over(
            connector,
            Some(releases),
            name,
            timeouts,
            admission,
            counters,
        )
    }

    /// A node on the master the sentinels of `sentinel` name, followed through failovers
    /// (see [`connector`](super::connector)). Its releases are not announced: the master's
    /// address changes, and waiters retry after their jittered delay.
    pub(crate) fn open_sentinel(
        sentinel: redis::sentinel::SentinelClient,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Self {
        let connector = Connector::Sentinel(tokio::sync::Mutex::new(sentinel));
        Self::over(connector, None, name, timeouts, admission, counters)
    }

    /// A node over one link, made by `connector`.
    fn over(
        connector: Connector,
        releases: Option<Arc<ReleaseListener>>,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            // The link bounds the connection and the server check together.
            .set_connection_timeout(None)
            // No timer per request: the coordinator bounds every call to a node by the
            // per-node timeout (one deadline per round), and abandons it then; the link
            // notices a connection that stopped answering.
            .set_response_timeout(None)
            // Room for bursts: a request polled while the connection's queue is full waits
            // to go out, and a late lock request left unawaited would then never go out.
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let settings = LinkSettings {
            connect_timeout: timeouts.connect,
            silence_limit: timeouts.silence_limit(),
        };
        let link = Link::new(
            name.clone(),
            connector,
            config,
            settings,
            admission,
            Arc::clone(&counters),
        );
        Self::on(
            name,
            Transport::Server(Arc::new(link)),
            releases,
            timeouts,
            counters,
        )
    }

    /// A node on the Redis Cluster of `seeds`, one member of the lock, called `name`,
    /// among the nodes sharing `admission`. Releases are announced over sharded pub/sub
    /// ([`ShardedListener`]).
    pub(crate) fn open_cluster(
        seeds: Vec<String>,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Result<Self, LockError> {
        let client = redis::cluster::ClusterClient::builder(seeds.clone())
            .connection_timeout(timeouts.connect)
            .build()
            .map_err(|err| LockError::InvalidNode {
                node: name.clone(),
                reason: err.to_string(),
            })?;
        let link = ClusterLink::new(name.clone(), client, timeouts.connect, admission);
        let mut node = Self::on(
            name,
            Transport::Cluster(Arc::new(link)),
            None,
            timeouts,
            counters,
        );
        node.scripts = Arc::new(NodeScripts::sent_whole());
        node.sharded = Some(Arc::new(ShardedListener::new(
            seeds,
            timeouts.connect,
            timeouts.request,
        )));
        Ok(node)
    }

    fn on(
        name: String,
        link: Transport,
        releases: Option<Arc<ReleaseListener>>,
        timeouts: NodeTimeouts,
        counters: Arc<Counters>,
    ) -> Self {
        let bounds = Bounds {
            kept_for: timeouts.kept_for(),
            most: MOST_UNAWAITED,
        };
        RedisNode {
            name,
            link,
            scripts: Arc::new(NodeScripts::new()),
            answering: Arc::new(AtomicBool::new(false)),
            unawaited: Unawaited::start(timeouts.request, bounds, counters),
            releases,
            sharded: None,
            replica_acks: None,
            announce_releases: true,
            request_timeout: timeouts.request,
        }
    }

    /// Connects now and checks the server; `Err` says why the server was not taken into
    /// use (unreachable, or refused: see [`identity`](super::identity)).
    pub(crate) async fn check(&self) -> Result<(), Rejection> {
        self.link.connect().await
    }

    /// Whether releases are announced over pub/sub and waited for (on by default). Off,
    /// waiters retry after their jittered delay only, as with other Redlock clients.
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }
}

/// Nodes on `clients` (each with its name), connected and checked at once: a server that
/// cannot serve the lock (see [`identity`](super::identity)), or that another client of the
/// list reaches too, is an [`InvalidNode`](LockError::InvalidNode) error. A node that
/// cannot be reached now is kept: it counts as failed until it comes back, and is checked
/// then.
pub(crate) async fn connect_checked(
    clients: Vec<(String, Target)>,
    config: &LockConfig,
    counters: &Arc<Counters>,
) -> Result<Vec<RedisNode>, LockError> {
    let timeouts = NodeTimeouts {
        connect: config.connect_timeout(),
        request: config.node_timeout(),
    };
    let admission = Arc::new(Admission::new(
        config.fencing() && !config.fencing_on_volatile_nodes(),
    ));
    let nodes: Vec<RedisNode> = clients
        .into_iter()
        .map(|(name, target)| {
            RedisNode::open_target(
                target,
                name,
                timeouts,
                Arc::clone(&admission),
                Arc::clone(counters),
                config.notify_releases(),
            )
        })
        .map(|node: Result<RedisNode, LockError>| {
            node.map(|mut node| {
                node.replica_acks = config.replica_acks();
                node
            })
        })
        .collect::<Result<_, _>>()?;
    let checks = futures::future::join_all(nodes.iter().map(RedisNode::check)).await;
    for (node, check) in nodes.iter().zip(checks) {
        match check {
            Ok(()) => {}
            Err(Rejection::Refused(refusal)) => {
                return Err(LockError::InvalidNode {
                    node: node.name.clone(),
                    reason: refusal.to_string(),
                })
            }
            Err(Rejection::Failed(reason)) => {
                tracing::warn!(node = %node.name, %reason, "node unreachable; it counts as failed until it answers");
            }
        }
    }
    Ok(nodes)
}

impl fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNode")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How many commands may wait to go out on one node's connection.
const PIPELINE_BUFFER: usize = 4096;
