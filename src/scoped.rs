//! Work run under a lock: auto-extended while it runs, cancelled when the lock is lost,
//! released on every exit path.

use std::future::Future;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::LostSignal;
use crate::watchdog::AutoExtend;

/// Runs `work` while `guard` holds its lock; see [`DistributedLock::with`](crate::DistributedLock::with).
pub(crate) async fn run_locked<F, Fut, T>(mut guard: LockGuard, work: F) -> Result<T, LockError>
where
    F: FnOnce(LostSignal) -> Fut,
    Fut: Future<Output = T>,
{
    guard.auto_extend(AutoExtend::default())?;
    let lost = guard.lost();
    let work = work(lost.clone());
    // A panic in `work` unwinds through here and drops the guard, which releases the lock
    // in the background.
    tokio::select! {
        // Loss first: when both are ready, the work cannot be shown to have finished while
        // the lock was still ours.
        biased;
        end = lost.wait() => Err(LockError::Lost {
            resource: guard.resource().to_owned(),
            end,
        }),
        value = work => {
            // The work finished within the validity, so exclusion held throughout; a failed
            // release only leaves keys that expire by their TTL.
            let _ = guard.release().await;
            Ok(value)
        }
    }
}
