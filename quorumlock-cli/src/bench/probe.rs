//! Per-node measurements over a plain connection to each node, beside the lock: the round
//! trip of a `PING`, and of the lock's own `SET NX PX` + compare-and-delete release, and
//! which node's grant completed the quorum of each probe round.
//!
//! The library's coordinator does not say which node decided a round, so the probes ask
//! every node at once, as a lock round does, and count the node whose answer was the
//! quorum-th grant to arrive.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use quorumlock_testkit::measure::{histogram, record, Histogram};
use rand::seq::SliceRandom;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{oneshot, Mutex};
use tokio::time::Instant;

use super::keys::with_timeout;

/// How often the probes run while the lock is measured: light enough to be noise on a
/// production node (3 commands per node per round), frequent enough for a p99 in 10 s.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The probe's release: a plain compare-and-delete, only our own token deleted. It is the
/// core of the library's unlock script without the hand-off to a queue, which the probe's
/// key, never waited for, does not have.
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// One node's connection and what was measured on it.
pub struct NodeProbe {
    /// The URL without credentials.
    pub name: String,
    conn: ConnectionManager,
    /// `PING` round trips.
    pub ping: Histogram<u64>,
    /// `SET NX PX` round trips plus the release's.
    pub lock: Histogram<u64>,
    /// Requests that failed other than by timing out.
    pub errors: u64,
    /// Requests that took longer than the node timeout.
    pub timeouts: u64,
    /// The last error, for the report.
    pub last_error: Option<String>,
    /// Probe rounds whose quorum this node's grant completed.
    pub decided: u64,
}

/// Connects to one node (its client made with the TLS options, see
/// `nodes::check_urls`, `Nodes::clients`) within `connect_timeout`, and checks that it answers a `PING`
/// within the same time (the first command may include the TLS handshake and `AUTH`).
pub async fn connect(
    client: redis::Client,
    name: String,
    connect_timeout: Duration,
    node_timeout: Duration,
) -> Result<NodeProbe, String> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(node_timeout.max(connect_timeout)))
        // A node lost mid-run is retried in the background, not waited for here.
        .set_number_of_retries(1);
    let mut conn = with_timeout(
        connect_timeout.saturating_mul(2),
        client.get_connection_manager_with_config(config),
    )
    .await?;
    with_timeout::<String>(connect_timeout, redis::cmd("PING").query_async(&mut conn)).await?;
    Ok(NodeProbe {
        name,
        conn,
        ping: histogram(),
        lock: histogram(),
        errors: 0,
        timeouts: 0,
        last_error: None,
        decided: 0,
    })
}

impl NodeProbe {
    /// A clone of the connection, for the key checks and the clean-up.
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Counts a failed request.
    fn failed(&mut self, error: String) {
        if error.starts_with("timed out") {
            self.timeouts += 1;
        } else {
            self.errors += 1;
        }
        self.last_error = Some(error);
    }
}

/// Every node's probe, and the settings of a round.
pub struct Probes {
    /// One per node, in the order given.
    pub nodes: Vec<NodeProbe>,
    /// Rounds run so far.
    pub rounds: u64,
    /// The key the rounds lock.
    pub key: String,
    /// The TTL they lock it with.
    pub ttl: Duration,
    /// How many grants make a quorum.
    pub quorum: usize,
    /// How long one request may take: the lock's node timeout.
    pub timeout: Duration,
}

impl Probes {
    /// One round on every node.
    pub async fn round(&mut self) {
        round(
            &mut self.nodes,
            &self.key,
            self.ttl,
            self.quorum,
            self.timeout,
        )
        .await;
        self.rounds += 1;
    }
}

/// A thread of its own for the probes, with a single-threaded runtime: their round trips
/// then measure the node and the network, not how long our own busy workers took to get
/// to the reply. The probes' connections are made on it, so their I/O stays on it too.
pub struct ProbeThread {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProbeThread {
    /// Starts the thread and its runtime.
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("quorumlock-probes".to_owned())
            .spawn(move || {
                // Spawned tasks run while this waits for the stop.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(ProbeThread {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Runs `work` on the probe thread and waits for it.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.handle
            .spawn(work)
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    }

    /// Runs probe rounds every [`PROBE_INTERVAL`] until the returned sender is dropped or
    /// sent to; the handle ends after the round in progress.
    pub fn probing(
        &self,
        probes: Arc<Mutex<Probes>>,
    ) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = self.handle.spawn(async move {
            let mut tick = tokio::time::interval(PROBE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => probes.lock().await.round().await,
                }
            }
        });
        (stop, task)
    }
}

impl Drop for ProbeThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Awaits one future per node, first polled (so sent) in a random order, and returns
/// their outputs in node order. Sent in list order, the requests of a round would reach
/// the nodes in the same order every time, and on fast links that order alone would pick
/// the node that completes the quorum.
async fn in_random_order<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut order: Vec<usize> = (0..futures.len()).collect();
    order.shuffle(&mut rand::rng());
    let mut slots: Vec<Option<F>> = futures.into_iter().map(Some).collect();
    let shuffled: Vec<F> = order.iter().filter_map(|&i| slots[i].take()).collect();
    let outputs = join_all(shuffled).await;
    let mut by_node: Vec<Option<F::Output>> = order.iter().map(|_| None).collect();
    for (i, output) in order.into_iter().zip(outputs) {
        by_node[i] = Some(output);
    }
    by_node.into_iter().flatten().collect()
}

