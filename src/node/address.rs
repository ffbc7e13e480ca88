//! A node's address: its name for logs and errors (the address without credentials), and
//! the clients for a lock's URLs or the caller's clients, each with its name.
//!
//! A URL names one member of a lock: a standalone master (`redis://`, `rediss://`,
//! `redis+unix://`), or a Redis Cluster (`redis+cluster://host:port[,host:port...]`,
//! `rediss+cluster://` with TLS), given by one or more seed nodes (separated by commas or
//! semicolons) from which the cluster client discovers the rest.

use crate::error::LockError;

/// What one member of a lock is, and the client that reaches it.
// Made once per member when a lock connects: the size of a client is of no concern.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    /// A standalone master.
    Server(redis::Client),
    /// A Redis Cluster, which votes once: the seed URLs its clients start from.
    Cluster(Vec<String>),
    /// The master that Redis Sentinel names, whichever server that is now.
    Sentinel(redis::sentinel::SentinelClient),
}

/// The URL schemes of a Redis Cluster member.
const CLUSTER_SCHEMES: [(&str, &str); 2] =
    [("redis+cluster", "redis"), ("rediss+cluster", "rediss")];

/// A URL with any user name, password and query removed, fit for logs and errors.
///
/// ```
/// # use quorumlock::node::redact_url;
/// assert_eq!(redact_url("redis://:s3cret@10.0.0.1:6379/2"), "redis://10.0.0.1:6379/2");
/// assert_eq!(redact_url("rediss://user:pw@host:6380?password=x"), "rediss://host:6380");
/// assert_eq!(redact_url("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
/// ```
pub fn redact_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = without_query.split_once("://") else {
        // Not a URL we understand: show only what cannot be a credential.
        return "<unparseable node address>".to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

/// The clients for `urls`, each with its name (the URL without credentials): with `tls`
/// for `rediss://` URLs when given. A malformed URL is an
/// [`InvalidNode`](LockError::InvalidNode) error.
pub(crate) fn clients_for_urls<S: AsRef<str>>(
    urls: impl IntoIterator<Item = S>,
    #[cfg(feature = "tls")] tls: Option<&crate::tls::TlsOptions>,
) -> Result<Vec<(String, Target)>, LockError> {
    urls.into_iter()
        .map(|url| {
            let url = url.as_ref();
            let invalid = |reason: String| LockError::InvalidNode {
                node: redact_url(url),
                reason,
            };
            if let Some(seeds) = cluster_seeds(url) {
                #[cfg(feature = "tls")]
                if tls.is_some_and(|tls| !tls.is_default()) {
                    return Err(invalid(
                        "TLS options are not applied to cluster members; a \
                         `rediss+cluster://` URL uses the public roots"
                            .to_owned(),
                    ));
                }
                let seeds = seeds?;
                // Checked here, so that a malformed seed is an error of `connect`.
                cluster_client(seeds.clone()).map_err(invalid)?;
                return Ok((redact_url(url), Target::Cluster(seeds)));
            }
            if let Some(sentinel) = super::sentinel::sentinel_client(url) {
                return sentinel.map(|client| (redact_url(url), Target::Sentinel(client)));
            }
            #[cfg(feature = "tls")]
            if let Some(tls) = tls {
                return tls
                    .client(url)
                    .map(|client| (redact_url(url), Target::Server(client)));
            }
            redis::Client::open(url)
                .map(|client| (redact_url(url), Target::Server(client)))
                .map_err(|err| invalid(err.to_string()))
        })
        .collect()
}

/// The seed URLs of a Redis Cluster member's URL
/// (`redis+cluster://[user:pw@]h1:p1,h2:p2[/][?...]`, or `rediss+cluster://`), each a
/// plain URL with the credentials and query of the whole; `None` for another scheme, and
/// an [`InvalidNode`](LockError::InvalidNode) error for a malformed cluster URL.
///
/// ```
/// # use quorumlock::node::cluster_seeds;
/// let seeds = cluster_seeds("redis+cluster://:pw@10.0.0.1:7001,10.0.0.2:7001").unwrap()?;
/// assert_eq!(seeds, ["redis://:pw@10.0.0.1:7001", "redis://:pw@10.0.0.2:7001"]);
/// assert!(cluster_seeds("redis://10.0.0.1:7001").is_none());
/// # Ok::<(), quorumlock::LockError>(())
/// ```
pub fn cluster_seeds(url: &str) -> Option<Result<Vec<String>, LockError>> {
    let (scheme, rest) = url.split_once("://")?;
    let (_, plain) = CLUSTER_SCHEMES
        .iter()
        .find(|(cluster, _)| scheme.eq_ignore_ascii_case(cluster))?;
    let invalid = |reason: &str| LockError::InvalidNode {
        node: redact_url(url),
        reason: reason.to_owned(),
    };
    let (authority, query) = match rest.find(['/', '?', '#']) {
        Some(end) => rest.split_at(end),
        None => (rest, ""),
    };
    // A database number means nothing on a cluster; anything but a query is refused.
    let query = query.trim_start_matches('/');
    if !(query.is_empty() || query.starts_with(['?', '#'])) {
        return Some(Err(invalid(
            "a cluster URL takes no path (Redis Cluster has one database)",
        )));
    }
    let (credentials, hosts) = hosts_of(authority);
    let seeds: Vec<String> = hosts
        .map(|host| format!("{plain}://{credentials}{host}{query}"))
        .collect();
    if seeds.is_empty() {
        return Some(Err(invalid("a cluster URL needs at least one seed node")));
    }
    Some(Ok(seeds))
}

/// The credentials (`user:password@`, or empty) and the hosts of the authority of a URL
/// that lists several hosts, separated by commas, or by semicolons where commas separate
/// members (the CLI's `--nodes`).
pub(super) fn hosts_of(authority: &str) -> (String, impl Iterator<Item = &str>) {
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts = hosts.split([',', ';']).filter(|host| !host.is_empty());
    (credentials, hosts)
}

/// The cluster client for `seeds`.
fn cluster_client(seeds: Vec<String>) -> Result<redis::cluster::ClusterClient, String> {
    #[cfg(feature = "tls")]
    if seeds.iter().any(|seed| seed.starts_with("rediss://")) {
        crate::tls::install_crypto_provider();
    }
    redis::cluster::ClusterClient::builder(seeds)
        .build()
        .map_err(|err| err.to_string())
}

/// The clients given by the caller, each named after its address ([`client_name`]).
pub(crate) fn named_clients(
    clients: impl IntoIterator<Item = redis::Client>,
) -> Vec<(String, Target)> {
    clients
        .into_iter()
        .map(|client| {
            (
                client_name(client.get_connection_info()),
                Target::Server(client),
            )
        })
        .collect()
}

/// A node's name for a client's address, as a URL without credentials:
/// `redis://host:port[/db]`, `rediss://host:port[/db]` (TLS) or `redis+unix:///path`.
pub fn client_name(info: &redis::ConnectionInfo) -> String {
    use redis::ConnectionAddr;
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{}:{port}{db}", bracketed(host)),
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{}:{port}{db}", bracketed(host))
        }
        ConnectionAddr::Unix(path) => format!("redis+unix://{}{db}", path.display()),
        other => format!("{other}"),
    }
}

