//! The state a guard shares with its watchdog and its lost-lock signals: the deadline, and
//! how the lease ended. A lease is data: the coordinator acts on it, and records here what
//! its rounds found.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{LeaseEnd, Tally};
use crate::metrics::Counters;
use crate::resource::{Keys, Name, Resources};
use crate::token::LockToken;

/// Where a lease stands: its current deadline, and how it ended once it has.
#[derive(Debug, Clone)]
pub(crate) struct LeaseState {
    pub(crate) acquired_at: Instant,
    pub(crate) deadline: Instant,
    pub(crate) end: Option<LeaseEnd>,
}

/// One held lock, shared by its guard, its watchdog and its signals. The coordinator that
/// granted it acts on it (release, refresh, holds) and records the outcome here.
///
/// It is what a held lock costs the process, so it is kept to one allocation: the name is a
/// part of the key, the token is inline, the tally of a round that met no refusal or failure
/// is shared (see `Coordinator::won_tally`), and what only some leases need is boxed.
pub(crate) struct Lease {
    /// Where a lease that ends otherwise than released is counted as lost.
    counters: Arc<Counters>,
    name: Name,
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) fencing_token: Option<u64>,
    /// The winning round's tally, as counted when its quorum was decided.
    pub(crate) tally: Arc<Tally>,
    /// A mutex and a notification rather than a `watch` channel: the channel's shared
    /// state is a separate allocation of some 380 bytes (nine wait lists), more than the
    /// rest of the lease, for a value that changes a few times in the lease's life.
    state: Mutex<LeaseState>,
    /// Woken on every change of `state`; see [`LostSignal::wait`].
    changed: Notify,
    /// The custody of the keys on the nodes, which outlive this lease when it is passed
    /// to another task of the process (see `quorum::cohorts`): kept in the lease that won
    /// them on the nodes (no allocation of its own per lock), which the leases it is passed
    /// to point at. Whether they were given up (released or lost, which a pass is not)...
    keys_ended: AtomicBool,
    /// ... and what the release's unlock found on each node, kept only while the
    /// acquisition's late `SET`s are settled in the background (see [`Unlocks`]), which
    /// few leases need: boxed, so that the others do not carry it. (Two fields rather than
    /// a struct of both, which would pad the flag to eight bytes in every held lock.)
    unlocks: Option<Box<Unlocks>>,
    /// The first lease of the run, whose custody this one shares; `None` for that one.
    run_head: Option<Arc<Lease>>,
    /// Where this lease stands in its cohort run (a lock won on the nodes once, then
    /// passed from task to task, see `quorum::cohorts`): when the round that won it on the
    /// nodes began, and how many times it was passed since. Two fields rather than a
    /// struct of both, which would pad the count to eight bytes in every held lock.
    pub(crate) run_started: Instant,
    pub(crate) passes: u32,
    /// Set when the lease was passed on: its holder holds nothing any more, while the keys
    /// stay on the nodes for the next.
    passed: AtomicBool,
    /// For the entries of shared holders (readers, permits): the lock key whose holder
    /// list names them, which every extension keeps alive at least as long.
    pub(crate) listed_beside: Option<Arc<str>>,
    /// Set once a leader record was written (or is being written) under the lease's
    /// token beside its key: every extension then keeps the record as long as the key.
    proclaimed: AtomicBool,
    /// The session that keeps this lease alive, by its id; 0 for none (see
    /// [`Session`](crate::Session)). Changed only under that session's list of members.
    session: AtomicU64,
}

/// What the release's unlock found on each node, so that a `SET` of the acquisition that
/// comes back after the release is undone only where the release did not already delete
/// our keys (an unlock that deleted them ran after the `SET` landed).
pub(crate) struct Unlocks {
    outcomes: Box<[AtomicU8]>,
    /// Set once the acquisition's late `SET`s were all answered and undone where needed.
    settled: AtomicBool,
    /// Wakes the waiters of an outcome, and of the settling.
    recorded: Notify,
}

/// An unlock outcome: not known yet, deleted our keys, or did not (refused or failed).
const UNLOCK_PENDING: u8 = 0;
const UNLOCK_DELETED: u8 = 1;
const UNLOCK_NOT_DELETED: u8 = 2;

impl Unlocks {
    fn new(nodes: usize) -> Self {
        Unlocks {
            outcomes: (0..nodes).map(|_| AtomicU8::new(UNLOCK_PENDING)).collect(),
            settled: AtomicBool::new(false),
            recorded: Notify::new(),
        }
    }

    /// Records what the unlock sent to node `index` answered.
    pub(crate) fn record(&self, index: usize, deleted: bool) {
        if let Some(outcome) = self.outcomes.get(index) {
            let value = if deleted {
                UNLOCK_DELETED
            } else {
                UNLOCK_NOT_DELETED
            };
            outcome.store(value, Ordering::Release);
            self.recorded.notify_waiters();
        }
    }

