//! [`Nodes`]: the node set of a lock, its members' addresses with what describes their
//! deployment rather than the lock (TLS, hash tags, replica acknowledgements, Sentinel
//! members, fencing on volatile nodes, the connect timeout); and [`IntoNodes`], what
//! converts into one.

use std::time::Duration;

use super::address::{IntoNodeAddress, NodeAddress};
use super::deployment::{Deployment, ReplicaAcks};
use super::node_client::NodeClient;
use crate::config::LockConfig;
use crate::error::LockError;
use crate::resource::KeyLayout;

/// The nodes of a lock, and the facts of their deployment that the lock's configuration
/// does not hold: how they are reached over TLS, how keys are laid out on them, whether
/// grants wait for replicas, which members may be Sentinel-managed, whether fencing may run
/// without an append-only file, and how long connecting may take.
///
/// Made from anything [`IntoNodes`] (a URL, a client, a list of them) with
/// [`new`](Self::new), then changed with its builder methods; or given as is where a lock
/// takes its nodes ([`Redlock::connect`](crate::Redlock::connect)), with the defaults.
/// The settings that involve the lock's configuration too (a replica acknowledgement's
/// timeout below the per-node timeout, fencing on nodes without an append-only file) are
/// checked when the lock connects.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{LockConfig, Nodes, Redlock, ReplicaAcks};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let nodes = Nodes::new(["redis://a:6379", "redis://b:6379", "redis://c:6379"])?
///     .connect_timeout(Duration::from_secs(3))
///     .replica_acks(ReplicaAcks::new(1, Duration::from_millis(20)));
/// let lock = Redlock::connect(nodes, LockConfig::default()).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Nodes {
    addresses: Vec<NodeAddress>,
    #[cfg(feature = "tls")]
    tls: super::tls::TlsOptions,
    deployment: Deployment,
}

impl Nodes {
    /// The default [`connect_timeout`](Self::connect_timeout): 1 second. A connection is
    /// made once and kept, so it can afford far more than one request's timeout: a TLS
    /// handshake across zones, or a process started on a loaded host, takes tens to
    /// hundreds of milliseconds.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = super::deployment::DEFAULT_CONNECT_TIMEOUT;

    /// The node set of `nodes`, with the default settings. Fails with
    /// [`InvalidNode`](LockError::InvalidNode) for an address that does not read.
    pub fn new(nodes: impl IntoNodes) -> Result<Self, LockError> {
        nodes.into_nodes()
    }

    /// The nodes of `addresses`, with the default settings.
    fn of(addresses: Vec<NodeAddress>) -> Self {
        Nodes {
            addresses,
            #[cfg(feature = "tls")]
            tls: super::tls::TlsOptions::default(),
            deployment: Deployment::default(),
        }
    }

    /// The members' addresses, in the order given.
    pub fn addresses(&self) -> &[NodeAddress] {
        &self.addresses
    }

    /// How many members the set has.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether it has none (a lock on it fails to connect).
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Verifies the `rediss://` servers, and authenticates to them, with `tls`: a private
    /// CA, a client certificate, or no verification (see
    /// [`TlsOptions`](crate::TlsOptions)). Options that would be ignored are an
    /// [`InvalidNode`](LockError::InvalidNode) error when the lock connects: for a plain
    /// `redis://` server, a Redis Cluster member, or a client you built. `rediss://` with
    /// public certificates needs none.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, tls: super::tls::TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Whether the keys of each lock carry a hash tag (`{<key>}`), so that the lock key,
    /// its queue and deadline keys, its watch marker and its fencing counter all hash to
    /// one Redis Cluster slot. Off by default on standalone nodes, which keeps the key
    /// names other Redlock clients use; always on for a set with a Redis Cluster member.
    /// See docs/operations.md, "Key layout".
    pub fn hash_tags(self, hash_tags: bool) -> Self {
        self.with(|deployment| deployment.hash_tags = hash_tags)
    }

