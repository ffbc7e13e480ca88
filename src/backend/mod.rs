//! The Redis backend: [`RedisNode`], the [`LockNode`](crate::node::LockNode) on a real
//! Redis server, a Redis Cluster or a Sentinel-managed master, and everything it needs to
//! reach one: the URL of each member read once ([`cluster_seeds`], [`sentinel_client`]),
//! node names without credentials ([`redact_url`], [`client_name`]), TLS, the connection
//! of its own that is checked and healed, the check of who answers, the pub/sub
//! listeners of release announcements, and the keeper of requests nobody awaits.
//!
//! It stands on the node contract ([`node`](crate::node)), which it implements, and on
//! the protocol ([`protocol`](crate::protocol)), whose commands and scripts it sends. The
//! coordinator above uses it to connect a lock's nodes and from then on sees them only as
//! `dyn LockNode`; the simulation, the other implementation, never reaches in here.
//!
//! - `redis_node`: the node, how it is made and checked, and how it answers requests;
//! - `address`: a lock's URLs read into the members they name; `names`: their names;
//! - `tls` (feature `tls`): [`TlsOptions`](crate::TlsOptions) and the crypto provider;
//! - `transport`: a server's `Link` or a cluster's link, one way to send;
//!   `link`, with `connector` (a fixed address or the master Sentinel names), `identity`
//!   (what a server says about itself, and who may vote) and `silence` (a connection that
//!   stopped answering); `cluster`, a Redis Cluster's link;
//! - `releases`, `sharded`: the pub/sub listeners of a server and of a cluster member;
//! - `unawaited`: the keeper task of the requests a decided round no longer awaits.

mod address;
mod cluster;
mod connector;
mod identity;
mod link;
mod names;
mod redis_node;
mod releases;
mod sharded;
mod silence;
#[cfg(feature = "tls")]
pub(crate) mod tls;
mod transport;
mod unawaited;

pub(crate) use self::address::{clients_for_urls, named_clients, Target};
pub use self::address::{cluster_seeds, sentinel_client};
pub use self::names::{client_name, redact_url};
pub(crate) use self::redis_node::connect_checked;
pub use self::redis_node::RedisNode;
