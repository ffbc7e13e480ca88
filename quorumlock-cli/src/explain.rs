//! Lock errors in the command line's words: the library names its settings and methods
//! (`acquire timeout`, `Nodes::fencing_on_volatile_nodes`), a user typed options
//! (`--wait`, `--fencing-on-volatile-nodes`) or set variables (`QUORUMLOCK_KEY_PREFIX`).
//! Each error here names the option or variable that set what was refused, with a hint
//! for that cause.
//!
//! The library's wording stays the library's, for its own users: what it says is
//! translated ([`in_cli_terms`]), and the CLI tests hold each translation against the
//! library's text.

use std::time::Duration;

use quorumlock::{ConfigError, LockError};

use crate::args::GlobalArgs;
use crate::duration::format_duration;
use crate::exit::{CliError, Kind};
use crate::terms::in_cli_terms;

/// Explains `error` for a command given `global`: the configuration and node errors name
/// the option or variable behind them; the others are [`CliError::from_lock`]'s.
pub fn lock_error(error: &LockError, global: &GlobalArgs) -> CliError {
    match error {
        LockError::Config(config) => config_error(config, global),
        LockError::InvalidNode { node, reason } => invalid_node(node, reason, global),
        other => {
            let mut explained = CliError::from_lock(other);
            explained.message = in_cli_terms(&explained.message);
            explained
        }
    }
}

/// `explained`, the error of an acquisition that waited up to `wait` (`-w`), told as
/// such: the last attempt's error alone (the lock held, no quorum) reads as if `run` had
/// not waited, and the hint for a held lock would say to pass `--wait`.
pub fn after_wait(error: &LockError, wait: Duration, mut explained: CliError) -> CliError {
    let waited = format_duration(wait);
    match error {
        LockError::Held { .. } => {
            explained.message = format!("gave up after waiting {waited}: {}", explained.message);
            explained.hint = Some(format!(
                "another process held it the whole time: wait longer than -w {waited}, or see \
                 who holds it with `quorumlock status NAME`"
            ));
        }
        LockError::NoQuorum { .. } | LockError::ValidityExhausted { .. } => {
            explained.message = format!("gave up after waiting {waited}: {}", explained.message);
        }
        // A wait cut short says how long it ran; the other errors are not about waiting.
        _ => {}
    }
    explained
}

