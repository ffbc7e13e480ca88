//! [`NodeAddress`]: how one member of a lock is reached, read from its URL by the one
//! parser of every form, or taken from a caller's [`redis::Client`]; and
//! [`IntoNodeAddress`], what converts into one. (`node_client` makes an address into the
//! redis-rs client that reaches it.)
//!
//! A URL names one member of a lock:
//!
//! - a standalone master: `redis://`, `rediss://` (TLS), `redis+unix://` or `unix://` (a
//!   socket), and redis-rs's `valkey://` spellings of the same;
//! - a Redis Cluster, which votes once: `redis+cluster://[user:pw@]host:port[,host:port...]`
//!   (`rediss+cluster://` with TLS), given by one or more seed nodes (separated by commas
//!   or semicolons) from which the cluster client discovers the rest;
//! - a master managed by Redis Sentinel:
//!   `redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]`, the
//!   sentinels' addresses, the name of the monitored master (`sentinel monitor <service>
//!   ...`), and the credentials and database of the master (the sentinels themselves are
//!   reached without them).
//!
//! A URL that is none of these is an [`InvalidNode`](LockError::InvalidNode) error that
//! echoes it (its password masked), says which part is wrong and what to write instead.

use std::fmt;
use std::str::FromStr;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::names::{client_name, mask_password, redact_url};
use crate::error::LockError;

/// How one member of a lock is reached: a Redis server, a Redis Cluster by its seeds, the
/// master a Redis Sentinel names, or a [`redis::Client`] you built. Read once, from a URL
/// ([`parse`](Self::parse), [`FromStr`]) or a client ([`From`]); anything that converts
/// into one ([`IntoNodeAddress`]) is accepted where a lock's nodes are given.
///
/// ```
/// use quorumlock::NodeAddress;
///
/// let server = NodeAddress::parse("redis://:s3cret@10.0.0.1:6379/2")?;
/// assert_eq!(server.name(), "redis://10.0.0.1:6379/2"); // never the password
/// let cluster: NodeAddress = "redis+cluster://10.0.0.1:7001,10.0.0.2:7001".parse()?;
/// assert!(cluster.is_cluster());
///
/// let err = NodeAddress::parse("redis://:s3cret@10.0.0.1:63a9").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid node redis://:***@10.0.0.1:63a9: not a valid node URL: invalid port number \
///      (a port is a number from 1 to 65535, as in redis://host:6379)"
/// );
/// # Ok::<(), quorumlock::LockError>(())
/// ```
#[derive(Clone)]
pub struct NodeAddress {
    /// The URL without credentials, or the client's address.
    pub(super) name: String,
    pub(super) reach: Reach,
}

/// What a [`NodeAddress`] reaches, as read.
#[derive(Clone)]
pub(super) enum Reach {
    /// A standalone server; the TLS options of its node set apply.
    Server(ConnectionInfo),
    /// A client built by the caller, used as it is.
    Client(redis::Client),
    /// A Redis Cluster: the seeds its clients start from.
    Cluster(Vec<ConnectionInfo>),
    /// The master that Redis Sentinel names.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        service: String,
        master: RedisConnectionInfo,
    },
}

/// The forms of a node URL, for the errors that say what to write instead.
const FORMS: &str = "rediss:// for TLS, redis+unix:///path/to/socket, \
                     redis+cluster://host:port;... for a Redis Cluster, or \
                     redis+sentinel://host:port;.../<master name>";

impl NodeAddress {
    /// Reads `url` as one member of a lock (see the [module](crate::backend) for the
    /// forms). Fails with [`InvalidNode`](LockError::InvalidNode): the URL with its
    /// password masked, and why it is not a node URL.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let text = url.trim();
        let invalid = |reason: String| LockError::InvalidNode {
            node: mask_password(text),
            reason,
        };
        let reach = read(text).map_err(invalid)?;
        Ok(NodeAddress {
            name: redact_url(text),
            reach,
        })
    }

    /// The node's name, for logs and errors: its URL without credentials (see
    /// [`redact_url`]), or a client's address ([`client_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.reach, Reach::Cluster(_))
    }

    /// Whether it is a master that Redis Sentinel names.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.reach, Reach::Sentinel { .. })
    }
}

impl FromStr for NodeAddress {
    type Err = LockError;

    fn from_str(url: &str) -> Result<Self, LockError> {
        NodeAddress::parse(url)
    }
}

