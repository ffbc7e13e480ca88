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

use super::address::IntoNodeAddress;
use super::cluster::ClusterLink;
use super::connector::Connector;
use super::deployment::ReplicaAcks;
use super::identity::{Admission, Rejection};
use super::link::{Link, LinkSettings};
use super::node_client::NodeClient;
use super::releases::ReleaseListener;
use super::sharded::ShardedListener;
use super::transport::Transport;
use super::unawaited::{Bounds, Unawaited};
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
/// Its address is a [`NodeAddress`](super::NodeAddress): a URL such as
/// `redis://[[user]:password@]host[:port][/db]`, `rediss://` for TLS (with the default
/// `tls` feature), `redis+unix:///path`, or a client you built.
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

/// How a node is set up: its timeouts, the nodes it shares one lock's admission with, the
/// counters it counts into, whether it announces releases, the replica acknowledgements
/// of its grants.
pub(crate) struct NodeSetup {
    pub(crate) timeouts: NodeTimeouts,
    pub(crate) admission: Arc<Admission>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) announce: bool,
    pub(crate) replica_acks: Option<ReplicaAcks>,
}

/// How many requests nobody awaits one node may have in hand; see [`Bounds`].
const MOST_UNAWAITED: usize = 1024;

impl RedisNode {
    /// Prepares a node on `address` (a URL, a client you built, or a [`NodeAddress`](super::NodeAddress)),
    /// without waiting for a connection: a server (`redis://`, `rediss://`,
    /// `redis+unix://`), a Redis Cluster member (`redis+cluster://`, `rediss+cluster://`:
    /// one vote, whichever master serves a key) or a Sentinel-managed master
    /// (`redis+sentinel://`), read as a lock's node addresses are. For TLS options, give
    /// the client they make ([`TlsOptions::client`](crate::TlsOptions::client)).
    ///
    /// `timeout` bounds each attempt to (re)connect, and is taken as the time one request
    /// may take. Fails only when the address does not read. Must be called inside a tokio
    /// runtime, which the connection's background tasks run on.
    ///
    /// Unlike the nodes of [`Redlock::connect`](crate::Redlock::connect), a node made here
    /// is not checked before its first request (which server answers, and may it vote).
    pub async fn connect(
        address: impl IntoNodeAddress,
        timeout: Duration,
    ) -> Result<Self, LockError> {
        let address = address.into_node_address()?;
        let client = address.client(
            #[cfg(feature = "tls")]
            &crate::TlsOptions::default(),
        )?;
        let setup = NodeSetup {
            timeouts: NodeTimeouts {
                connect: timeout,
                request: timeout,
            },
            admission: Arc::default(),
            counters: Arc::default(),
            announce: true,
            replica_acks: None,
        };
        Self::open(client, address.name().to_owned(), &setup)
    }

    /// A node on `client`, called `name` (which must hold no credentials), set up as
    /// `setup` says: the one place that tells the kinds of member apart.
    pub(crate) fn open(
        client: NodeClient,
        name: String,
        setup: &NodeSetup,
    ) -> Result<Self, LockError> {
        let timeouts = setup.timeouts;
        let mut node = match client {
            NodeClient::Server(client) => {
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
                Self::over(Connector::Client(client), Some(releases), name, setup)
                    .announce_releases(setup.announce)
            }
            // Followed through failovers (see `connector`). Its releases are not awaited:
            // the master's address changes, and waiters retry after their jittered delay.
            NodeClient::Sentinel(sentinel) => {
                let connector = Connector::Sentinel(tokio::sync::Mutex::new(sentinel));
                Self::over(connector, None, name, setup)
            }
            NodeClient::Cluster(seeds) => {
                Self::open_cluster(seeds, name, setup)?.announce_releases(setup.announce)
            }
        };
        node.replica_acks = setup.replica_acks;
        Ok(node)
    }

    /// A node over one link, made by `connector`.
    fn over(
        connector: Connector,
        releases: Option<Arc<ReleaseListener>>,
        name: String,
        setup: &NodeSetup,
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
            connect_timeout: setup.timeouts.connect,
            silence_limit: setup.timeouts.silence_limit(),
        };
        let link = Link::new(
            name.clone(),
            connector,
            config,
            settings,
            Arc::clone(&setup.admission),
            Arc::clone(&setup.counters),
        );
        Self::on(name, Transport::Server(Arc::new(link)), releases, setup)
    }

    /// A node on the Redis Cluster of `seeds`, one member of the lock, called `name`.
    /// Releases are announced over sharded pub/sub ([`ShardedListener`]).
    fn open_cluster(
        seeds: Vec<redis::ConnectionInfo>,
        name: String,
        setup: &NodeSetup,
    ) -> Result<Self, LockError> {
        let timeouts = setup.timeouts;
        let client = redis::cluster::ClusterClient::builder(seeds.clone())
            .connection_timeout(timeouts.connect)
            .build()
            .map_err(|err| LockError::InvalidNode {
                node: name.clone(),
                reason: err.to_string(),
            })?;
        let admission = Arc::clone(&setup.admission);
        let link = ClusterLink::new(name.clone(), client, timeouts.connect, admission);
        let mut node = Self::on(name, Transport::Cluster(Arc::new(link)), None, setup);
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
        setup: &NodeSetup,
    ) -> Self {
        let timeouts = setup.timeouts;
        let bounds = Bounds {
            kept_for: timeouts.kept_for(),
            most: MOST_UNAWAITED,
        };
        RedisNode {
            name,
            link,
            scripts: Arc::new(NodeScripts::new()),
            answering: Arc::new(AtomicBool::new(false)),
            unawaited: Unawaited::start(timeouts.request, bounds, Arc::clone(&setup.counters)),
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

    /// One reading of the server's clock (`TIME`), bracketed by the client's instants of
    /// the request and the reply; `None` when the node did not answer in time.
    pub(crate) async fn sample_clock(&self) -> Option<super::clock::Sample> {
        let sent = tokio::time::Instant::now();
        let reply: redis::Value = self.query(redis::cmd("TIME")).await.ok()?;
        let received = tokio::time::Instant::now();
        Some(super::clock::Sample {
            sent,
            received,
            server: super::clock::server_time(&reply)?,
        })
    }

    /// Whether releases are announced over pub/sub and waited for (on by default). Off,
    /// waiters retry after their jittered delay only, as with other Redlock clients.
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }
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
