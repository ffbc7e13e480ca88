//! How `status` reads a lock key on each member: a standalone server, a Redis Cluster
//! through its seeds, or the master a Sentinel names, each by the client the library
//! makes for it.

use std::time::Duration;

use quorumlock::backend::NodeClient;
#[cfg(doc)]
use quorumlock::Nodes;

use crate::args::GlobalArgs;
use crate::duration::format_duration;
use crate::exit::CliError;
use crate::explain;
use crate::nodes::check_urls;

use super::view::NodeView;

/// The name (the URL without credentials) and the client of each member of `urls` (see
/// [`Nodes::clients`]), made with the TLS options; a malformed URL is a configuration
/// error (exit 78).
pub fn members(
    global: &GlobalArgs,
    urls: &[String],
) -> Result<(Vec<String>, Vec<NodeClient>), CliError> {
    let nodes = check_urls(global, urls)?;
    let names = nodes
        .addresses()
        .iter()
        .map(|address| address.name().to_owned())
        .collect();
    let clients = nodes
        .clients()
        .map_err(|error| explain::lock_error(&error, global))?;
    Ok((names, clients))
}

/// What `member` says of `key`, and where the key lives when that is not the URL's one
/// server: `slot S on HOST:PORT` on a cluster, `master HOST:PORT` behind a Sentinel.
pub async fn read_member(
    member: NodeClient,
    key: &str,
    budget: Duration,
) -> (NodeView, Option<String>) {
    match member {
        NodeClient::Server(client) => (read_node(client, key, budget).await, None),
        NodeClient::Sentinel(mut sentinel) => {
            match within(budget, sentinel.async_get_client()).await {
                Err(failed) => (failed, None),
                Ok(client) => {
                    let placement = format!("master {}", client.get_connection_info().addr());
                    (read_node(client, key, budget).await, Some(placement))
                }
            }
        }
        NodeClient::Cluster(seeds) => match within(budget, read_cluster(seeds, key)).await {
            Err(failed) => (failed, None),
            Ok((view, placement)) => (view, Some(placement)),
        },
        _ => (
            NodeView::Failed("a kind of member status cannot read".to_owned()),
            None,
        ),
    }
}

/// `request`'s answer within `budget`, or the failed view that says why not.
async fn within<T>(
    budget: Duration,
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, NodeView> {
    match tokio::time::timeout(budget, request).await {
        Err(_) => Err(NodeView::Failed(format!(
            "timed out after {}",
            format_duration(budget)
        ))),
        Ok(Err(error)) => Err(NodeView::Failed(error.to_string())),
        Ok(Ok(answer)) => Ok(answer),
    }
}

/// `GET` and `PTTL` of `key` (two plain commands in one pipeline), as a node's view.
async fn get_and_pttl(
    connection: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> redis::RedisResult<NodeView> {
    let (value, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .cmd("GET")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query_async(connection)
        .await?;
    Ok(view_of(value, pttl))
}

/// `GET`, `PTTL` and the master of `key`'s slot (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`) on the
/// cluster of `seeds`.
async fn read_cluster(
    seeds: Vec<redis::ConnectionInfo>,
    key: &str,
) -> redis::RedisResult<(NodeView, String)> {
    let client = redis::cluster::ClusterClient::new(seeds)?;
    let mut connection = client.get_async_connection().await?;
    let view = get_and_pttl(&mut connection, key).await?;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut connection)
        .await?;
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut connection)
        .await?;
    let master = slot_master(&slots, slot).unwrap_or_else(|| "no master".to_owned());
    Ok((view, format!("slot {slot} on {master}")))
}

/// `host:port` of the master serving `slot` in a `CLUSTER SLOTS` reply.
fn slot_master(slots: &redis::Value, slot: u16) -> Option<String> {
    use redis::Value as V;
    let V::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let V::Array(fields) = range else {
            return None;
        };
        let int = |value: Option<&V>| match value {
            Some(V::Int(n)) => Some(*n),
            _ => None,
        };
        let (first, last) = (int(fields.first())?, int(fields.get(1))?);
        if !(first..=last).contains(&i64::from(slot)) {
            return None;
        }
        let Some(V::Array(master)) = fields.get(2) else {
            return None;
        };
        let host = match master.first()? {
            V::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            V::SimpleString(host) => host.clone(),
            _ => return None,
        };
        Some(format!("{host}:{}", int(master.get(1))?))
    })
}

/// A node's view from the replies to `GET` and `PTTL`.
fn view_of(value: Option<Vec<u8>>, pttl: i64) -> NodeView {
    match (value, pttl) {
        (None, _) | (Some(_), -2) => NodeView::Free,
        (Some(value), pttl) => NodeView::Held {
            token: String::from_utf8_lossy(&value).into_owned(),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        },
    }
}

/// `GET` and `PTTL` of `key` on one node, within `budget` (connection included).
///
/// Two plain commands in one pipeline, no `MULTI`/`EXEC`: a lock's user needs no
/// transaction rights (docs/operations.md, "ACL users"). A key that expires between the
/// two reads (`PTTL` -2) is reported free, as it is by then.
pub async fn read_node(client: redis::Client, key: &str, budget: Duration) -> NodeView {
    let query = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        get_and_pttl(&mut connection, key).await
    };
    within(budget, query).await.unwrap_or_else(|failed| failed)
}
