//! How a lock's members are read from their URLs: one parser for every kind of member,
//! and the clients that reach each, named without credentials ([`names`](super::names)).
//!
//! A URL names one member of a lock:
//!
//! - a standalone master: `redis://`, `rediss://` (TLS), `redis+unix://`;
//! - a Redis Cluster, which votes once: `redis+cluster://[user:pw@]host:port[,host:port...]`
//!   (`rediss+cluster://` with TLS), given by one or more seed nodes (separated by commas
//!   or semicolons) from which the cluster client discovers the rest ([`cluster_seeds`]);
//! - a master managed by Redis Sentinel:
//!   `redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]`, the
//!   sentinels' addresses, the name of the monitored master (`sentinel monitor <service>
//!   ...`), and the credentials and database of the master (the sentinels themselves are
//!   reached without them) ([`sentinel_client`]).

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::IntoConnectionInfo;

use super::names::{client_name, redact_url};
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
    Sentinel(SentinelClient),
}

/// The URL schemes of a Redis Cluster member.
const CLUSTER_SCHEMES: [(&str, &str); 2] =
    [("redis+cluster", "redis"), ("rediss+cluster", "rediss")];

/// The clients for `urls`, each with its name (the URL without credentials): with `tls`
/// for `rediss://` URLs when given. A malformed URL is an
/// [`InvalidNode`](LockError::InvalidNode) error.
pub(crate) fn clients_for_urls<S: AsRef<str>>(
    urls: impl IntoIterator<Item = S>,
    #[cfg(feature = "tls")] tls: Option<&super::tls::TlsOptions>,
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
            if let Some(sentinel) = sentinel_client(url) {
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
/// # use quorumlock::backend::cluster_seeds;
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

/// The sentinel client for a URL
/// `redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/db]` (the
/// sentinels, the monitored master's name, and the master's credentials and database);
/// `None` for another scheme, and an [`InvalidNode`](LockError::InvalidNode)
/// error for a malformed Sentinel URL.
///
/// ```
/// # use quorumlock::backend::sentinel_client;
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
    let (credentials, hosts) = hosts_of(authority);
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

/// The cluster client for `seeds`.
fn cluster_client(seeds: Vec<String>) -> Result<redis::cluster::ClusterClient, String> {
    #[cfg(feature = "tls")]
    if seeds.iter().any(|seed| seed.starts_with("rediss://")) {
        super::tls::install_crypto_provider();
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

#[cfg(test)]
mod tests {
    use super::{cluster_seeds, redact_url, sentinel_client};

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