    /// The replica acknowledgements each grant waits for; `None` (the default) counts a
    /// grant as soon as the master answers. See [`ReplicaAcks`].
    pub fn replica_acks(self, acks: impl Into<Option<ReplicaAcks>>) -> Self {
        let acks = acks.into();
        self.with(|deployment| deployment.replica_acks = acks)
    }

    /// Whether a Sentinel-managed master (`redis+sentinel://`) may be one member of
    /// several. Off by default: a quorum member must be an independent master, and a
    /// Sentinel failover promotes a replica that may not have the member's locks yet (see
    /// docs/safety.md, "Deployment shapes"). A lock's only node may be one without it.
    pub fn sentinel_members(self, allow: bool) -> Self {
        self.with(|deployment| deployment.sentinel_members = allow)
    }

    /// Whether fencing may run on nodes that keep no append-only file. Off (the default),
    /// a lock with [`fencing`](LockConfig::fencing) refuses such a node (`appendonly no`,
    /// or a user denied `INFO`): a node restarted empty forgets its counters, and a later
    /// holder could then be given a token an earlier holder already had (see
    /// [`crate::fencing`]). On, such nodes are used anyway, and tokens are only as
    /// monotonic as the nodes are durable.
    pub fn fencing_on_volatile_nodes(self, allow: bool) -> Self {
        self.with(|deployment| deployment.fencing_on_volatile_nodes = allow)
    }

