//! Why a server that may serve the lock does not yet: [`Abstention`], after a restart
//! without durable keys ([`restart_abstention`]) or after its clock misbehaved (see
//! [`clock`](super::clock)).

use std::fmt;
use std::time::Duration;

/// Why a server that may serve the lock does not yet: it started too recently to be
/// trusted with the keys of leases it granted before (see [`restart_abstention`]), or
/// its clock was seen to misbehave (see [`clock`](super::clock)).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Abstention {
    /// How much longer it abstains.
    pub(crate) remaining: Duration,
    /// Why.
    pub(crate) cause: AbstentionCause,
}

/// What a server said of its keys' durability: how long ago it started, whether it keeps
/// an append-only file, whether that is fsynced on every write (`None`: it would not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Durability {
    pub(crate) uptime: Option<Duration>,
    pub(crate) append_only: Option<bool>,
    pub(crate) fsync_always: Option<bool>,
}

/// Why a server abstains.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AbstentionCause {
    /// It started `uptime` ago, less than `window` (the longest lease plus drift), and
    /// `lacks` what would make its keys survive a restart.
    Restart {
        uptime: Duration,
        window: Duration,
        lacks: &'static str,
    },
    /// Its clock misbehaved; it abstains for `window` (the longest lease plus drift).
    Clock {
        anomaly: super::clock::ClockAnomaly,
        window: Duration,
    },
}

impl fmt::Display for Abstention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let remaining = self.remaining.as_secs_f64();
        match &self.cause {
            AbstentionCause::Restart {
                uptime,
                window,
                lacks,
            } => write!(
                f,
                "abstains for another {remaining:.1} s: it started {} s ago and {lacks}, so it \
                 may have restarted without the keys of leases it granted; it votes again \
                 once it is older than the longest lease plus drift ({:.1} s; \
                 Nodes::longest_lease sets the lease, appendfsync always or \
                 Nodes::restart_abstention(false) lifts it; docs/safety.md, \"Restarts\")",
                uptime.as_secs(),
                window.as_secs_f64(),
            ),
            AbstentionCause::Clock { anomaly, window } => write!(
                f,
                "abstains for another {remaining:.1} s: {anomaly}, so it may have expired \
                 keys early; it votes again a longest lease plus drift ({:.1} s) after that \
                 was seen (Nodes::clock_checks(false) turns the check off; docs/safety.md, \
                 \"Clocks\")",
                window.as_secs_f64(),
            ),
        }
    }
}

/// Whether a server that reported `facts` must abstain, and for how much longer: it
/// started less than `window` (the longest lease plus drift) ago (a restart, or a first boot, which a
/// client cannot tell apart) and does not keep an append-only file fsynced on every
/// write, so it may have come back without the keys of leases it granted that are
/// still valid. The uptime is counted in whole seconds, so a second is added.
pub(crate) fn restart_abstention(window: Duration, facts: &Durability) -> Option<Abstention> {
    let durable = facts.append_only == Some(true) && facts.fsync_always == Some(true);
    if durable {
        return None;
    }
    // A server that would not say its uptime (INFO denied) cannot be checked; the
    // warning about INFO says so.
    let uptime = facts.uptime?;
    let remaining = window
        .saturating_add(Duration::from_secs(1))
        .checked_sub(uptime)
        .filter(|remaining| !remaining.is_zero())?;
    Some(Abstention {
        remaining,
        cause: AbstentionCause::Restart {
            uptime,
            window,
            lacks: match (facts.append_only, facts.fsync_always) {
                (Some(true), None) => {
                    "keeps an append-only file but would not say whether \
                                   it is fsynced on every write (CONFIG GET appendfsync)"
                }
                (Some(true), _) => {
                    "keeps an append-only file that is not fsynced on every \
                                write (appendfsync is not always)"
                }
                _ => "keeps no append-only file",
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(30);

    fn facts(uptime: u64, append_only: Option<bool>, fsync_always: Option<bool>) -> Durability {
        Durability {
            uptime: Some(Duration::from_secs(uptime)),
            append_only,
            fsync_always,
        }
    }

    #[test]
    fn a_young_server_without_durable_keys_abstains_until_the_window_and_a_second() {
        let young = restart_abstention(WINDOW, &facts(5, Some(false), None)).unwrap();
        assert_eq!(young.remaining, Duration::from_secs(26));
        assert!(
            young.to_string().contains("keeps no append-only file"),
            "{young}"
        );
        let everysec = restart_abstention(WINDOW, &facts(5, Some(true), Some(false))).unwrap();
        assert!(everysec.to_string().contains("not fsynced"), "{everysec}");
        let unknown = restart_abstention(WINDOW, &facts(5, Some(true), None)).unwrap();
        assert!(
            unknown.to_string().contains("CONFIG GET appendfsync"),
            "{unknown}"
        );
        assert_eq!(
            restart_abstention(WINDOW, &facts(31, Some(false), None)),
            None
        );
    }

    #[test]
    fn a_server_that_fsyncs_every_write_never_abstains() {
        assert_eq!(
            restart_abstention(WINDOW, &facts(0, Some(true), Some(true))),
            None
        );
        // Uptime unknown (INFO denied): not checked.
        let denied = Durability::default();
        assert_eq!(restart_abstention(WINDOW, &denied), None);
    }
}