    /// Whether the release's unlock deleted our keys on node `index`; waits up to
    /// `patience` for its answer, and says no when none came (the caller then unlocks
    /// again, which compare-and-delete makes harmless).
    pub(crate) async fn deleted_on(&self, index: usize, patience: Duration) -> bool {
        let answered = self.until(|unlocks| {
            match unlocks
                .outcomes
                .get(index)
                .map(|o| o.load(Ordering::Acquire))
            {
                Some(UNLOCK_PENDING) => None,
                outcome => Some(outcome == Some(UNLOCK_DELETED)),
            }
        });
        tokio::time::timeout(patience, answered)
            .await
            .unwrap_or(false)
    }

    /// Notes that every late `SET` of the acquisition was answered (or timed out) and, if
    /// the keys were given up, undone.
    pub(crate) fn settle(&self) {
        self.settled.store(true, Ordering::Release);
        self.recorded.notify_waiters();
    }

    /// Waits up to `patience` for [`settle`](Self::settle): a release on nodes that may
    /// apply requests out of order returns only once no `SET` of its lease can still land.
    pub(crate) async fn settled(&self, patience: Duration) {
        let settled = self.until(|unlocks| unlocks.settled.load(Ordering::Acquire).then_some(()));
        let _ = tokio::time::timeout(patience, settled).await;
    }

    /// Waits until `ready` says something. Each wait is registered before `ready` looks,
    /// so a record or settling between the look and the wait still wakes it.
    async fn until<T>(&self, ready: impl Fn(&Self) -> Option<T>) -> T {
        loop {
            let notified = self.recorded.notified();
            if let Some(value) = ready(self) {
                return value;
            }
            notified.await;
        }
    }
}

impl Lease {
    /// The lease of `resources` under `token`, won by a round that began at `acquired_at`
    /// and counted `tally`, valid until `deadline`.
    pub(crate) fn new(
        counters: Arc<Counters>,
        resources: &Resources,
        token: LockToken,
        tally: Arc<Tally>,
        acquired_at: Instant,
        deadline: Instant,
    ) -> Self {
        let state = LeaseState {
            acquired_at,
            deadline,
            end: None,
        };
        Lease {
            counters,
            name: resources.name.clone(),
            keys: resources.keys.clone(),
            token,
            fencing_token: None,
            tally,
            state: Mutex::new(state),
            changed: Notify::new(),
            keys_ended: AtomicBool::new(false),
            unlocks: None,
            run_head: None,
            run_started: acquired_at,
            passes: 0,
            passed: AtomicBool::new(false),
            listed_beside: None,
            proclaimed: AtomicBool::new(false),
            session: AtomicU64::new(0),
        }
    }

    /// Keeps a record of what the release's unlocks find on each of `nodes` nodes, for a
    /// background task that settles the acquisition's late `SET`s.
    pub(crate) fn tracking_unlocks(mut self, nodes: usize) -> Self {
        self.unlocks = Some(Box::new(Unlocks::new(nodes)));
        self
    }

    /// What the release's unlocks found on each node, when they are tracked.
    pub(crate) fn unlocks(&self) -> Option<&Unlocks> {
        self.custody().unlocks.as_deref()
    }

    /// The name of the locked resource (the sorted names joined by `" + "` for several).
    pub(crate) fn resource(&self) -> &str {
        self.name.of(&self.keys)
    }

    /// Whether the keys on the nodes were given up: released, or lost, by this lease or
    /// by one it was passed to. A late `SET` that lands then must be undone.
    pub(crate) fn keys_given_up(&self) -> bool {
        self.custody().keys_ended.load(Ordering::Acquire)
    }

    /// The lease in custody of the keys: this one, or the run's first.
    fn custody(&self) -> &Lease {
        self.run_head.as_deref().unwrap_or(self)
    }

    /// Whether this lease was passed on to another task of the process.
    pub(crate) fn was_passed(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }

    /// Ends this lease as passed on: its holder's lost signal reports it released, while
    /// the keys stay on the nodes, in the custody of the lease [`successor`](Self::successor)
    /// makes.
    pub(crate) fn end_passed(&self) {
        self.passed.store(true, Ordering::Release);
        self.record_end(LeaseEnd::Released);
    }