/// The per-node results of one probe round's lock step.
struct LockStep {
    /// When the `SET NX PX` was granted, from the round's start; `None` if it was not.
    granted_after: Option<Duration>,
}

/// One probe round on every node: the `PING`s together, then the `SET NX PX`s together
/// (which node completed the quorum), then the releases together.
pub async fn round(
    probes: &mut [NodeProbe],
    key: &str,
    ttl: Duration,
    quorum: usize,
    timeout: Duration,
) {
    let pings = in_random_order(
        probes
            .iter()
            .map(|probe| {
                let mut conn = probe.conn.clone();
                async move {
                    let start = Instant::now();
                    let reply =
                        with_timeout::<String>(timeout, redis::cmd("PING").query_async(&mut conn))
                            .await;
                    (start.elapsed(), reply)
                }
            })
            .collect(),
    )
    .await;
    let mut answered = Vec::with_capacity(probes.len());
    for (probe, (took, reply)) in probes.iter_mut().zip(pings) {
        answered.push(reply.is_ok());
        match reply {
            Ok(_) => record(&mut probe.ping, took),
            Err(error) => probe.failed(error),
        }
    }

    let token = format!("{:032x}", rand::random::<u128>());
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let start = Instant::now();
    // A node that did not answer the PING is not sent more this round: piling requests on
    // a node that does not answer tells nothing more, and would hold every round up.
    let sets = in_random_order(
        probes
            .iter()
            .zip(&answered)
            .map(|(probe, &answered)| {
                let mut conn = probe.conn.clone();
                let token = token.as_str();
                async move {
                    if !answered {
                        return None;
                    }
                    let mut set = redis::cmd("SET");
                    set.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                    let reply =
                        with_timeout::<Option<String>>(timeout, set.query_async(&mut conn)).await;
                    Some((start.elapsed(), reply))
                }
            })
            .collect(),
    )
    .await;
    // Released whatever the SET's outcome: a SET that timed out may still reach the node,
    // and the release queued behind it on the same connection then removes the key.
    let releases = in_random_order(
        probes
            .iter()
            .zip(&sets)
            .map(|(probe, set)| {
                let mut conn = probe.conn.clone();
                let token = token.as_str();
                let sent = set.is_some();
                async move {
                    if !sent {
                        return None;
                    }
                    let start = Instant::now();
                    let mut release = redis::cmd("EVAL");
                    release.arg(RELEASE).arg(1).arg(key).arg(token);
                    let reply = with_timeout::<i64>(timeout, release.query_async(&mut conn)).await;
                    Some((start.elapsed(), reply))
                }
            })
            .collect(),
    )
    .await;

    let mut steps = Vec::with_capacity(probes.len());
    for ((probe, set), release) in probes.iter_mut().zip(sets).zip(releases) {
        let (Some((set_took, set)), Some((release_took, release))) = (set, release) else {
            steps.push(LockStep {
                granted_after: None,
            });
            continue;
        };
        let granted = matches!(set, Ok(Some(_)));
        match (set, release) {
            (Ok(_), Ok(_)) => record(&mut probe.lock, set_took + release_took),
            (Err(error), _) | (_, Err(error)) => probe.failed(error),
        }
        steps.push(LockStep {
            granted_after: granted.then_some(set_took),
        });
    }
    if let Some(decider) = decider(&steps, quorum) {
        probes[decider].decided += 1;
    }
}

/// The node whose grant was the quorum-th to arrive, if a quorum granted.
fn decider(steps: &[LockStep], quorum: usize) -> Option<usize> {
    let mut granted: Vec<(Duration, usize)> = steps
        .iter()
        .enumerate()
        .filter_map(|(node, step)| step.granted_after.map(|after| (after, node)))
        .collect();
    granted.sort();
    granted.get(quorum.checked_sub(1)?).map(|&(_, node)| node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(ms: Option<u64>) -> LockStep {
        LockStep {
            granted_after: ms.map(Duration::from_millis),
        }
    }

    #[tokio::test]
    async fn outputs_come_back_in_node_order() {
        for _ in 0..20 {
            let futures: Vec<_> = (0..5).map(|i| async move { i * 10 }).collect();
            assert_eq!(in_random_order(futures).await, [0, 10, 20, 30, 40]);
        }
    }

    #[test]
    fn the_quorumth_grant_decides() {
        let steps = [
            step(Some(5)),
            step(Some(1)),
            step(None),
            step(Some(3)),
            step(Some(20)),
        ];
        assert_eq!(decider(&steps, 3), Some(0));
        assert_eq!(decider(&steps, 1), Some(1));
        assert_eq!(decider(&steps, 5), None);
        assert_eq!(decider(&[step(Some(2))], 1), Some(0));
    }
}
