//! [`Waiter`]: what one blocking acquisition keeps between its attempts: its turn among this
//! process's waiters, its place in the nodes' queues, the announcements it wakes on, and how
//! many wake-ups it lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::grants::Grants;
use super::shared::HandOff;
use super::turns::{LocalQueues, LocalTurn};
use super::watches::ReleaseWatches;
use crate::config::LockConfig;
use crate::node::QueuePlace;
use crate::resource::Keys;
use crate::token::LockToken;

/// The least a waiter that one node reserved the lock for waits for the other nodes'
/// reservations before it claims them; see [`ReleaseWatches::wait_for_turn`].
const MIN_RESERVATION_GRACE: Duration = Duration::from_millis(1);

/// Slack added to a waiter's queue place or interest for its scheduling delays.
const WAITER_MARGIN: Duration = Duration::from_millis(100);

/// How an attempt asks the nodes for the lock.
#[derive(Debug, Clone)]
pub(crate) enum Asking {
    /// Plainly: `try_acquire`, and a blocking acquisition's first attempt.
    Plain,
    /// As a waiter that races for the lock and watches its releases: a refusal also asks
    /// the node to announce the next release, for this long.
    Watching(Duration),
    /// As a queued waiter, in its place; with [`Grants`], as a waiter of the direct grant.
    Queued(Arc<QueuePlace>, Option<Arc<Grants>>),
}

impl Asking {
    /// The waiter's id in the nodes' queues, when it asks in its place.
    pub(crate) fn waiter(&self) -> Option<LockToken> {
        match self {
            Asking::Queued(place, _) => Some(place.waiter.clone()),
            Asking::Plain | Asking::Watching(_) => None,
        }
    }

    /// How a waiter of the direct grant asks, when it does.
    pub(crate) fn grants(&self) -> Option<&Grants> {
        match self {
            Asking::Queued(_, Some(grants)) => Some(grants),
            _ => None,
        }
    }
}

/// The acquisition's deadline passed while it waited for its turn among this process's
/// waiters.
#[derive(Debug)]
pub(crate) struct TurnTimedOut;

/// When the next attempt goes, after one that found the lock held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// At once: the waiter just joined the line or began to watch, and an announcement made
    /// before its watch was confirmed would be missed.
    AtOnce,
    /// After [`Waiter::wait`].
    AfterWait,
}

/// One blocking acquisition's part in the hand-off. Dropped with the acquisition's future,
/// it gives its place in line back in the background and passes its turn on.
pub(crate) struct Waiter {
    hand_off: Arc<HandOff>,
    keys: Keys,
    deadline: Option<Instant>,
    fair: bool,
    notify_releases: bool,
    /// How long what one attempt leaves on a node lasts (see [`waiter_interest`]).
    interest: Duration,
    node_timeout: Duration,
    /// When the acquisition began: its ticket in the nodes' queues.
    began: SystemTime,
    /// Its turn among this process's waiters for the same keys, taken once it has to wait.
    turn: Option<LocalTurn>,
    /// Its place in the nodes' queues, made when it first queues (most acquisitions never
    /// do), and kept across attempts.
    place: Option<Arc<QueuePlace>>,
    /// Set once it joined the line: the place to give back.
    queued: Option<PlaceInLine>,
    /// Whether it takes grants (see [`Grants`]): a fair waiter for one key with
    /// [`LockConfig::direct_grant`] on.
    takes_grants: bool,
    /// The stamp of its last refresh.
    stamp: u64,
    /// Announcements of the keys reserved for this waiter (fair).
    reservations: Option<ReleaseWatches>,
    /// Announcements of the key's releases (not fair).
    releases: Option<ReleaseWatches>,
    /// Wake-ups this acquisition lost to another waiter; widens its spread.
    collisions: u32,
    /// Set once it holds its turn, for a lock passed within the process to go to the
    /// waiters that do not (see `quorum::cohorts`).
    contending: Option<Arc<AtomicBool>>,
}