    /// How long one attempt to connect (or reconnect) to a node may take, the check of the
    /// server and a TLS handshake included (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](Self::DEFAULT_CONNECT_TIMEOUT); zero is a
    /// [`ConfigError::ZeroConnectTimeout`](crate::ConfigError::ZeroConnectTimeout) of
    /// `connect`). Requests are bounded by the lock's
    /// [`node_timeout`](LockConfig::node_timeout) instead.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        self.with(|deployment| deployment.connect_timeout = timeout)
    }

    /// Whether [`connect`](crate::Redlock::connect) fails on any member whose server
    /// cannot serve the lock: a replica, a Redis Cluster node given as a server, a server
    /// that is not Redis, a database that does not exist, a server without an append-only
    /// file under fencing. Off (the default), such a member counts as failed, as it would
    /// if it turned into one later: an error-level event names it, its
    /// [`NodeMetrics::excluded`](crate::NodeMetrics::excluded) says why, and connect fails
    /// only when the other members cannot form a quorum. Two members that reach one
    /// server fail connect either way: that rule keeps one vote per server.
    pub fn strict_members(self, strict: bool) -> Self {
        self.with(|deployment| deployment.strict_members = strict)
    }

    /// Whether a server that started less than the longest lease ago (plus its drift
    /// allowance) abstains until it is that old, unless it keeps an append-only file
    /// fsynced on every write (`appendonly yes`, `appendfsync always`). On by default.
    ///
    /// Redlock is safe only if a node that lost its keys in a restart stays out of the
    /// quorum for the longest lease it may have granted ("delayed restarts"): otherwise a
    /// holder that had {A, B} of three, with C refusing, loses exclusion when B restarts
    /// empty and a second client gets {B, C}. A client cannot tell a restart from a first
    /// boot, so a fresh server abstains too. Such a node counts as failed, says until
    /// when (a `warn` event, [`NodeMetrics::excluded`](crate::NodeMetrics::excluded)), and
    /// is connected again when that time has passed. Turn it off only where every server's
    /// restart is known to be delayed past the longest lease by other means, or in tests
    /// that start their own nodes. See docs/safety.md, "Restarts".
    pub fn restart_abstention(self, on: bool) -> Self {
        self.with(|deployment| deployment.restart_abstention = on)
    }

    /// The longest lease any client of these nodes takes, for
    /// [`restart_abstention`](Self::restart_abstention); by default the lock's TTL plus its
    /// [`lock_delay`](crate::LockConfig::lock_delay) (the keys' expiry). Set it
    /// when other clients (other services, [`with_config`](crate::DistributedLock::with_config),
    /// `create_with_ttl`, the CLI's `--ttl`) take longer leases on the same nodes.
    pub fn longest_lease(self, lease: Duration) -> Self {
        self.with(|deployment| deployment.longest_lease = Some(lease))
    }

    /// Whether each server's clock is watched (on by default): every connection reads the
    /// server's `TIME` once a second, beside the lock's own requests, and a server whose
    /// clock steps by more than the lock's drift allowance, runs at a rate outside its
    /// drift factor (judged over 10 s), or stands still, abstains for the longest lease
    /// plus drift (see [`longest_lease`](Self::longest_lease)) after that is seen: it
    /// counts as failed, a `warn` event and
    /// [`NodeMetrics::excluded`](crate::NodeMetrics::excluded) say why, and
    /// [`LockMetrics::clock_anomalies`](crate::LockMetrics::clock_anomalies) counts it.
    /// A node whose clock stepped may grant until the next sample shows it: see
    /// docs/safety.md, "Clocks", for what that leaves.
    pub fn clock_checks(self, on: bool) -> Self {
        self.with(|deployment| deployment.clock_checks = on)
    }

    /// This set with `change` made to its deployment facts.
    fn with(mut self, change: impl FnOnce(&mut Deployment)) -> Self {
        change(&mut self.deployment);
        self
    }

    /// The Redis key a lock on `resource` lives under on these nodes, with `config`'s key
    /// prefix: hash-tagged where [`hash_tags`](Self::hash_tags) is on or a member is a
    /// Redis Cluster, else as [`LockConfig::key_for`]. Fails on a name that cannot be a
    /// lock.
    ///
    /// ```
    /// # use quorumlock::{LockConfig, Nodes};
    /// let config = LockConfig::builder().key_prefix("locks:").build()?;
    /// let plain = Nodes::new("redis://10.0.0.1:6379")?;
    /// assert_eq!(plain.key_for(&config, "job")?, "locks:job");
    /// let cluster = Nodes::new("redis+cluster://10.0.0.1:7001")?;
    /// assert_eq!(cluster.key_for(&config, "job")?, "{locks:job}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, config: &LockConfig, resource: &str) -> Result<String, LockError> {
        crate::resource::key_for(config, self.layout(), resource)
    }

    /// Each member's redis-rs client, in order, made with the TLS options: for commands of
    /// your own beside the lock. Fails as [`connect`](crate::Redlock::connect) does on TLS
    /// options a member would ignore.
    pub fn clients(&self) -> Result<Vec<NodeClient>, LockError> {
        self.addresses
            .iter()
            .map(|address| {
                address.client(
                    #[cfg(feature = "tls")]
                    &self.tls,
                )
            })
            .collect()
    }

    /// How the keys of a lock on these nodes are laid out.
    pub(crate) fn layout(&self) -> KeyLayout {
        if self.addresses.iter().any(NodeAddress::is_cluster) {
            KeyLayout::OneSlot
        } else if self.deployment.hash_tags {
            KeyLayout::HashTags
        } else {
            KeyLayout::Plain
        }
    }

    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// Checks the rules that involve the node count or the lock's configuration: a
    /// Sentinel-managed master is one member of several only when opted in, and the
    /// deployment facts must fit `config` (see [`Deployment::check`]).
    pub(crate) fn check(&self, config: &LockConfig) -> Result<(), LockError> {
        self.deployment.check(config)?;
        if config.fencing() {
            config.fencing_counters().check_layout(self.layout())?;
        }
        if self.addresses.len() > 1 && !self.deployment.sentinel_members {
            if let Some(address) = self.addresses.iter().find(|address| address.is_sentinel()) {
                return Err(LockError::InvalidNode {
                    node: address.name().to_owned(),
                    reason: "a Sentinel-managed master as one member of several: its \
                             failover promotes a replica that may not have the member's \
                             locks yet, so one member could vote twice for one resource; \
                             list independent masters, or opt in with \
                             Nodes::sentinel_members (docs/safety.md)"
                        .to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// What converts into a [`Nodes`]: a node set, one [`IntoNodeAddress`] (a URL, a
/// client, an address), or a `Vec`, an array or a slice of them (or a reference to a
/// `Vec` or an array, whose items are cloned).
///
/// ```
/// use quorumlock::{Nodes, redis};
///
/// assert_eq!(Nodes::new("redis://10.0.0.1:6379")?.len(), 1);
/// assert_eq!(Nodes::new(["redis://a:6379", "redis://b:6379", "redis://c:6379"])?.len(), 3);
/// let urls: Vec<String> = (1..=5).map(|i| format!("redis://127.0.0.1:700{i}")).collect();
/// assert_eq!(Nodes::new(&urls)?.len(), 5);
/// assert_eq!(Nodes::new(&urls[..3])?.len(), 3);
/// let client = redis::Client::open("redis://10.0.0.1:6379")?;
/// assert_eq!(Nodes::new(vec![client])?.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait IntoNodes {
    /// The node set, with the default settings unless it is one already.
    fn into_nodes(self) -> Result<Nodes, LockError>;
}

impl IntoNodes for Nodes {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        Ok(self)
    }
}

impl<T: IntoNodeAddress> IntoNodes for T {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        Ok(Nodes::of(vec![self.into_node_address()?]))
    }
}

impl<T: IntoNodeAddress> IntoNodes for Vec<T> {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        addresses(self)
    }
}

impl<T: IntoNodeAddress, const N: usize> IntoNodes for [T; N] {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        addresses(self)
    }
}

