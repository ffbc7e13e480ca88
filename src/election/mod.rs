//! [`Election`]: leader election over the quorum, in the manner of etcd's
//! `concurrency.Election`: the leader is the holder of the election's lock, kept alive by
//! a watchdog and numbered by its fencing token, and its value (an address, an id) is
//! recorded beside the lock on a quorum for observers to read.

mod leadership;
mod observe;

use std::time::Duration;

use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::{ConfigError, LockError};
use crate::lock::Lock;
use crate::redlock::Redlock;
use crate::resource::{Keys, Resources};
use crate::retry::retry_wait;
use crate::watchdog::AutoExtend;

pub use self::leadership::Leadership;

/// The leader of an election, as recorded on the nodes: its value and its fencing token.
///
/// Tokens strictly increase from one leader to the next, so a protected resource can
/// refuse a deposed leader's late writes (see [`fencing`](crate::fencing)), and an
/// observer can tell a new term from the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leader {
    /// What the leader campaigned with (its address, say).
    pub value: String,
    /// The fencing token of its term.
    pub fencing_token: u64,
}

impl Leader {
    /// The leader of a record `<fencing token> <value>`, as the leader wrote it.
    fn from_record(record: &str) -> Option<Leader> {
        let (token, value) = record.split_once(' ')?;
        Some(Leader {
            value: value.to_owned(),
            fencing_token: token.parse().ok()?,
        })
    }

    fn record(&self) -> String {
        format!("{} {}", self.fencing_token, self.value)
    }
}

/// A leader election among the processes that share the lock's nodes: at most one leader
/// at a time, for as long as the mutex's exclusion holds (docs/safety.md, "Leader
/// election").
///
/// - [`campaign`](Self::campaign) waits until this process leads, and returns its
///   [`Leadership`]: the election's lock, auto-extended, with its fencing token.
///   Its [`lost`](Leadership::lost) signal fires when the lock can no longer be trusted,
///   which is before another leader can be elected.
/// - [`Leadership::resign`] gives the leadership up at once, for the next candidate.
/// - [`leader`](Self::leader) says who leads now; [`observe`](Self::observe) is a stream
///   of the changes.
///
/// The lock must be built with [`fencing`](crate::LockConfigBuilder::fencing) on: terms
/// are numbered by their fencing tokens.
///
/// ```no_run
/// use futures::StreamExt;
/// use quorumlock::{Election, LockConfig, Redlock};
///
/// # async fn run() -> Result<(), quorumlock::LockError> {
/// let config = LockConfig::builder().fencing(true).build()?;
/// let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
/// let election = Election::new(Redlock::connect(urls, config).await?, "billing")?;
///
/// // Everyone may watch who leads.
/// let mut changes = Box::pin(election.observe());
/// tokio::spawn(async move {
///     while let Some(Ok(leader)) = changes.next().await {
///         println!("leader now: {leader:?}");
///     }
/// });
///
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// tokio::select! {
///     () = lead(leadership.fencing_token()) => leadership.resign().await?,
///     end = leadership.lost() => eprintln!("deposed: {end}"),
/// }
/// # Ok(())
/// # }
/// # async fn lead(_token: u64) {}
/// ```
///
/// Two terms on the simulated nodes (feature `test-util`), where it runs:
///
/// ```
/// use quorumlock::sim::SimCluster;
/// use quorumlock::{Election, LockConfig, LockError};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let cluster = SimCluster::new(3);
/// let config = LockConfig::builder().fencing(true).build()?;
/// let election = Election::new(cluster.redlock(config)?, "billing")?;
/// let first = election.campaign("10.0.0.7:8080").await?;
/// let term = first.fencing_token();
/// first.resign().await?;
/// let second = election.campaign("10.0.0.8:8080").await?;
/// assert!(second.fencing_token() > term, "terms strictly increase");
/// # Ok::<(), LockError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Election {
    lock: Redlock,
    name: String,
    keys: Keys,
    observe_every: Duration,
}

impl Election {
    /// The longest value a candidate may campaign with, in bytes: an address or an id, not
    /// a payload (every observer reads it from a quorum on each poll).
    pub const MAX_VALUE_LEN: usize = MAX_VALUE_LEN;

    /// The election `name` on `lock`'s nodes and configuration (its TTL is the term's
    /// lease, extended by a watchdog while the leader leads).
    ///
    /// Fails with [`ConfigError::FencingRequired`] unless the lock was built with
    /// fencing, and with [`LockError::InvalidResource`] for a name that cannot be a lock.
    pub fn new(lock: Redlock, name: &str) -> Result<Self, LockError> {
        let config = lock.config();
        if !config.fencing() {
            return Err(ConfigError::FencingRequired {
                what: "a leader election",
            }
            .into());
        }
        let layout = lock.inner().coordinator().layout();
        let keys = Resources::new(config, layout, &[name])?.keys;
        Ok(Election {
            observe_every: config.retry_delay(),
            lock,
            name: name.to_owned(),
            keys,
        })
    }