impl Waiter {
    /// The waiter of a blocking acquisition of `keys` that begins now. One that finds
    /// nobody of this process waiting for them tries first and takes a turn only once it
    /// has to wait, so an uncontended lock never touches the turns; one whose keys were
    /// found held moments ago expects to wait, and queues with its first attempt.
    /// `contending`, if given, is set once it holds its turn.
    pub(crate) async fn new(
        hand_off: &Arc<HandOff>,
        config: &LockConfig,
        keys: &Keys,
        deadline: Option<Instant>,
        contending: Option<Arc<AtomicBool>>,
    ) -> Result<Self, TurnTimedOut> {
        let queues = &hand_off.queues;
        let turn = if queues.has_waiters(keys) {
            let turn = turn_before(queues, keys, deadline).await?;
            mark(&contending);
            Some(turn)
        } else {
            None
        };
        let takes_grants = config.fair() && config.direct_grant() && keys.len() == 1;
        let mut waiter = Waiter {
            hand_off: Arc::clone(hand_off),
            keys: keys.clone(),
            deadline,
            fair: config.fair(),
            notify_releases: config.notify_releases(),
            interest: waiter_interest(config),
            node_timeout: config.node_timeout(),
            began: SystemTime::now(),
            turn,
            place: None,
            queued: None,
            takes_grants,
            stamp: 0,
            reservations: None,
            releases: None,
            collisions: 0,
            contending,
        };
        if waiter.fair && queues.recently_contended(keys) {
            waiter.join_line().await;
        }
        Ok(waiter)
    }

    /// How the next attempt asks the nodes. The first is a plain one, the same as an
    /// uncontended lock takes; once it joined the line, each queues (or refreshes the
    /// place) when refused, and a waiter of the direct grant waits up to `wait` for the
    /// grants of the nodes that refused it. The releases announced so far no longer count.
    pub(crate) fn next_attempt(&mut self, wait: Duration) -> Asking {
        if let Some(releases) = &mut self.releases {
            releases.mark_seen();
        }
        match (&self.queued, &self.place, &self.releases) {
            (Some(_), Some(place), _) => {
                let grants = self.takes_grants.then(|| {
                    self.stamp += 1;
                    let announced = self.reservations.clone();
                    Arc::new(Grants::new(self.stamp, announced, wait))
                });
                Asking::Queued(Arc::clone(place), grants)
            }
            (_, _, Some(_)) => Asking::Watching(self.interest),
            _ => Asking::Plain,
        }
    }

    /// After an attempt found the lock held (which the attempt remembered, see
    /// `HandOff::found_held`): takes this acquisition's turn among the process's waiters,
    /// then joins the nodes' line (fair) or watches the key's releases (not fair; only now,
    /// once contended: an uncontended lock never subscribes). Fails when the deadline
    /// passes before the turn comes.
    pub(crate) async fn found_held(&mut self) -> Result<Next, TurnTimedOut> {
        if self.turn.is_none() {
            let turn = turn_before(&self.hand_off.queues, &self.keys, self.deadline).await?;
            mark(&self.contending);
            self.turn = Some(turn);
        }
        if self.fair && self.queued.is_none() {
            // Without announcements to wake it, it queues with the next attempt, after the
            // usual wait.
            self.join_line().await;
            if self.reservations.is_some() {
                return Ok(Next::AtOnce);
            }
        }
        if !self.fair && self.releases.is_none() && self.notify_releases {
            // A lock over several resources watches the first: its release announces every
            // key, the first among them.
            self.releases = self.hand_off.release_watches(&self.keys[0]).await;
            if self.releases.is_some() {
                return Ok(Next::AtOnce);
            }
        }
        Ok(Next::AfterWait)
    }

    /// Waits between two attempts, `wait` at most. After a refusal (`held`), a waiter that
    /// asked in its place waits for the lock to be reserved for it; one that watches
    /// releases waits for a quorum of them, then a random spread of up to `round` (the last
    /// attempt's duration) widened by each wake-up it lost. Otherwise it sleeps `wait`.
    pub(crate) async fn wait(
        &mut self,
        asked: &Asking,
        held: bool,
        wait: Duration,
        round: Duration,
    ) {
        match (&mut self.reservations, asked, &mut self.releases) {
            // It waited for its grants within the attempt.
            (_, Asking::Queued(_, Some(grants)), _) if held && grants.announced() => {}
            (Some(reservations), Asking::Queued(place, _), _) if held => {
                let grace = round.max(MIN_RESERVATION_GRACE);
                reservations
                    .wait_for_turn(wait, grace, place.waiter.as_str())
                    .await;
            }
            (_, _, Some(releases)) if held => {
                releases.wait(wait, round, self.collisions).await;
                self.collisions += 1;
            }
            _ => tokio::time::sleep(wait).await,
        }
    }