/// A setting the library refused, as the option that set it: the message says what was
/// given and what is accepted, the hint what to change.
pub fn config_error(error: &ConfigError, global: &GlobalArgs) -> CliError {
    let d = |duration: &Duration| format_duration(*duration);
    // The node timeout is named as typed, or as run's default when it was not.
    let node_timeout = |timeout: &Duration| match global.node_timeout {
        Some(_) => format!("--node-timeout {}", d(timeout)),
        None => format!(
            "the node timeout {} (the default; --node-timeout sets it)",
            d(timeout)
        ),
    };
    let (message, hint) = match error {
        ConfigError::ZeroTtl => (
            "--ttl must be greater than zero".to_owned(),
            "give how long the lock outlives a holder that died, such as --ttl 30s (the default)"
                .to_owned(),
        ),
        ConfigError::SubMillisecondTtl { ttl } => (
            format!("--ttl {ttl:?} is not a whole number of milliseconds"),
            "Redis expires keys to the millisecond: give --ttl in whole milliseconds, such as \
             --ttl 1500ms"
                .to_owned(),
        ),
        ConfigError::TtlTooLong { ttl, max } => (
            format!("--ttl {} is longer than the maximum {}", d(ttl), d(max)),
            "the TTL only bounds how long a holder that died keeps the lock; run extends it \
             while the command runs, so a long command needs no long TTL: keep --ttl short, \
             such as 30s"
                .to_owned(),
        ),
        ConfigError::ZeroNodeTimeout => (
            "--node-timeout must be greater than zero".to_owned(),
            "give how long one node may take to answer one command, such as --node-timeout 50ms"
                .to_owned(),
        ),
        ConfigError::ZeroConnectTimeout => (
            format!(
                "{} must be greater than zero",
                global.from_env.connect_timeout()
            ),
            format!(
                "give how long one connection to a node may take, such as {} 1s (the default)",
                global.from_env.connect_timeout()
            ),
        ),
        ConfigError::NodeTimeoutTooLong {
            node_timeout: timeout,
            ttl,
            max,
        } => (
            format!(
                "{} is more than a tenth of --ttl {} ({} at most)",
                node_timeout(timeout),
                d(ttl),
                d(max)
            ),
            format!(
                "raise --ttl to at least {}, or lower --node-timeout to at most {}: a slow \
                 node must not use up the lock's validity",
                d(&timeout.saturating_mul(10)),
                d(max)
            ),
        ),
        ConfigError::NoValidityLeft {
            ttl,
            drift,
            node_timeout: timeout,
        } => (
            format!(
                "--ttl {} leaves no validity after the clock-drift allowance {} and {}",
                d(ttl),
                d(drift),
                node_timeout(timeout)
            ),
            "raise --ttl, or lower --node-timeout".to_owned(),
        ),
        ConfigError::KeyPrefixTooLong { len, max } => (
            format!(
                "{} is {len} bytes long; at most {max} are accepted",
                global.from_env.key_prefix()
            ),
            "shorten the key prefix: it is prepended to the Redis key of every lock".to_owned(),
        ),
        ConfigError::AcquireTimeoutTooLong { timeout, max } => (
            // In seconds, as a bare -w number is read: 1000000000s, not 31years 8months ...
            format!(
                "-w/--wait {}s is longer than the maximum {}",
                timeout.as_secs(),
                d(max)
            ),
            format!(
                "wait at most {}; a bare number is seconds (-w 600 waits 10 minutes), and \
                 durations take a unit (-w 10m, -w 2h)",
                d(max)
            ),
        ),
        ConfigError::SubMillisecondLockDelay { lock_delay } => (
            format!("--lock-delay {lock_delay:?} is not a whole number of milliseconds"),
            "the delay is part of the keys' expiry, which Redis keeps to the millisecond: give \
             --lock-delay in whole milliseconds, such as --lock-delay 1500ms"
                .to_owned(),
        ),
        ConfigError::LockDelayTooLong {
            ttl,
            lock_delay,
            max,
        } => (
            format!(
                "--ttl {} plus --lock-delay {} is longer than the maximum {}",
                d(ttl),
                d(lock_delay),
                d(max)
            ),
            "the delay only keeps a holder that died or paused alone a little longer: keep it \
             about as long as the pauses you expect, such as --lock-delay 10s"
                .to_owned(),
        ),
        ConfigError::ZeroAcquireTimeout => (
            "-w/--wait must be greater than zero".to_owned(),
            "give how long to wait for the lock, such as -w 10s, or pass -n not to wait".to_owned(),
        ),
        // No option of the command line sets the others: reaching one is a fault of this
        // program, told in the library's words.
        other => {
            return CliError::new(
                Kind::Config,
                in_cli_terms(&LockError::Config(other.clone()).to_string()),
            )
        }
    };
    CliError::new(Kind::Config, format!("invalid setting: {message}")).hint(hint)
}