    /// The same election, whose [`observe`](Self::observe) streams ask the nodes every
    /// `interval` (by default the lock's retry delay), 10 ms at least.
    pub fn observe_every(mut self, interval: Duration) -> Self {
        self.observe_every = interval.max(AutoExtend::MIN_INTERVAL);
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this candidate leads, with `value` recorded for observers, and returns
    /// its leadership. While another leads it waits in the lock's line (the fair queue);
    /// while the nodes are unreachable it tries again after the retry delay; it returns
    /// an error only for bad input or settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no leadership behind: a lock being taken is unlocked as
    /// [`DistributedLock::acquire`](crate::DistributedLock::acquire)'s is, and one already
    /// won is released in the background (its record, without the lock, is never read).
    pub async fn campaign(&self, value: &str) -> Result<Leadership, LockError> {
        self.campaign_until(value, None).await
    }

    /// [`campaign`](Self::campaign), giving up after `timeout` with
    /// [`LockError::TimedOut`] (or the last attempt's error).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_timeout(
        &self,
        value: &str,
        timeout: Duration,
    ) -> Result<Leadership, LockError> {
        let deadline = Instant::now().checked_add(timeout);
        self.campaign_until(value, deadline).await
    }

    /// Who leads now: the leader record with the highest fencing token among those a
    /// quorum of nodes answered (each node answers the record of the token its lock key
    /// holds), or `None`. A view, not a lock: act as the leader only with a
    /// [`Leadership`].
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the future changes nothing.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let coordinator = self.inner().coordinator();
        let records = coordinator
            .read_proclamations(&self.name, &self.keys)
            .await?;
        Ok(records
            .iter()
            .filter_map(|record| Leader::from_record(record))
            .max_by_key(|leader| leader.fencing_token))
    }

    fn inner(&self) -> &Lock {
        self.lock.inner()
    }

    async fn campaign_until(
        &self,
        value: &str,
        deadline: Option<Instant>,
    ) -> Result<Leadership, LockError> {
        check_value(value)?;
        let started = Instant::now();
        let config = self.inner().config();
        // A candidate waits in the lock's line until it wins or its deadline passes. With
        // the lock's own attempts (1 + retry_count) it would leave the line each time they
        // ran out and join again a retry wait later, and a release in that gap would be
        // announced to nobody, serving it late and letting others overtake it.
        let in_line = config
            .to_builder()
            .retry_count(u32::MAX)
            .acquire_timeout(LockConfig::MAX_ACQUIRE_TIMEOUT)
            .build()?;
        let lock = self.inner().with_config(in_line);
        loop {
            let attempt = match deadline {
                None => lock.acquire(&[&self.name]).await,
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    lock.acquire_timeout(&[&self.name], left).await
                }
            };
            let error = match attempt {
                Ok(mut guard) => {
                    guard.auto_extend(AutoExtend::default())?;
                    let Some(fencing_token) = guard.fencing_token() else {
                        // `new` checked the configuration; a lock without tokens cannot lead.
                        return Err(ConfigError::FencingRequired {
                            what: "a leader election",
                        }
                        .into());
                    };
                    let leader = Leader {
                        value: value.to_owned(),
                        fencing_token,
                    };
                    let coordinator = guard.coordinator();
                    match coordinator.proclaim(guard.lease(), &leader.record()).await {
                        Ok(()) => return Ok(Leadership::new(guard, leader)),
                        // Lost or unconfirmed right after winning: the guard's drop
                        // releases what is left, and the campaign goes on.
                        Err(error) => error,
                    }
                }
                Err(error) if error.is_retryable() => error,
                Err(error) => return Err(error),
            };
            let wait = retry_wait(config, &mut rand::rng());
            if let Some(deadline) = deadline {
                if Instant::now()
                    .checked_add(wait)
                    .is_none_or(|wakes| wakes >= deadline)
                {
                    return Err(LockError::TimedOut {
                        resource: self.name.clone(),
                        waited: started.elapsed(),
                        last: Some(Box::new(error)),
                    });
                }
            }
            tracing::debug!(election = %self.name, %error, "campaigning on");
            tokio::time::sleep(wait).await;
        }
    }
}

/// See [`Election::MAX_VALUE_LEN`].
const MAX_VALUE_LEN: usize = 4096;

/// Refuses a value longer than [`MAX_VALUE_LEN`].
fn check_value(value: &str) -> Result<(), LockError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(ConfigError::LeaderValueTooLong {
            len: value.len(),
            max: MAX_VALUE_LEN,
        }
        .into());
    }
    Ok(())
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("observe_every", &self.observe_every)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_the_token_then_the_value_which_may_hold_spaces() {
        let leader = Leader {
            value: "host a:80".to_owned(),
            fencing_token: 42,
        };
        assert_eq!(leader.record(), "42 host a:80");
        assert_eq!(Leader::from_record(&leader.record()), Some(leader));
        assert_eq!(Leader::from_record("x host"), None);
        assert_eq!(Leader::from_record("42"), None);
    }
}
