//! Minting a fencing token: the quorum max-register over the nodes' counters (see
//! [How tokens are minted](super#how-tokens-are-minted)).

use super::{FencingCounters, MAX_TOKEN};
use crate::error::{LockError, Tally};
use crate::resource::Keys;

/// What one counter round asks every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterRequest {
    /// The highest of the counters (a counter never set reads 0).
    Read,
    /// Raise each counter to this value unless it is already higher.
    Raise(u64),
}

/// The nodes' fencing counters, as a quorum answers for them: the coordinator's counter
/// rounds, which know the nodes, their timeouts and how failures are counted.
pub(crate) trait CounterQuorum {
    /// Sends `request` for `counters` to every node and waits for a quorum of answers:
    /// the highest value answered, or the round's tally when no quorum answered.
    async fn ask(&self, counters: &Keys, request: CounterRequest) -> Result<u64, Tally>;
}

/// Mints the next fencing token of `keys` as a quorum max-register: reads the counters
/// from a majority, then raises them to `max + 1` on a majority. Any two majorities
/// overlap, so the next holder reads at least this token and mints a larger one. (One
/// INCR per node with the maximum taken is not monotonic across different majorities.)
/// Which counters it reads and raises is the layout's (see [`FencingCounters::of`]): a
/// counter raised by other resources too only grows faster, which the argument allows.
pub(crate) async fn mint(
    quorum: &impl CounterQuorum,
    resource: &str,
    keys: &Keys,
    layout: FencingCounters,
) -> Result<u64, LockError> {
    let (read, counters) = layout.of(keys);
    let highest = quorum
        .ask(&read, CounterRequest::Read)
        .await
        .map_err(|tally| not_minted(resource, tally))?;
    // Lua scripts count in doubles: past 2^53 a counter could no longer grow exactly.
    let next = highest.saturating_add(1);
    if next > MAX_TOKEN {
        return Err(LockError::FencingExhausted {
            resource: resource.to_owned(),
            highest,
        });
    }
    // A node already above `next` holds a minority write of a failed mint; it still
    // stores at least `next`, which is all the argument needs.
    quorum
        .ask(&counters, CounterRequest::Raise(next))
        .await
        .map_err(|tally| not_minted(resource, tally))?;
    Ok(next)
}

/// Why no token was minted: no quorum answered one of the counter rounds.
fn not_minted(resource: &str, tally: Tally) -> LockError {
    tracing::warn!(resource, %tally, "fencing token not minted");
    LockError::NoQuorum {
        resource: resource.to_owned(),
        tally,
    }
}
