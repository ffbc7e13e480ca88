//! Cohorts: a held lock passes from task to task of this process without a round trip.
//!
//! When tasks of one process wait for a lock that a task of the same process holds, the
//! holder's release hands the lock straight to the next of them (lock cohorting, Dice,
//! Marathe and Shavit, PPoPP 2012): the keys stay on the nodes under the same token, and
//! the waiter gets a new guard, with a lease of its own, at once. Nothing goes to the
//! nodes, where a release, its announcement and the next claim cost three round trips.
//!
//! The waiters meet where the lock's connections do: [`Cohorts`] is shared by every lock on
//! one set of node connections (clones, other configurations, factories), as the
//! hand-off's turns are. A blocking acquisition takes a [`Seat`] in the line of its keys
//! for as long as it waits (from its start when the keys are contended in this process,
//! else from its first refusal); a release offers the coordinator's baton (`pass`) to the
//! first seat that is not itself contending on the nodes (the head of the process's
//! waiters, which keeps the process's place in the nodes' queue), or to that one when it
//! waits alone. The lines hold whatever the coordinator passes, and know nothing of it.
//!
//! Bounded: a lock passes at most [`cohort_passes`](crate::LockConfig::cohort_passes)
//! times in a row, within [`cohort_window`](crate::LockConfig::cohort_window) of being won
//! on the nodes, and only while at least half its longest validity is left; then the
//! release goes to the nodes, whose queue serves the other processes' waiters. With fencing
//! on, no lock is passed: every holder mints its own token. The safety argument is in
//! docs/design.md, "Cohorts".

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::resource::Keys;

/// The lines of this process's blocking acquisitions, per set of keys and TTL, that a
/// release may pass its lock to: a `B` (the coordinator's baton) goes to a seat.
pub(crate) struct Cohorts<B> {
    lines: Mutex<HashMap<Line, VecDeque<Place<B>>>>,
    next_id: AtomicU64,
}

impl<B> Default for Cohorts<B> {
    fn default() -> Self {
        Cohorts {
            lines: Mutex::default(),
            next_id: AtomicU64::new(0),
        }
    }
}

/// Which waiters a lock may pass to: those of the same keys whose locks have the same
/// [`Terms`].
pub(crate) type Line = (Keys, Terms);

/// A lock's TTL and its keys' expiry (the TTL plus the lock-delay, see
/// [`LockConfig::key_ttl`](crate::LockConfig::key_ttl)), both part of a [`Line`].
///
/// The keys' expiry is because a passer's extension may still be on its way when it
/// passes (its watchdog is stopped, but a request already sent is delivered): landing
/// after the receiver's own extension, it sets the keys' expiry to the passer's from
/// then. With equal expiries that only lengthens the one the receiver counts on; with a
/// shorter one it could end before the receiver's deadline (or its lock-delay). The TTL
/// is because the receiver inherits the passer's deadline, and counts on the keys
/// outliving it by its own lock-delay: the expiry less the TTL.
pub(crate) type Terms = (Duration, Duration);

/// One waiting acquisition's place in a line: where a baton reaches it.
struct Place<B> {
    id: u64,
    /// Set while the acquisition holds the process's turn on the nodes (see
    /// `handoff::turns`): passing to it would give up the process's place in the nodes'
    /// queue, so it gets a pass only when nobody else waits.
    contending: Arc<AtomicBool>,
    baton: oneshot::Sender<B>,
}

impl<B> Cohorts<B> {
    /// A seat for a blocking acquisition of `keys` with a lock of `terms`, not yet in their
    /// line: it sits down with [`Seat::sit`], once the acquisition may have to wait, and
    /// leaves when dropped.
    pub(crate) fn seat(self: &Arc<Self>, keys: &Keys, terms: Terms) -> Seat<B> {
        Seat {
            cohorts: Arc::clone(self),
            line: (keys.clone(), terms),
            contending: Arc::new(AtomicBool::new(false)),
            sitting: Mutex::new(Sitting::Standing { waker: None }),
        }
    }

    /// Whether anybody of this process waits in the line of `keys` for a lock of `terms`.
    /// Free while no line is open: the map is not hashed into when empty.
    pub(crate) fn has_line(&self, keys: &Keys, terms: Terms) -> bool {
        let lines = lock(&self.lines);
        !lines.is_empty() && lines.contains_key(&(keys.clone(), terms))
    }

    /// Puts a place for `contending` in `line`: its id, and where its baton arrives.
    fn sit(&self, line: &Line, contending: &Arc<AtomicBool>) -> (u64, oneshot::Receiver<B>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (baton, passed) = oneshot::channel();
        let place = Place {
            id,
            contending: Arc::clone(contending),
            baton,
        };
        lock(&self.lines)
            .entry(line.clone())
            .or_default()
            .push_back(place);
        (id, passed)
    }

    /// Gives `baton` to the first live place in `line` that is not contending on the
    /// nodes, else to the first live one; gives it back when nobody waits.
    pub(crate) fn offer(&self, line: &Line, mut baton: B) -> Result<(), B> {
        loop {
            let Some(place) = self.next_place(line) else {
                return Err(baton);
            };
            match place.baton.send(baton) {
                Ok(()) => return Ok(()),
                // Its acquisition ended meanwhile: the next one.
                Err(returned) => baton = returned,
            }
        }
    }

