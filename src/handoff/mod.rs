//! Fast hand-off: a blocking acquire that lost to another holder waits for that holder's
//! release to be announced, instead of sleeping out its whole retry delay; with a fair lock,
//! for the release that grants the lock to it, or reserves it for it (see [`QueuePlace`],
//! [`Grants`]).
//!
//! [`HandOff`] is what one set of node connections keeps for it; a [`Waiter`] is one
//! blocking acquisition's part in it, from its start to its win or its giving up. The
//! coordinator asks the waiter how to ask the nodes and how long to wait between attempts,
//! and tells it what each attempt found; the waiter never sends a lock request.
//!
//! [`QueuePlace`]: crate::node::QueuePlace

mod grants;
mod shared;
mod turns;
mod waiter;
mod watches;

pub(crate) use self::grants::{Grants, Heard};
pub(crate) use self::shared::HandOff;
pub(crate) use self::waiter::{waiter_interest, Asking, Next, TurnTimedOut, Waiter};