impl From<redis::Client> for NodeAddress {
    /// A member on a client you built (its TLS settings, username, protocol, resolver),
    /// named after its address without credentials ([`client_name`]).
    fn from(client: redis::Client) -> Self {
        NodeAddress {
            name: client_name(client.get_connection_info()),
            reach: Reach::Client(client),
        }
    }
}

impl fmt::Debug for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.reach {
            Reach::Server(_) => "server",
            Reach::Client(_) => "client",
            Reach::Cluster(_) => "cluster",
            Reach::Sentinel { .. } => "sentinel",
        };
        f.debug_struct("NodeAddress")
            .field("name", &self.name)
            .field("kind", &kind)
            .finish()
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// What converts into a [`NodeAddress`], as redis-rs's `IntoConnectionInfo` does into a
/// connection's: a URL (`&str`, `String`, `&String`), a caller's [`redis::Client`], or an
/// address. A URL that does not read is an [`InvalidNode`](LockError::InvalidNode) error.
pub trait IntoNodeAddress {
    /// The address.
    fn into_node_address(self) -> Result<NodeAddress, LockError>;
}

impl IntoNodeAddress for NodeAddress {
    fn into_node_address(self) -> Result<NodeAddress, LockError> {
        Ok(self)
    }
}

impl IntoNodeAddress for &str {
    fn into_node_address(self) -> Result<NodeAddress, LockError> {
        NodeAddress::parse(self)
    }
}

impl IntoNodeAddress for String {
    fn into_node_address(self) -> Result<NodeAddress, LockError> {
        NodeAddress::parse(&self)
    }
}

impl IntoNodeAddress for &String {
    fn into_node_address(self) -> Result<NodeAddress, LockError> {
        NodeAddress::parse(self)
    }
}

impl IntoNodeAddress for redis::Client {
    fn into_node_address(self) -> Result<NodeAddress, LockError> {
        Ok(NodeAddress::from(self))
    }
}