    /// The lease of the next holder of the same keys, one pass further in the run: the
    /// same token, tally and deadline, a fresh state of its own (its own lost signal), and
    /// the same custody of the keys.
    pub(crate) fn successor(self: &Arc<Self>) -> Lease {
        let state = self.state();
        Lease {
            counters: Arc::clone(&self.counters),
            name: self.name.clone(),
            keys: self.keys.clone(),
            token: self.token.clone(),
            fencing_token: self.fencing_token,
            tally: Arc::clone(&self.tally),
            state: Mutex::new(LeaseState {
                acquired_at: state.acquired_at,
                deadline: state.deadline,
                end: None,
            }),
            changed: Notify::new(),
            keys_ended: AtomicBool::new(false),
            unlocks: None,
            run_head: Some(Arc::clone(self.run_head.as_ref().unwrap_or(self))),
            run_started: self.run_started,
            passes: self.passes.saturating_add(1),
            passed: AtomicBool::new(false),
            listed_beside: self.listed_beside.clone(),
            proclaimed: AtomicBool::new(self.was_proclaimed()),
            // The receiver of a pass joins a session of its own accord.
            session: AtomicU64::new(0),
        }
    }

    /// Attaches the fencing token minted for this lease.
    pub(crate) fn with_fencing_token(mut self, fencing_token: Option<u64>) -> Self {
        self.fencing_token = fencing_token;
        self
    }

    /// Names the lock key whose holder list lists this lease's keys, if any.
    pub(crate) fn listed_beside(mut self, name: Option<Arc<str>>) -> Self {
        self.listed_beside = name;
        self
    }

    /// Records that a leader record is written under this lease's token.
    pub(crate) fn mark_proclaimed(&self) {
        self.proclaimed.store(true, Ordering::Release);
    }

    /// Whether a leader record was written under this lease's token.
    pub(crate) fn was_proclaimed(&self) -> bool {
        self.proclaimed.load(Ordering::Acquire)
    }

    /// The id of the session that keeps this lease alive; 0 for none.
    pub(crate) fn session(&self) -> u64 {
        self.session.load(Ordering::Acquire)
    }

    /// Records the session that keeps this lease alive (0: none).
    pub(crate) fn set_session(&self, id: u64) {
        self.session.store(id, Ordering::Release);
    }

    /// Whether the lease ended as released without its guard's release: by its session's
    /// [`close`](crate::Session::close), whose unlocks its guard need not send again.
    pub(crate) fn is_released(&self) -> bool {
        matches!(self.lock_state().end, Some(LeaseEnd::Released)) && !self.was_passed()
    }

    pub(crate) fn state(&self) -> LeaseState {
        self.lock_state().clone()
    }

    /// Whether an end was recorded (released, expired, lost), without copying the state.
    pub(crate) fn has_ended(&self) -> bool {
        self.lock_state().end.is_some()
    }

    /// When the acquisition round that took the lease began.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn acquired_at(&self) -> Instant {
        self.lock_state().acquired_at
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.lock_state().deadline
    }

    /// The state, recovered from a poisoned mutex: every change is one assignment, so a
    /// panic elsewhere cannot leave it half written.
    fn lock_state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` to the state, and wakes the lost signals' waits when it changed
    /// something (after the lock is released, so that they find it free).
    fn update(&self, change: impl FnOnce(&mut LeaseState) -> bool) {
        let changed = change(&mut self.lock_state());
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// Records a successful refresh, unless the lease already ended.
    pub(crate) fn extended(&self, acquired_at: Instant, deadline: Instant) {
        self.update(|state| {
            if state.end.is_some() {
                return false;
            }
            state.acquired_at = acquired_at;
            state.deadline = deadline;
            true
        });
    }

    /// Records how the lease ended (the first end recorded wins), and that its keys on the
    /// nodes were given up.
    pub(crate) fn end(&self, end: LeaseEnd) {
        if !matches!(end, LeaseEnd::Released) {
            Counters::bump(&self.counters.lost);
            tracing::warn!(resource = self.resource(), %end, "lock lost");
        }
        self.custody().keys_ended.store(true, Ordering::Release);
        self.record_end(end);
    }

    fn record_end(&self, end: LeaseEnd) {
        self.update(|state| {
            if state.end.is_some() {
                return false;
            }
            state.end = Some(end);
            true
        });
    }
}

/// Resolves when a lock is lost: released, expired, or found gone by a refresh.
///
/// Get one from [`LockGuard::lost`](crate::LockGuard::lost). It is cheap to clone, can move
/// to other tasks, and outlives the guard. Await it (it implements [`IntoFuture`]) or call
/// [`wait`](Self::wait), typically in a `tokio::select!` beside the critical section, to
/// stop work the moment the lock can no longer be trusted:
///
/// ```no_run
/// # use quorumlock::{LockConfig, Redlock};
/// # async fn run(lock: Redlock) -> Result<(), quorumlock::LockError> {
/// let mut guard = lock.acquire("singleton-worker").await?;
/// guard.auto_extend(Default::default())?;
/// let lost = guard.lost();
/// tokio::select! {
///     _ = do_the_work() => guard.release().await?,
///     end = lost => eprintln!("stopped: the lock was {end}"),
/// }
/// # Ok(())
/// # }
/// # async fn do_the_work() {}
/// ```
///
/// Without a watchdog it fires at the guard's deadline (or on release). With one
/// ([`LockGuard::auto_extend`](crate::LockGuard::auto_extend)) it fires when an extension
/// finds the lock gone, or when no extension could be confirmed and the remaining validity
/// is too short for another attempt, which is before the deadline.
#[derive(Clone)]
pub struct LostSignal {
    lease: Arc<Lease>,
}