    /// The acquisition won: its winning attempt took care of the queues.
    pub(crate) fn won(self) {
        if let Some(mut queued) = self.queued {
            queued.disarm();
        }
    }

    /// The acquisition ends without the lock: it gives its place back before returning, not
    /// in the background, since a process that exits on this error would otherwise leave
    /// the line waiting for it until the place lapses. It costs at most one node timeout.
    pub(crate) async fn give_up(self) {
        if let Some(mut queued) = self.queued {
            queued.leave_now().await;
        }
    }

    /// Joins the line: watches for the reservation first, so that none is missed, and from
    /// then on has a place to give back when the acquisition ends without the lock, however
    /// it ends (an error, a timeout, its future dropped). The place reaches the nodes with
    /// the next attempt.
    async fn join_line(&mut self) {
        let place = self
            .place
            .get_or_insert_with(|| Arc::new(self.hand_off.queue_place(self.began, self.interest)));
        let waiter = place.waiter.clone();
        self.reservations = self
            .hand_off
            .reservation_watches(self.notify_releases)
            .await;
        self.queued = Some(PlaceInLine {
            armed: Some((
                Arc::clone(&self.hand_off),
                self.keys.clone(),
                waiter,
                self.node_timeout,
            )),
        });
    }
}

/// Sets the flag that the waiter holds its turn, if it has one.
fn mark(contending: &Option<Arc<AtomicBool>>) {
    if let Some(flag) = contending {
        flag.store(true, Ordering::Release);
    }
}

/// Waits for this process's turn to contend for `keys`, until `deadline` at most.
async fn turn_before(
    queues: &Arc<LocalQueues>,
    keys: &Keys,
    deadline: Option<Instant>,
) -> Result<LocalTurn, TurnTimedOut> {
    match deadline {
        None => Ok(queues.turn(keys).await),
        Some(deadline) => tokio::time::timeout_at(deadline, queues.turn(keys))
            .await
            .map_err(|_| TurnTimedOut),
    }
}

/// How long what a waiter leaves on a node with one attempt must last: longer than a waiter
/// ever goes between two attempts (two of the longest retry waits and four node timeouts,
/// plus a margin for scheduling), so that a live waiter keeps it and a dead one leaves it
/// behind no longer. Its queue place, or its interest in announcements.
pub(crate) fn waiter_interest(config: &LockConfig) -> Duration {
    let longest_wait = config.retry_delay().saturating_add(config.retry_jitter());
    longest_wait
        .saturating_mul(2)
        .saturating_add(config.node_timeout().saturating_mul(4))
        .saturating_add(WAITER_MARGIN)
}

/// A waiter's place in the nodes' queues, given back in the background unless disarmed: a
/// blocking acquisition that ends without the lock (an error, a timeout, its future
/// dropped) gives its place back at once, instead of leaving it to lapse while the line
/// waits for it.
struct PlaceInLine {
    armed: Option<(Arc<HandOff>, Keys, LockToken, Duration)>,
}

impl PlaceInLine {
    /// Called once the acquisition won: its winning attempt took care of the queues.
    fn disarm(&mut self) {
        self.armed = None;
    }

    /// Leaves the queues now (in the background only if this future is dropped meanwhile).
    async fn leave_now(&mut self) {
        if let Some((hand_off, keys, waiter, timeout)) = &self.armed {
            hand_off.leave_queues(keys, waiter, *timeout).await;
        }
        self.disarm();
    }
}

impl Drop for PlaceInLine {
    fn drop(&mut self) {
        if let Some((hand_off, keys, waiter, timeout)) = self.armed.take() {
            hand_off.leave_queues_in_background(keys, waiter, timeout);
        }
    }
}
