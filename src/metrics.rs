//! Counters of what the locks did, for export as metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of a lock's counters, shared by every lock instance derived from the same
/// connections (clones, [`with_config`](crate::DistributedLock::with_config), factories).
///
/// The counters only grow; export them as monotonic counters (Prometheus `_total`,
/// OpenTelemetry `Counter`) and let the metrics system compute rates.
///
/// ```no_run
/// # async fn run(lock: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
/// let before = lock.metrics();
/// lock.acquire("report").await?.release().await?;
/// let after = lock.metrics();
/// println!(
///     "{} attempts, {} refused by another holder",
///     after.attempts - before.attempts,
///     after.contended - before.contended,
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockMetrics {
    /// Acquisition rounds started (each retry counts).
    pub attempts: u64,
    /// Rounds that acquired the lock.
    pub acquired: u64,
    /// Rounds refused because another owner held the lock.
    pub contended: u64,
    /// Rounds that failed because too few nodes answered.
    pub no_quorum: u64,
    /// Rounds that reached a quorum too late to leave any validity.
    pub validity_exhausted: u64,
    /// Releases confirmed by a quorum.
    pub released: u64,
    /// Grants a waiter heard of and counted toward its quorum: a release on that node
    /// handed it the lock outright, with no round of its own to claim it (see
    /// [`LockConfig::direct_grant`](crate::LockConfig::direct_grant)).
    pub grants_heard: u64,
    /// Locks passed from a releasing task to one of this process waiting for them, without
    /// a round trip to the nodes (see [`LockConfig::cohort_passes`](crate::LockConfig::cohort_passes)).
    pub passed: u64,
    /// Successful refreshes (manual or by a watchdog).
    pub extended: u64,
    /// Leases that ended other than by release: refresh found the lock gone, or a watchdog
    /// could not confirm it in time.
    pub lost: u64,
    /// Node requests that failed (connection errors, Redis errors).
    pub node_errors: u64,
    /// Node requests that timed out.
    pub node_timeouts: u64,
    /// Requests that no round awaited any more and that were dropped unanswered: past the
    /// time they are driven for, or beyond the number one node may have in hand (see
    /// docs/operations.md, "Frozen and black-holed nodes"). A steady rise means a node that
    /// does not answer.
    pub unawaited_dropped: u64,
    /// Node connections given up as broken or silent, and made again.
    pub reconnects: u64,
    /// Server clocks seen to step, run at a wrong rate or stand still (see
    /// [`Nodes::clock_checks`](crate::Nodes::clock_checks)); each made its node abstain.
    pub clock_anomalies: u64,
}

/// The live counters behind [`LockMetrics`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) contended: AtomicU64,
    pub(crate) no_quorum: AtomicU64,
    pub(crate) validity_exhausted: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) grants_heard: AtomicU64,
    pub(crate) passed: AtomicU64,
    pub(crate) extended: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) node_errors: AtomicU64,
    pub(crate) node_timeouts: AtomicU64,
    pub(crate) unawaited_dropped: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) clock_anomalies: AtomicU64,
}

impl Counters {
    /// Adds one; relaxed ordering is enough for counters read as a whole later.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LockMetrics {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LockMetrics {
            attempts: read(&self.attempts),
            acquired: read(&self.acquired),
            contended: read(&self.contended),
            no_quorum: read(&self.no_quorum),
            validity_exhausted: read(&self.validity_exhausted),
            released: read(&self.released),
            grants_heard: read(&self.grants_heard),
            passed: read(&self.passed),
            extended: read(&self.extended),
            lost: read(&self.lost),
            node_errors: read(&self.node_errors),
            node_timeouts: read(&self.node_timeouts),
            unawaited_dropped: read(&self.unawaited_dropped),
            reconnects: read(&self.reconnects),
            clock_anomalies: read(&self.clock_anomalies),
        }
    }
}

/// A snapshot of one node's counters, from
/// [`Redlock::node_metrics`](crate::Redlock::node_metrics), shared like
/// [`LockMetrics`].
///
/// The counters only grow. A node whose `errors` or `timeouts` rise while the others' do
/// not is failing, and the lock tolerates one failure fewer meanwhile: alert on it even
/// though every acquisition still succeeds.
///
/// ```no_run
/// # fn run(lock: quorumlock::Redlock) {
/// for node in lock.node_metrics() {
///     println!(
///         "{}: {} replies (mean {:?}), {} errors, {} timeouts, last error {:?}",
///         node.node,
///         node.replies,
///         node.mean_latency(),
///         node.errors,
///         node.timeouts,
///         node.last_error,
///     );
/// }
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeMetrics {
    /// The node's name (its URL without credentials).
    pub node: String,
    /// Requests the node answered (a refusal is an answer), counted by the rounds that
    /// awaited them.
    pub replies: u64,
    /// Requests that failed other than by a timeout: connection errors, error replies.
    pub errors: u64,
    /// Requests that got no answer within the per-node timeout.
    pub timeouts: u64,
    /// The summed latency of the answered requests.
    pub latency_total: Duration,
    /// The longest latency of an answered request.
    pub latency_max: Duration,
    /// The last failure's reason, if the node ever failed.
    pub last_error: Option<String>,
    /// Why the node counts as failed on every request now, without being asked, if it
    /// does: its server was refused when the connection was made (a replica, a Redis
    /// Cluster node given as a server, a database that does not exist...). It is retried
    /// as a node that is down is, and this clears once it is admitted.
    pub excluded: Option<String>,
}

impl NodeMetrics {
    /// The mean latency of the answered requests, if any.
    pub fn mean_latency(&self) -> Option<Duration> {
        let replies = u32::try_from(self.replies).ok().filter(|&n| n > 0)?;
        Some(self.latency_total / replies)
    }
}