    /// Takes the place the next pass goes to out of line `key`.
    fn next_place(&self, key: &Line) -> Option<Place<B>> {
        let mut lines = lock(&self.lines);
        let line = lines.get_mut(key)?;
        line.retain(|place| !place.baton.is_closed());
        let index = line
            .iter()
            .position(|place| !place.contending.load(Ordering::Acquire))
            .unwrap_or(0);
        let place = line.remove(index);
        if line.is_empty() {
            lines.remove(key);
        }
        place
    }

    /// Takes the place `id` out of line `key`, if it is still there.
    fn leave(&self, key: &Line, id: u64) {
        let mut lines = lock(&self.lines);
        if let Some(line) = lines.get_mut(key) {
            line.retain(|place| place.id != id);
            if line.is_empty() {
                lines.remove(key);
            }
        }
    }
}

/// A blocking acquisition's seat in the line of its keys. It sits down (joins the line)
/// only once the acquisition may have to wait: most acquisitions win their first attempt,
/// and a seat taken for those cost a map entry, a channel and two hashes of the keys for
/// nothing (about 7 % of an uncontended single-node cycle, by callgrind). Dropped (the
/// acquisition won on the nodes, gave up, or its future was dropped), it leaves the line,
/// and a baton that reached it meanwhile goes on to the next seat, or to the nodes.
pub(crate) struct Seat<B> {
    cohorts: Arc<Cohorts<B>>,
    line: Line,
    contending: Arc<AtomicBool>,
    /// Shared by the two futures the acquisition races: the one on the nodes sits down,
    /// the other waits for a baton.
    sitting: Mutex<Sitting<B>>,
}

/// Whether a seat is in its line.
enum Sitting<B> {
    /// Not yet; the task waiting for a baton, to be woken when it sits down.
    Standing { waker: Option<Waker> },
    /// In the line as `id`, where a baton arrives on `passed`.
    Seated {
        id: u64,
        passed: oneshot::Receiver<B>,
    },
    /// Its baton was taken, or its place was taken out of the line without one.
    Done,
}

impl<B> Seat<B> {
    /// The flag the acquisition's waiter sets while it holds the process's turn on the
    /// nodes.
    pub(crate) fn contending(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.contending)
    }

    /// Joins the line of its keys, if not in it yet: from now on a release in this process
    /// may pass the lock to it.
    pub(crate) fn sit(&self) {
        let mut sitting = lock(&self.sitting);
        if let Sitting::Standing { waker } = &mut *sitting {
            let waker = waker.take();
            let (id, passed) = self.cohorts.sit(&self.line, &self.contending);
            *sitting = Sitting::Seated { id, passed };
            drop(sitting);
            // The baton's future last saw the seat standing: it must look again, or a
            // baton sent now would wait for some other wake-up of the task.
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Waits for a lock passed to this seat (never, while it stands).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses nothing: a baton sent meanwhile waits in the seat.
    pub(crate) async fn passed(&self) -> B {
        std::future::poll_fn(|context| {
            let mut sitting = lock(&self.sitting);
            match &mut *sitting {
                Sitting::Standing { waker } => {
                    if !waker.as_ref().is_some_and(|w| w.will_wake(context.waker())) {
                        *waker = Some(context.waker().clone());
                    }
                    Poll::Pending
                }
                Sitting::Seated { passed, .. } => match Pin::new(passed).poll(context) {
                    Poll::Ready(Ok(baton)) => {
                        *sitting = Sitting::Done;
                        Poll::Ready(baton)
                    }
                    // The place was taken out of the line without a baton: none will come.
                    Poll::Ready(Err(_)) => {
                        *sitting = Sitting::Done;
                        Poll::Pending
                    }
                    Poll::Pending => Poll::Pending,
                },
                Sitting::Done => Poll::Pending,
            }
        })
        .await
    }
}

impl<B> Drop for Seat<B> {
    fn drop(&mut self) {
        let sitting = std::mem::replace(
            self.sitting
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Sitting::Done,
        );
        if let Sitting::Seated { id, passed } = sitting {
            // Out of the line first, and the line's lock released, before a baton that
            // reached this seat is dropped: its drop offers it to the line again.
            self.cohorts.leave(&self.line, id);
            drop(passed);
        }
    }
}

/// Locks the lines, recovering them from a poisoned mutex (they stay consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seat_joins_its_line_only_once_it_sits_down() {
        let cohorts = Arc::new(Cohorts::<()>::default());
        let keys = Keys::from(vec![Arc::<str>::from("quorumlock:k")]);
        let ttl = (Duration::from_secs(30), Duration::from_secs(30));
        let seat = cohorts.seat(&keys, ttl);
        assert!(
            !cohorts.has_line(&keys, ttl),
            "a standing seat is in no line"
        );
        seat.sit();
        seat.sit();
        assert!(cohorts.has_line(&keys, ttl));
        let secs = Duration::from_secs;
        assert!(!cohorts.has_line(&keys, (secs(10), secs(10))));
        // Another lock-delay (the same TTL, a longer expiry) is another line.
        assert!(!cohorts.has_line(&keys, (secs(30), secs(35))));
        assert_eq!(lock(&cohorts.lines)[&(keys.clone(), ttl)].len(), 1);
        drop(seat);
        assert!(
            !cohorts.has_line(&keys, ttl),
            "a dropped seat leaves its line"
        );
    }
}