impl LostSignal {
    pub(crate) fn new(lease: &Arc<Lease>) -> Self {
        LostSignal {
            lease: Arc::clone(lease),
        }
    }

    /// How the lease ended, if it has: recorded by the guard or watchdog, or the deadline
    /// passed.
    pub fn ended(&self) -> Option<LeaseEnd> {
        let state = self.lease.lock_state();
        match &state.end {
            Some(end) => Some(end.clone()),
            None if Instant::now() >= state.deadline => Some(LeaseEnd::Expired),
            None => None,
        }
    }

    /// The time left before the lease's current deadline (it moves with each extension);
    /// zero once it passed. Check it before a write that must happen under the lock.
    pub fn validity(&self) -> std::time::Duration {
        self.lease
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lease has ended.
    pub fn is_lost(&self) -> bool {
        self.ended().is_some()
    }

    /// Waits until the lease ends, and says how.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future changes nothing: a later wait (or [`ended`](Self::ended)) says
    /// the same.
    pub async fn wait(&self) -> LeaseEnd {
        loop {
            // Registered before the state is read: `notify_waiters` wakes only the waits
            // registered when it runs, so a change recorded after the read still wakes
            // this one. (A lease nobody extends any more simply keeps its deadline.)
            let mut changed = std::pin::pin!(self.lease.changed.notified());
            changed.as_mut().enable();
            let deadline = {
                let state = self.lease.lock_state();
                if let Some(end) = &state.end {
                    return end.clone();
                }
                state.deadline
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(deadline) => return LeaseEnd::Expired,
            }
        }
    }
}

impl IntoFuture for LostSignal {
    type Output = LeaseEnd;
    type IntoFuture = Pin<Box<dyn Future<Output = LeaseEnd> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.wait().await })
    }
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("ended", &self.ended())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocations::counted;
    use crate::config::LockConfig;
    use crate::resource::KeyLayout;

    /// A held lock's state is one allocation, the lease itself: its name is a part of its
    /// key, its token inline, its tally shared, and its lost signals and their waits add
    /// nothing. (A `watch` channel for the state was a second allocation of some 380 bytes,
    /// and a copied name a third.)
    #[test]
    fn a_lease_is_one_allocation_and_its_signals_none() {
        let resources =
            Resources::new(&LockConfig::default(), KeyLayout::Plain, &["order:1"]).unwrap();
        let (token, tally, counters) = (
            LockToken::generate(),
            Arc::new(Tally::default()),
            Arc::default(),
        );
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        let (lease, allocations, bytes) = counted(|| {
            Arc::new(Lease::new(
                counters, &resources, token, tally, now, deadline,
            ))
        });
        assert_eq!(allocations, 1);
        assert_eq!(
            bytes,
            std::mem::size_of::<Lease>() + 2 * std::mem::size_of::<usize>()
        );
        assert_eq!(lease.resource(), "order:1");

        let ((), allocations, _) = counted(|| {
            let signal = LostSignal::new(&lease);
            let other = signal.clone();
            drop(signal.wait());
            assert!(!other.is_lost());
            lease.extended(now, deadline + Duration::from_secs(1));
            lease.end(LeaseEnd::Released);
            assert_eq!(other.ended(), Some(LeaseEnd::Released));
        });
        assert_eq!(allocations, 0);
    }

    /// A wait registered before a change is woken by it, whichever comes first: the state
    /// read or the change.
    #[tokio::test(start_paused = true)]
    async fn a_wait_wakes_on_an_end_recorded_while_it_sleeps() {
        let resources =
            Resources::new(&LockConfig::default(), KeyLayout::Plain, &["order:1"]).unwrap();
        let now = Instant::now();
        let lease = Arc::new(Lease::new(
            Arc::default(),
            &resources,
            LockToken::generate(),
            Arc::new(Tally::default()),
            now,
            now + Duration::from_secs(10),
        ));
        let signal = LostSignal::new(&lease);
        let waiting = tokio::spawn(async move { signal.wait().await });
        tokio::task::yield_now().await;
        lease.extended(now, now + Duration::from_secs(20));
        tokio::task::yield_now().await;
        lease.end(LeaseEnd::Released);
        let end = tokio::time::timeout(Duration::from_secs(1), waiting).await;
        assert_eq!(end.expect("woken at once").unwrap(), LeaseEnd::Released);
    }
}
