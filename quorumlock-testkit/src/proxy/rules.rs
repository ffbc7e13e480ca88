//! The proxy's rules: the fault settings every connection reads before each chunk (latency
//! per direction, blackhole, refusal, reset rules, the epochs that end or strand open
//! connections), and the search for a rule's or a tap's pattern across chunks.

use std::time::Duration;

use rand::Rng;

/// Patterns are found across chunk boundaries when at most this long.
pub(super) const MAX_PATTERN: usize = 1024;

/// A direction of traffic through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to node: requests.
    ToServer,
    /// Node to client: replies.
    ToClient,
    /// Both directions.
    Both,
}

impl Direction {
    /// The per-direction array indices this direction covers.
    pub(super) fn indices(self) -> &'static [usize] {
        match self {
            Direction::ToServer => &[UP],
            Direction::ToClient => &[DOWN],
            Direction::Both => &[UP, DOWN],
        }
    }
}

/// Index of the client-to-node direction in per-direction arrays.
pub(super) const UP: usize = 0;
/// Index of the node-to-client direction in per-direction arrays.
pub(super) const DOWN: usize = 1;

/// When a [`reset_on`](crate::FaultProxy::reset_on) rule resets the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResetWhen {
    /// As soon as the pattern is read from the client, without forwarding the
    /// chunk that holds it: the node never runs the command.
    BeforeForwarding,
    /// After forwarding the chunk and seeing the node's reply (or after 1 s),
    /// which is not delivered: the node ran the command, the client never
    /// learns the outcome. The node's side of the connection is closed
    /// normally, so the node finishes every command it received.
    AfterForwarding,
}

/// A delay applied to every chunk of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Latency {
    /// Added to every chunk.
    pub(super) delay: Duration,
    /// The most a uniformly random extra adds on top.
    pub(super) jitter: Duration,
}

impl Latency {
    /// The delay of one chunk.
    pub(super) fn sample(&self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let jitter_nanos = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let extra = rand::rng().random_range(0..=jitter_nanos);
        self.delay.saturating_add(Duration::from_nanos(extra))
    }
}

/// A pending [`reset_on`](crate::FaultProxy::reset_on) rule.
#[derive(Clone, Debug)]
pub(super) struct Rule {
    /// The bytes that fire it.
    pub(super) pattern: Vec<u8>,
    /// When the connection that sent them is reset.
    pub(super) when: ResetWhen,
}

/// The fault settings, read by every task before each chunk.
#[derive(Clone, Debug, Default)]
pub(super) struct Faults {
    /// Per direction, indexed by [`UP`] and [`DOWN`].
    pub(super) latency: [Latency; 2],
    /// Nothing is delivered either way while set.
    pub(super) blackhole: bool,
    /// New connections are refused while set.
    pub(super) refuse_new: bool,
    /// Pending reset rules, in the order they were set.
    pub(super) rules: Vec<Rule>,
    /// Bumped by `reset_all`: connections born under an older value are reset.
    pub(super) reset_epoch: u64,
    /// Bumped by `close_all`: connections born under an older value are closed.
    pub(super) close_epoch: u64,
    /// Bumped by `strand_open`: connections born under an older value never deliver again.
    pub(super) strand_epoch: u64,
}

/// Keeps the last bytes of a stream, so that patterns split across two reads are found.
pub(super) fn remember_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    let excess = tail.len().saturating_sub(MAX_PATTERN - 1);
    tail.drain(..excess);
}

/// Occurrences of `pattern` in `tail ++ bytes` that end inside `bytes` (those
/// ending inside `tail` were counted with the previous chunk).
pub(super) fn occurrences(tail: &[u8], bytes: &[u8], pattern: &[u8]) -> usize {
    if pattern.is_empty() {
        return 0;
    }
    let mut joined = Vec::with_capacity(tail.len() + bytes.len());
    joined.extend_from_slice(tail);
    joined.extend_from_slice(bytes);
    joined
        .windows(pattern.len())
        .enumerate()
        .filter(|(start, window)| start + pattern.len() > tail.len() && *window == pattern)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occurrences_span_chunk_boundaries_and_count_once() {
        assert_eq!(occurrences(b"", b"xxSETxxSET", b"SET"), 2);
        assert_eq!(occurrences(b"xxS", b"ETxx", b"SET"), 1);
        // Entirely inside the tail: counted with the previous chunk already.
        assert_eq!(occurrences(b"SETx", b"yy", b"SET"), 0);
        assert_eq!(occurrences(b"", b"abc", b""), 0);
    }

    #[test]
    fn tails_stay_bounded() {
        let mut tail = Vec::new();
        remember_tail(&mut tail, &[7; 5000]);
        assert_eq!(tail.len(), MAX_PATTERN - 1);
        remember_tail(&mut tail, b"abc");
        assert!(tail.ends_with(b"abc"));
        assert_eq!(tail.len(), MAX_PATTERN - 1);
    }

    #[test]
    fn latency_samples_stay_in_range() {
        let latency = Latency {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
        };
        for _ in 0..100 {
            let d = latency.sample();
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
        }
        assert_eq!(Latency::default().sample(), Duration::ZERO);
    }
}
