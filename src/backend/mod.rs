//! The Redis backend: [`RedisNode`], the [`LockNode`](crate::node::LockNode) on a real
//! Redis server, a Redis Cluster or a Sentinel-managed master, and everything it needs to
//! reach one: each member's address read once ([`NodeAddress`]), the node set with the
//! facts of its deployment ([`Nodes`]: TLS, hash tags, [`ReplicaAcks`], Sentinel members,
//! fencing on volatile nodes, the connect timeout), node names without credentials
//! ([`redact_url`], [`client_name`]), the connection of its own that is checked and
//! healed, the check of who answers, the pub/sub listeners of release announcements, and
//! the keeper of requests nobody awaits.
//!
//! It stands on the node contract ([`node`](crate::node)), which it implements, and on
//! the protocol ([`protocol`](crate::protocol)), whose commands and scripts it sends. The
//! coordinator above uses it to connect a lock's nodes and from then on sees them only as
//! `dyn LockNode`; the simulation, the other implementation, never reaches in here.
//!
//! - `redis_node`: the node, how it is made and checked, and how it answers requests;
//! - `address`: a member's URL read into the [`NodeAddress`] it names, by one parser;
//!   `node_client`: the [`NodeClient`] that reaches it; `names`: node names, and URLs as
//!   typed with their passwords masked;
//! - `nodes`: the node set ([`Nodes`], [`IntoNodes`]); `deployment`: its deployment facts
//!   and their rules; `connect`: a node set connected and checked for one lock;
//! - `tls` (feature `tls`): [`TlsOptions`](crate::TlsOptions) and the crypto provider;
//! - `transport`: a server's `Link` or a cluster's link, one way to send;
//!   `link`, with `connector` (a fixed address or the master Sentinel names), `identity`
//!   (what a server says about itself, and who may vote) and `silence` (a connection that
//!   stopped answering); `cluster`, a Redis Cluster's link;
//! - `releases`, `sharded`: the pub/sub listeners of a server and of a cluster member;
//! - `unawaited`: the keeper task of the requests a decided round no longer awaits.

mod abstention;
mod address;
mod clock;
mod cluster;
mod connect;
mod connector;
mod deployment;
mod identity;
mod link;
mod names;
mod node_client;
mod nodes;
mod redis_node;
mod releases;
mod sharded;
mod silence;
#[cfg(feature = "tls")]
pub(crate) mod tls;
mod transport;
mod unawaited;

pub use self::address::{IntoNodeAddress, NodeAddress};
pub(crate) use self::connect::connect;
pub use self::connect::{check_members, MemberCheck};
pub use self::deployment::ReplicaAcks;
pub use self::names::{client_name, mask_password, redact_url};
pub use self::node_client::NodeClient;
pub use self::nodes::{IntoNodes, Nodes};
pub use self::redis_node::RedisNode;
