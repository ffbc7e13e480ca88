//! How a [`Link`] connects: an attempt in a task of its own, the server checked within the
//! connect timeout (who answers, may it vote, must it abstain), and the outcome taken into
//! use.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::RedisError;
use tokio::time::Instant;

use super::{backoff, not_connected, Link, State};
use crate::backend::identity::{self, Refusal, Rejection};

impl Link {
    /// Starts an attempt to connect, driven by a task of its own so that no request waits
    /// on another's future.
    pub(super) fn start_connecting(self: &Arc<Self>, state: &mut State, queue: bool) {
        let (failures, last) = match state {
            State::Down { failures, why, .. } => (*failures, why.clone()),
            _ => (0, Rejection::Failed(not_connected("reconnecting"))),
        };
        *state = State::Connecting { queue, last };
        let link = Arc::clone(self);
        let attempt = async move {
            // A panic below (a TLS stack without a crypto provider, say) must not leave the
            // node connecting for ever: it counts as a failed attempt, and is retried.
            let outcome = std::panic::AssertUnwindSafe(link.establish())
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(Rejection::Failed(not_connected(
                        "the attempt to connect panicked",
                    )))
                });
            if let Some(generation) = link.settle(outcome, failures) {
                if link.clock.is_some() {
                    // Weak, and the strong one let go: a lock dropped by its user takes its
                    // links with it (kept here, it kept the link, its connection and this
                    // watch alive for ever, a TIME a second to a lock nobody had).
                    let watched = Arc::downgrade(&link);
                    drop(link);
                    Link::watch_clock(watched, generation).await;
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(attempt)),
            Err(_) => {
                *state = State::Down {
                    retry_at: Instant::now(),
                    why: Rejection::Failed(not_connected("no tokio runtime to connect on")),
                    failures,
                    queue_next: false,
                };
            }
        }
    }

    /// Connects and checks the server, within the connect timeout.
    pub(super) async fn establish(&self) -> Result<MultiplexedConnection, Rejection> {
        let attempt = async {
            let mut connection = self
                .client
                .connect(&self.config)
                .await
                .map_err(identity::rejection)?;
            let facts = identity::inspect(&mut connection).await?;
            if facts.info_denied && self.said_info_denied.first() {
                tracing::warn!(
                    node = %self.name,
                    "INFO is denied to this user: the server is told apart by the address it \
                     reports (CLIENT INFO), and is not checked for being a replica or a \
                     cluster node; allow `info` (see docs/operations.md)"
                );
            }
            self.admission
                .admit(&self.name, &facts)
                .map_err(Rejection::Refused)?;
            if let Some(abstention) = self.admission.abstention(&facts) {
                return Err(Rejection::Abstaining(abstention));
            }
            if let Some(abstention) = self.clock_abstains() {
                return Err(Rejection::Abstaining(abstention));
            }
            Ok(connection)
        };
        let outcome = match tokio::time::timeout(self.settings.connect_timeout, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Rejection::Failed(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no connection within the connect timeout of {:?}",
                    self.settings.connect_timeout
                ),
            )))),
        };
        match outcome {
            Err(Rejection::Refused(Refusal::NoDatabase { db: None })) => {
                Err(Rejection::Refused(Refusal::NoDatabase {
                    db: self.client.database(),
                }))
            }
            // A plain server on a `rediss://` port never answers the TLS handshake (it
            // waits for the end of a command line): a quarter of the connect timeout asks
            // it in plain text whether that is why.
            Err(Rejection::Failed(err)) => match self.client.tls_address() {
                Some((host, port))
                    if identity::speaks_plain_redis(
                        &host,
                        port,
                        self.settings.connect_timeout / 4,
                    )
                    .await =>
                {
                    Err(Rejection::Refused(Refusal::NotTls))
                }
                _ => Err(Rejection::Failed(err)),
            },
            outcome => outcome,
        }
    }

    /// Takes the outcome of an attempt to connect into use; the generation of the new
    /// connection, if one was made.
    pub(super) fn settle(
        &self,
        outcome: Result<MultiplexedConnection, Rejection>,
        failures: u32,
    ) -> Option<u64> {
        let mut state = self.lock_state();
        let mut opened = None;
        *state = match outcome {
            Ok(connection) => {
                self.silence.reset();
                self.open.store(true, Ordering::Relaxed);
                if let Some(clock) = &self.clock {
                    clock.reset();
                }
                let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
                opened = Some(generation);
                State::Up {
                    connection,
                    generation,
                }
            }
            Err(why) => {
                let failures = failures.saturating_add(1);
                let mut retry_at = Instant::now() + backoff(failures);
                match &why {
                    Rejection::Refused(refusal) => self.warn_refused(refusal),
                    // Once per abstention: the next attempt comes when it ends.
                    Rejection::Abstaining(abstention) => {
                        tracing::warn!(node = %self.name, %abstention, "node abstains after a restart; it counts as failed until then");
                        retry_at = Instant::now() + abstention.remaining;
                    }
                    Rejection::Failed(_) => {}
                }
                State::Down {
                    retry_at,
                    why,
                    failures,
                    queue_next: false,
                }
            }
        };
        self.changed.notify_waiters();
        opened
    }

    /// Says that the server was refused, at error level (a member that cannot serve is a
    /// mistake of the deployment, not a passing fault), once for each new reason: a node
    /// that keeps reaching a server it must not count (a duplicate, a replica after a
    /// failover) counts as failed on every request, and says why only when that changes.
    fn warn_refused(&self, refusal: &Refusal) {
        let reason = refusal.to_string();
        let mut said = self
            .said_refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if said.as_deref() != Some(reason.as_str()) {
            tracing::error!(node = %self.name, %refusal, "node refused; it counts as failed");
            *said = Some(reason);
        }
    }
}