/// What `text` (trimmed) reaches, or why it is not a node URL.
fn read(text: &str) -> Result<Reach, String> {
    if text.is_empty() {
        return Err("not a node URL: it is empty (write redis://host:port)".to_owned());
    }
    if text.contains(char::is_whitespace) {
        return Err(if text.matches("://").count() > 1 {
            "not a node URL: several URLs separated by spaces; separate nodes with commas"
        } else {
            "not a valid node URL: it holds a space (remove it, or percent-encode it as %20 \
             in a password)"
        }
        .to_owned());
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        let shown = mask_password(text);
        return Err(format!(
            "not a node URL: missing `redis://` (write redis://{shown}, {FORMS})"
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    let reach = match scheme.as_str() {
        "redis+cluster" | "rediss+cluster" => cluster(&scheme, rest),
        "redis+sentinel" => sentinel(rest),
        "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "unix" | "valkey+unix" => {
            server(text, rest).map(Reach::Server)
        }
        _ => Err(format!(
            "`{scheme}://` is not a scheme of a node (write redis://host:port, {FORMS})"
        )),
    };
    reach.map_err(|reason| format!("not a valid node URL: {reason}"))
}

/// A standalone server's URL `text` (`rest` after its scheme), read into its connection.
fn server(text: &str, rest: &str) -> Result<ConnectionInfo, String> {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    if hosts.contains([',', ';']) {
        return Err(
            "a server URL names one host (give each node a URL of its own, \
                    separated by commas, or write redis+cluster://host:port,host:port for \
                    the seeds of one Redis Cluster)"
                .to_owned(),
        );
    }
    let url = url::Url::parse(text).map_err(|err| format!("{err}{}", url_hint(err)))?;
    check_parts(&url)?;
    url.into_connection_info().map_err(|err| err.to_string())
}

/// What to write instead, for a URL that does not parse.
fn url_hint(err: url::ParseError) -> &'static str {
    match err {
        url::ParseError::InvalidPort => {
            " (a port is a number from 1 to 65535, as in redis://host:6379)"
        }
        url::ParseError::EmptyHost => " (write the server's host, as in redis://host:6379)",
        url::ParseError::InvalidIpv6Address => {
            " (write an IPv6 address in brackets, as in redis://[::1]:6379)"
        }
        url::ParseError::InvalidDomainCharacter | url::ParseError::IdnaError => {
            " (a host holds letters, digits, `-` and `.`; percent-encode `@`, `/`, `:` and \
             `#` in a password)"
        }
        _ => "",
    }
}

/// The parts of a server URL that the Redis client would refuse with less to say.
fn check_parts(url: &url::Url) -> Result<(), String> {
    let unix = url.scheme().ends_with("unix");
    if unix {
        if url.path().is_empty() || url.path() == "/" {
            return Err("a socket URL names the socket's path \
                        (write redis+unix:///path/to/redis.sock)"
                .to_owned());
        }
    } else {
        match url.host_str() {
            None | Some("") => {
                return Err("no host (write the server's host, as in redis://host:6379)".into())
            }
            Some("0.0.0.0" | "[::]") => {
                return Err("0.0.0.0 and :: are no address to connect to \
                            (write the server's address)"
                    .to_owned())
            }
            Some(_) => {}
        }
        let db = url.path().trim_matches('/');
        if !db.is_empty() && db.parse::<i64>().is_err() {
            return Err(format!(
                "the database `/{db}` is not a number (write a database number, as in \
                 redis://host:6379/0, or nothing)"
            ));
        }
    }
    for (key, value) in url.query_pairs() {
        let known = ["2", "3", "resp2", "resp3"];
        if key == "protocol" && !known.contains(&value.as_ref()) {
            return Err(format!(
                "unknown protocol `{value}` (write ?protocol=2 or ?protocol=3)"
            ));
        }
    }
    match url.fragment() {
        Some(fragment) if fragment != "insecure" && url.scheme().ends_with('s') => Err(format!(
            "`#{fragment}` follows the URL; only #insecure may (no verification of the \
             server's certificate)"
        )),
        _ => Ok(()),
    }
}

/// A Redis Cluster member's URL after its scheme:
/// `[user:pw@]h1:p1,h2:p2[/][?...]`, each host a seed with the credentials and query of
/// the whole.
fn cluster(scheme: &str, rest: &str) -> Result<Reach, String> {
    let plain = scheme.trim_end_matches("+cluster");
    let (authority, query) = match rest.find(['/', '?', '#']) {
        Some(end) => rest.split_at(end),
        None => (rest, ""),
    };
    // A database number means nothing on a cluster; anything but a query is refused.
    let query = query.trim_start_matches('/');
    if !(query.is_empty() || query.starts_with(['?', '#'])) {
        return Err(
            "a cluster URL takes no path (Redis Cluster has one database; write \
                    redis+cluster://host:port,host:port)"
                .to_owned(),
        );
    }
    let (credentials, hosts) = hosts_of(authority);
    let seeds = hosts
        .map(|host| {
            let seed = format!("{plain}://{credentials}{host}{query}");
            let rest = &seed[plain.len() + 3..];
            server(&seed, rest).map_err(|reason| format!("the seed `{host}`: {reason}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if seeds.is_empty() {
        return Err("a cluster URL needs at least one seed node \
                    (write redis+cluster://host:port,host:port)"
            .to_owned());
    }
    #[cfg(feature = "tls")]
    if scheme.starts_with("rediss") {
        super::tls::install_crypto_provider();
    }
    // Built once here, so that seeds the cluster client refuses are an error of the URL.
    redis::cluster::ClusterClient::builder(seeds.clone())
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Reach::Cluster(seeds))
}

/// A Sentinel URL after its scheme:
/// `[[user]:password@]host:port[,host:port...]/<service>[/db]` (the sentinels, the
/// monitored master's name, and the master's credentials and database).
fn sentinel(rest: &str) -> Result<Reach, String> {
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let Some((authority, path)) = rest.split_once('/') else {
        return Err(
            "a Sentinel URL names the monitored master: redis+sentinel://host:port/<service>"
                .to_owned(),
        );
    };
    let (service, db) = path.split_once('/').unwrap_or((path, ""));
    if service.is_empty() {
        return Err("the master's service name is empty \
                    (write redis+sentinel://host:port/<service>)"
            .to_owned());
    }
    let (credentials, hosts) = hosts_of(authority);
    let sentinels = hosts
        .map(|host| {
            let url = format!("redis://{host}");
            server(&url, host).map_err(|reason| format!("the sentinel `{host}`: {reason}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if sentinels.is_empty() {
        return Err("a Sentinel URL needs at least one sentinel \
                    (write redis+sentinel://host:port/<service>)"
            .to_owned());
    }
    // The master's credentials and database, as a plain URL on any host would carry them.
    let db = if db.is_empty() {
        String::new()
    } else {
        format!("/{db}")
    };
    let master = format!("redis://{credentials}localhost{db}");
    let master = server(&master, &master["redis://".len()..])
        .map_err(|reason| format!("the master's credentials or database: {reason}"))?;
    Ok(Reach::Sentinel {
        sentinels,
        service: service.to_owned(),
        master: master.redis_settings().clone(),
    })
}

/// The credentials (`user:password@`, or empty) and the hosts of the authority of a URL
/// that lists several hosts, separated by commas, or by semicolons where commas separate
/// members (the CLI's `--nodes`).
fn hosts_of(authority: &str) -> (String, impl Iterator<Item = &str>) {
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts = hosts.split([',', ';']).filter(|host| !host.is_empty());
    (credentials, hosts)
}

#[cfg(test)]
mod tests {
    use super::{redact_url, NodeAddress, Reach};
    use crate::LockError;

    fn reason(url: &str) -> String {
        match NodeAddress::parse(url) {
            Err(LockError::InvalidNode { reason, .. }) => reason,
            other => panic!("{url}: expected InvalidNode, got {other:?}"),
        }
    }

    #[test]
    fn a_cluster_url_gives_one_seed_per_host_with_the_credentials_of_the_whole() {
        let whole =
            NodeAddress::parse("redis+cluster://:pw@10.0.0.1:7001,10.0.0.2:7002/?protocol=3")
                .unwrap();
        let Reach::Cluster(seeds) = whole.reach else {
            panic!("not a cluster")
        };
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[1].redis_settings().password(), Some("pw"));
        assert_eq!(seeds[1].addr().to_string(), "10.0.0.2:7002");
        let semicolons = seeds_of("redis+cluster://a:1;b:2");
        assert_eq!(semicolons, ["a:1", "b:2"]);
        let tls = NodeAddress::parse("rediss+cluster://h:1").unwrap();
        let Reach::Cluster(tls) = tls.reach else {
            panic!("not a cluster")
        };
        assert!(matches!(
            tls[0].addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
        assert!(!NodeAddress::parse("redis://h:1").unwrap().is_cluster());
        assert!(NodeAddress::parse("redis+cluster://h:1/2").is_err());
        assert!(NodeAddress::parse("redis+cluster://").is_err());
        assert_eq!(
            redact_url("redis+cluster://:pw@h:1,g:2"),
            "redis+cluster://h:1,g:2"
        );
    }

    fn seeds_of(url: &str) -> Vec<String> {
        match NodeAddress::parse(url).unwrap().reach {
            Reach::Cluster(seeds) => seeds.iter().map(|seed| seed.addr().to_string()).collect(),
            _ => panic!("{url}: not a cluster"),
        }
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_service() {
        assert!(!NodeAddress::parse("redis://h:1").unwrap().is_sentinel());
        assert!(
            NodeAddress::parse("redis+sentinel://:pw@h:26379,g:26379/mymaster/2")
                .unwrap()
                .is_sentinel()
        );
        for bad in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel:///m",
        ] {
            assert!(NodeAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_say_which_part_is_wrong_and_what_to_write() {
        for (url, says) in [
            ("", "empty"),
            ("redis://a:1 redis://b:2", "separate nodes with commas"),
            (
                "localhost:6379",
                "missing `redis://` (write redis://localhost:6379",
            ),
            ("http://h:1", "`http://` is not a scheme of a node"),
            ("redis://a:1,b:2", "redis+cluster://"),
            (
                "redis://h:notaport",
                "invalid port number (a port is a number",
            ),
            ("redis://h:1/x", "the database `/x` is not a number"),
            ("redis://h:1/?protocol=9", "unknown protocol `9`"),
            ("rediss://h:1/#verify", "only #insecure may"),
            ("redis+unix://", "the socket's path"),
            (
                "redis+cluster://a:1,b:x",
                "the seed `b:x`: invalid port number",
            ),
            ("redis+sentinel://h:1", "names the monitored master"),
        ] {
            let reason = reason(url);
            assert!(reason.contains(says), "{url}: {reason}");
        }
        let err = NodeAddress::parse("redis://:hunter2@h:notaport").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("redis://:***@h:notaport"), "{err}");
    }

    #[test]
    fn the_accepted_forms_read() {
        for url in [
            "redis://127.0.0.1:6379",
            " redis://user:pw@host:6379/2?protocol=3 ",
            "rediss://host:6380/#insecure",
            "redis+unix:///tmp/redis.sock",
            "unix:///tmp/redis.sock",
            "valkey://host:6379",
            "redis://[::1]:6379",
        ] {
            let address = NodeAddress::parse(url).unwrap();
            assert!(!address.name().contains("pw"), "{url}");
        }
        let client = redis::Client::open("redis://:pw@10.0.0.1:6379/3").unwrap();
        assert_eq!(NodeAddress::from(client).name(), "redis://10.0.0.1:6379/3");
    }
}