/// A node the library would not use: its reason in the command line's words, and a hint
/// for that reason (a node without persistence is not fixed by editing the node list).
pub fn invalid_node(node: &str, reason: &str, global: &GlobalArgs) -> CliError {
    let reason = in_cli_terms(reason);
    let hint = if reason.contains("append-only file") {
        "docs/operations.md, \"Fencing\", says how to run the nodes with an append-only \
         file; --fencing-on-volatile-nodes accepts that a node restarted empty could hand out \
         an old fencing token"
            .to_owned()
    } else if reason.contains("TLS options") {
        "the --tls-* options (and QUORUMLOCK_TLS_* variables) apply to rediss:// servers only: \
         drop them, or write the nodes as rediss:// URLs"
            .to_owned()
    } else {
        format!(
            "fix the node list ({}): comma-separated URLs such as redis://host:6379, \
             redis://:password@host:6379/0, rediss://host:6380",
            global.from_env.nodes()
        )
    };
    CliError::new(Kind::Config, format!("invalid node {node}: {reason}")).hint(hint)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::Cli;

    fn global(words: &[&str]) -> GlobalArgs {
        Cli::try_parse_from(["quorumlock"].iter().chain(words).chain(&["status", "x"]))
            .unwrap()
            .global
    }

    /// `error` explained for `global`; a configuration error's code, whatever it says.
    fn explained(error: ConfigError, global: &GlobalArgs) -> CliError {
        let explained = lock_error(&LockError::Config(error), global);
        assert_eq!(explained.code(), 78, "{explained}");
        explained
    }

    #[test]
    fn each_setting_is_named_as_it_was_given_with_a_hint_that_fits() {
        let typed = global(&["--node-timeout", "50ms"]);
        let ms = Duration::from_millis;
        let days = |n: u64| Duration::from_secs(n * 24 * 3600);
        for (error, names, hints) in [
            (
                ConfigError::AcquireTimeoutTooLong {
                    timeout: days(40),
                    max: days(30),
                },
                "--wait",
                "a bare number is seconds",
            ),
            (
                ConfigError::KeyPrefixTooLong { len: 300, max: 256 },
                "--key-prefix is 300 bytes",
                "shorten the key prefix",
            ),
            (
                ConfigError::ZeroConnectTimeout,
                "--connect-timeout must be greater than zero",
                "connection",
            ),
            (
                ConfigError::NodeTimeoutTooLong {
                    node_timeout: ms(50),
                    ttl: ms(100),
                    max: ms(10),
                },
                "--node-timeout 50ms is more than a tenth of --ttl 100ms",
                "raise --ttl to at least 500ms",
            ),
            (
                ConfigError::TtlTooLong {
                    ttl: days(31),
                    max: days(30),
                },
                "--ttl",
                "keep --ttl short",
            ),
            (ConfigError::ZeroTtl, "--ttl must be", "--ttl 30s"),
        ] {
            let explained = explained(error, &typed);
            assert!(explained.message.contains(names), "{explained}");
            let hint = explained.hint.clone().unwrap_or_default();
            assert!(hint.contains(hints), "{explained}");
            // The hint every error had, whatever its cause.
            assert!(!hint.contains("may be at most a tenth"), "{explained}");
        }
    }

    #[test]
    fn a_default_or_a_variable_is_named_as_such() {
        let mut from_env = global(&[]);
        from_env.from_env.connect_timeout = true;
        from_env.from_env.key_prefix = true;
        let timeout = explained(ConfigError::ZeroConnectTimeout, &from_env);
        assert!(
            timeout.message.contains("QUORUMLOCK_CONNECT_TIMEOUT"),
            "{timeout}"
        );
        let prefix = explained(
            ConfigError::KeyPrefixTooLong { len: 300, max: 256 },
            &from_env,
        );
        assert!(prefix.message.contains("QUORUMLOCK_KEY_PREFIX"), "{prefix}");
        let defaulted = lock_error(
            &LockError::Config(ConfigError::NodeTimeoutTooLong {
                node_timeout: Duration::from_millis(50),
                ttl: Duration::from_millis(100),
                max: Duration::from_millis(10),
            }),
            &from_env,
        );
        assert!(defaulted.message.contains("(the default"), "{defaulted}");
    }

    #[test]
    fn a_wait_that_ran_out_says_so_and_suggests_a_longer_one() {
        let held = LockError::Held {
            resource: "job".into(),
            tally: Default::default(),
        };
        let explained = after_wait(&held, Duration::from_secs(1), CliError::from_lock(&held));
        assert!(
            explained.message.starts_with("gave up after waiting 1s: "),
            "{explained}"
        );
        let hint = explained.hint.unwrap_or_default();
        assert!(
            hint.contains("longer than -w 1s") && !hint.contains("pass --wait"),
            "{hint}"
        );
        assert_eq!(explained.kind, Kind::Held);
    }

    #[test]
    fn node_refusals_name_the_options_and_hint_at_their_cause() {
        let volatile = lock_error(
            &LockError::InvalidNode {
                node: "redis://h:1".into(),
                reason: "keeps no append-only file (aof_enabled:0), ...; run it with \
                         `appendonly yes`, or opt out with Nodes::fencing_on_volatile_nodes"
                    .into(),
            },
            &global(&[]),
        );
        let text = volatile.to_string();
        assert!(
            text.contains("opt out with --fencing-on-volatile-nodes"),
            "{text}"
        );
        assert!(
            !text.contains("Nodes::") && !text.contains("fix the node list"),
            "{text}"
        );
        let mut from_env = global(&[]);
        from_env.from_env.nodes = true;
        let twice = lock_error(
            &LockError::InvalidNode {
                node: "redis://h:1".into(),
                reason: "listed twice".into(),
            },
            &from_env,
        );
        assert!(
            twice
                .to_string()
                .contains("fix the node list (QUORUMLOCK_NODES)"),
            "{twice}"
        );
    }
}
