//! [`Election::observe`]: the leadership changes, as a stream of polls of a quorum.

use futures::Stream;

use super::{Election, Leader};
use crate::error::LockError;

/// What an observer last reported, so that it reports only changes and never steps back.
#[derive(Debug, Default)]
struct Seen {
    /// The last report; `None` before the first.
    last: Option<Option<Leader>>,
    /// The highest fencing token reported so far.
    highest: u64,
}

impl Seen {
    /// Whether `now` is news: a newer term, a new value of the same term, or the end of
    /// the term reported. An older term (or one already reported ended), which a node
    /// whose key has not expired yet can still answer, is not.
    fn is_news(&self, now: &Option<Leader>) -> bool {
        match (&self.last, now) {
            (None, _) => true,
            (Some(Some(before)), Some(now)) => {
                now.fencing_token > before.fencing_token
                    || (now.fencing_token == before.fencing_token && now.value != before.value)
            }
            (Some(None), Some(now)) => now.fencing_token > self.highest,
            (Some(Some(_)), None) => true,
            (Some(None), None) => false,
        }
    }

    fn report(&mut self, now: &Option<Leader>) {
        if let Some(leader) = now {
            self.highest = self.highest.max(leader.fencing_token);
        }
        self.last = Some(now.clone());
    }
}

impl Election {
    /// The leadership changes: first who leads now (`None`: nobody), then each change,
    /// asked of a quorum every [`observe_every`](Self::observe_every) interval. Terms only
    /// move forward: a newer leader (a higher fencing token), a new value of the same
    /// term, or the end of a term; a node that still answers an older term is outvoted by
    /// the fencing tokens. A round that no quorum answered is an `Err` item, and the
    /// stream goes on. It never ends.
    ///
    /// A change shows up within one interval (and one round) of happening. Observers see
    /// who leads; they do not hold anything: acting as the leader needs a
    /// [`Leadership`](super::Leadership).
    ///
    /// The stream is a `futures` one; the crate's re-export reads it, so the caller's
    /// dependencies need no `futures`:
    ///
    /// ```no_run
    /// use quorumlock::futures::StreamExt;
    /// use quorumlock::{Election, LockError};
    ///
    /// # async fn watch(election: Election) -> Result<(), LockError> {
    /// let mut changes = Box::pin(election.observe());
    /// while let Some(change) = changes.next().await {
    ///     match change? {
    ///         Some(leader) => println!("{} leads (term {})", leader.value, leader.fencing_token),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping the stream changes nothing.
    pub fn observe(
        &self,
    ) -> impl Stream<Item = Result<Option<Leader>, LockError>> + Send + 'static {
        let election = self.clone();
        futures::stream::unfold(
            (election, Seen::default()),
            |(election, mut seen)| async move {
                loop {
                    if seen.last.is_some() {
                        tokio::time::sleep(election.observe_every).await;
                    }
                    match election.leader().await {
                        Err(error) => return Some((Err(error), (election, seen))),
                        Ok(now) if seen.is_news(&now) => {
                            seen.report(&now);
                            return Some((Ok(now), (election, seen)));
                        }
                        Ok(_) => {}
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(value: &str, fencing_token: u64) -> Option<Leader> {
        Some(Leader {
            value: value.to_owned(),
            fencing_token,
        })
    }

    #[test]
    fn terms_only_move_forward() {
        let mut seen = Seen::default();
        assert!(seen.is_news(&None), "the first report, even of nobody");
        seen.report(&None);
        assert!(!seen.is_news(&None));
        assert!(seen.is_news(&leader("a", 3)));
        seen.report(&leader("a", 3));
        assert!(!seen.is_news(&leader("a", 3)));
        assert!(!seen.is_news(&leader("old", 2)), "an older term");
        assert!(seen.is_news(&leader("a2", 3)), "a new value of the term");
        assert!(seen.is_news(&None), "the term ended");
        seen.report(&None);
        assert!(!seen.is_news(&leader("a", 3)), "an ended term is not back");
        assert!(seen.is_news(&leader("b", 4)));
    }
}