impl<T: IntoNodeAddress + Clone> IntoNodes for &[T] {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        addresses(self.iter().cloned())
    }
}

impl<T: IntoNodeAddress + Clone, const N: usize> IntoNodes for &[T; N] {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        addresses(self.iter().cloned())
    }
}

impl<T: IntoNodeAddress + Clone> IntoNodes for &Vec<T> {
    fn into_nodes(self) -> Result<Nodes, LockError> {
        addresses(self.iter().cloned())
    }
}

/// The node set of `items`, each read as an address.
fn addresses<T: IntoNodeAddress>(items: impl IntoIterator<Item = T>) -> Result<Nodes, LockError> {
    let addresses = items
        .into_iter()
        .map(IntoNodeAddress::into_node_address)
        .collect::<Result<_, _>>()?;
    Ok(Nodes::of(addresses))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{KeyLayout, Nodes, ReplicaAcks};
    use crate::{ConfigError, LockConfig, LockError};

    #[test]
    fn a_cluster_member_implies_hash_tags_and_one_slot() {
        let plain = Nodes::new("redis://h:1").unwrap();
        assert_eq!(plain.layout(), KeyLayout::Plain);
        let cluster = Nodes::new(["redis://h:1", "redis+cluster://c:1"]).unwrap();
        assert_eq!(cluster.layout(), KeyLayout::OneSlot);
        let opted_in = plain.hash_tags(true);
        assert_eq!(opted_in.layout(), KeyLayout::HashTags);
    }

    #[test]
    fn replica_acks_are_checked_against_the_node_timeout_and_cleared_with_none() {
        // The default per-node timeout is 50 ms: a WAIT as long does not fit.
        let config = LockConfig::default();
        let nodes = Nodes::new("redis://h:1").unwrap();
        let acks = nodes
            .clone()
            .replica_acks(ReplicaAcks::new(1, Duration::from_millis(50)));
        assert!(matches!(
            acks.check(&config),
            Err(LockError::Config(ConfigError::InvalidReplicaAcks { .. }))
        ));
        let cleared = acks.replica_acks(None);
        assert_eq!(cleared.deployment().replica_acks, None);
        assert!(cleared.check(&config).is_ok());
    }

    #[test]
    fn a_sentinel_member_of_several_needs_the_opt_in() {
        let config = LockConfig::default();
        let alone = Nodes::new("redis+sentinel://s:26379/orders").unwrap();
        assert!(alone.check(&config).is_ok());
        let several = Nodes::new(["redis://a:1", "redis+sentinel://s:26379/orders"]).unwrap();
        let err = several.check(&config).unwrap_err();
        assert!(err.to_string().contains("sentinel_members"), "{err}");
        assert!(several.sentinel_members(true).check(&config).is_ok());
    }
}