/// An IPv6 address in brackets, as URLs write it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::{cluster_seeds, redact_url};

    #[test]
    fn a_cluster_url_gives_one_seed_per_host_with_the_credentials_of_the_whole() {
        let seeds = cluster_seeds("redis+cluster://:pw@10.0.0.1:7001,10.0.0.2:7002/?protocol=3")
            .unwrap()
            .unwrap();
        assert_eq!(
            seeds,
            [
                "redis://:pw@10.0.0.1:7001?protocol=3",
                "redis://:pw@10.0.0.2:7002?protocol=3"
            ]
        );
        let semicolons = cluster_seeds("redis+cluster://a:1;b:2").unwrap().unwrap();
        assert_eq!(semicolons, ["redis://a:1", "redis://b:2"]);
        let tls = cluster_seeds("rediss+cluster://h:1").unwrap().unwrap();
        assert_eq!(tls, ["rediss://h:1"]);
        assert!(cluster_seeds("redis://h:1").is_none());
        assert!(cluster_seeds("redis+cluster://h:1/2").unwrap().is_err());
        assert!(cluster_seeds("redis+cluster://").unwrap().is_err());
        assert_eq!(
            redact_url("redis+cluster://:pw@h:1,g:2"),
            "redis+cluster://h:1,g:2"
        );
    }

    #[test]
    fn redaction_removes_every_credential() {
        for (url, expected) in [
            ("redis://127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://:pw@127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://user:p@ss@host:1/0", "redis://host:1/0"),
            ("redis://host:1/0?password=pw", "redis://host:1/0"),
            (
                "redis+unix:///tmp/redis.sock",
                "redis+unix:///tmp/redis.sock",
            ),
            ("no-scheme:pw@host", "<unparseable node address>"),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }
}
