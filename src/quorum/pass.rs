//! The pass of a released lock to the next waiting task of this process: the coordinator
//! offers its [`Baton`] to the line of the lease's keys, when the cohort's bounds allow,
//! and a baton dropped untaken goes on to the next seat, or to the nodes. The lines
//! themselves are in `cohorts`; the safety argument is in docs/design.md, "Cohorts".

use std::sync::Arc;

use tokio::time::Instant;

use super::cohorts::Line;
use super::{Baton, Coordinator};
use crate::error::LeaseEnd;
use crate::lease::Lease;
use crate::metrics::Counters;

impl Baton {
    /// The line it may go to: its keys', among the waiters with its coordinator's TTL and
    /// keys' expiry.
    fn line(&self) -> Line {
        let lease = self
            .lease
            .as_ref()
            .expect("a baton holds its lease until taken");
        (lease.keys.clone(), self.coordinator.config().terms())
    }

    /// The receiver's lease: the same keys and token, one pass further in the run, with
    /// its own state and lost signal.
    pub(crate) fn take(mut self) -> Arc<Lease> {
        let passed = self.lease.take().expect("a baton is taken once");
        let lease = Arc::new(passed.successor());
        Counters::bump(&self.coordinator.counters().passed);
        tracing::debug!(
            resource = lease.resource(),
            passes = lease.passes,
            "lock passed within the process"
        );
        lease
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            if let Err(lease) = self.coordinator.pass_on(lease) {
                lease.end(LeaseEnd::Released);
                self.coordinator.release_in_background(lease);
            }
        }
    }
}

impl Coordinator {
    /// Passes the lock of `lease` to a blocking acquisition of the same keys waiting in
    /// this process, when the cohort's bounds allow it; the lease then ends as passed, and
    /// its holder holds nothing. Returns whether it did: if not, the caller releases it on
    /// the nodes.
    pub(crate) fn pass_to_waiter(self: &Arc<Self>, lease: &Arc<Lease>) -> bool {
        match self.pass_on(Arc::clone(lease)) {
            Ok(()) => {
                lease.end_passed();
                true
            }
            Err(_) => false,
        }
    }

    /// Offers `lease` to the line of its keys, if the bounds allow a pass; gives it back
    /// when they do not, or nobody waits.
    fn pass_on(self: &Arc<Self>, lease: Arc<Lease>) -> Result<(), Arc<Lease>> {
        if !self.may_pass(&lease) {
            return Err(lease);
        }
        let baton = Baton {
            coordinator: Arc::clone(self),
            lease: Some(lease),
        };
        let line = baton.line();
        self.cohorts()
            .offer(&line, baton)
            .map_err(|mut baton| baton.lease.take().expect("a baton offered holds its lease"))
    }

    /// Whether `lease` may pass once more: cohorts on, fewer passes than the bound, within
    /// the window since it was won on the nodes, its keys not given up, and at least half
    /// the longest validity left for the next holder.
    fn may_pass(&self, lease: &Lease) -> bool {
        let config = self.config();
        if !config.cohorts() || lease.passes >= config.cohort_passes() {
            return false;
        }
        let now = Instant::now();
        let in_window = lease
            .run_started
            .checked_add(config.cohort_window())
            .is_some_and(|closes| now < closes);
        in_window
            && !lease.keys_given_up()
            && lease.deadline().saturating_duration_since(now) >= config.min_pass_validity()
    }
}
