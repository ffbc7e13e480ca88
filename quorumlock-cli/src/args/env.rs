//! The settings the environment may give (`QUORUMLOCK_NODES` and the others of
//! [`VARIABLES`]): each is read only when its option is not on the command line, parsed by
//! the option's own parser, and a value that does not parse is a usage error that names
//! the variable.
//!
//! They are read here rather than by clap's `env`, which counts a value from the
//! environment as typed: a usage error's `Usage:` line then listed `--nodes` as if it were
//! required, a malformed `QUORUMLOCK_NODES` was reported as `--nodes`, and the help showed
//! `[env: QUORUMLOCK_TLS_CA=]` (the variable's current value, empty) for each one unset.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::duration::parse_duration;
use crate::exit::{CliError, Kind};
use crate::node_url::parse_node;

use super::GlobalArgs;

/// `--nodes`.
pub const NODES: &str = "QUORUMLOCK_NODES";
/// `--key-prefix`.
pub const KEY_PREFIX: &str = "QUORUMLOCK_KEY_PREFIX";
/// `--connect-timeout`.
pub const CONNECT_TIMEOUT: &str = "QUORUMLOCK_CONNECT_TIMEOUT";
/// `--tls-ca`.
pub const TLS_CA: &str = "QUORUMLOCK_TLS_CA";
/// `--tls-cert`.
pub const TLS_CERT: &str = "QUORUMLOCK_TLS_CERT";
/// `--tls-key`.
pub const TLS_KEY: &str = "QUORUMLOCK_TLS_KEY";
/// `--tls-insecure`.
pub const TLS_INSECURE: &str = "QUORUMLOCK_TLS_INSECURE";

/// Every variable read, with the option it stands for: the list the help and the tests
/// share.
pub const VARIABLES: [(&str, &str); 7] = [
    (NODES, "--nodes"),
    (KEY_PREFIX, "--key-prefix"),
    (CONNECT_TIMEOUT, "--connect-timeout"),
    (TLS_CA, "--tls-ca"),
    (TLS_CERT, "--tls-cert"),
    (TLS_KEY, "--tls-key"),
    (TLS_INSECURE, "--tls-insecure"),
];

/// Which settings came from the environment rather than the command line, so that an
/// error about one names what the user set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FromEnv {
    /// The nodes came from `QUORUMLOCK_NODES`.
    pub nodes: bool,
    /// The key prefix came from `QUORUMLOCK_KEY_PREFIX`.
    pub key_prefix: bool,
    /// The connect timeout came from `QUORUMLOCK_CONNECT_TIMEOUT`.
    pub connect_timeout: bool,
    /// The CA file came from `QUORUMLOCK_TLS_CA`.
    pub tls_ca: bool,
    /// The client certificate came from `QUORUMLOCK_TLS_CERT`.
    pub tls_cert: bool,
    /// The client key came from `QUORUMLOCK_TLS_KEY`.
    pub tls_key: bool,
}

impl FromEnv {
    /// How the nodes were given: `--nodes` or `QUORUMLOCK_NODES`.
    pub fn nodes(&self) -> &'static str {
        pick(self.nodes, NODES)
    }

    /// How the key prefix was given.
    pub fn key_prefix(&self) -> &'static str {
        pick(self.key_prefix, KEY_PREFIX)
    }

    /// How the connect timeout was given.
    pub fn connect_timeout(&self) -> &'static str {
        pick(self.connect_timeout, CONNECT_TIMEOUT)
    }

    /// How the CA file was given.
    pub fn tls_ca(&self) -> &'static str {
        pick(self.tls_ca, TLS_CA)
    }

    /// How the client certificate was given.
    pub fn tls_cert(&self) -> &'static str {
        pick(self.tls_cert, TLS_CERT)
    }

    /// How the client key was given.
    pub fn tls_key(&self) -> &'static str {
        pick(self.tls_key, TLS_KEY)
    }
}

/// `variable` when the setting came from it, else its option.
fn pick(from_env: bool, variable: &'static str) -> &'static str {
    if from_env {
        variable
    } else {
        option_of(variable)
    }
}

/// The option that `variable` stands for.
fn option_of(variable: &str) -> &'static str {
    VARIABLES
        .iter()
        .find(|(name, _)| *name == variable)
        .map_or("", |(_, option)| option)
}

/// Fills the settings of `global` that the command line left out from the variables
/// `var` returns (the process environment, in `main`); an empty variable counts as unset.
/// Then checks what clap could not, seeing only the command line: a client certificate
/// needs its key, and the key its certificate.
pub fn apply(
    global: &mut GlobalArgs,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<(), CliError> {
    let read = |name: &'static str| -> Result<Option<String>, CliError> {
        match var(name) {
            None => Ok(None),
            Some(value) => match value.into_string() {
                Ok(text) if text.trim().is_empty() => Ok(None),
                Ok(text) => Ok(Some(text)),
                Err(_) => Err(invalid(name, "the value is not valid UTF-8".to_owned())),
            },
        }
    };
    if global.nodes.is_empty() {
        if let Some(list) = read(NODES)? {
            global.nodes = list
                .split(',')
                .map(parse_node)
                .collect::<Result<_, _>>()
                .map_err(|message| invalid(NODES, message))?;
            global.from_env.nodes = true;
        }
    }
    if global.key_prefix.is_none() {
        global.key_prefix = read(KEY_PREFIX)?;
        global.from_env.key_prefix = global.key_prefix.is_some();
    }
    if global.connect_timeout.is_none() {
        if let Some(text) = read(CONNECT_TIMEOUT)? {
            let timeout =
                parse_duration(&text).map_err(|message| invalid(CONNECT_TIMEOUT, message))?;
            global.connect_timeout = Some(timeout);
            global.from_env.connect_timeout = true;
        }
    }
    let tls = &mut global.tls;
    let from_env = &mut global.from_env;
    for (field, name, flag) in [
        (&mut tls.tls_ca, TLS_CA, &mut from_env.tls_ca),
        (&mut tls.tls_cert, TLS_CERT, &mut from_env.tls_cert),
        (&mut tls.tls_key, TLS_KEY, &mut from_env.tls_key),
    ] {
        if field.is_none() {
            *field = read(name)?.map(PathBuf::from);
            *flag = field.is_some();
        }
    }
    if !tls.tls_insecure {
        if let Some(text) = read(TLS_INSECURE)? {
            tls.tls_insecure =
                parse_boolish(&text).map_err(|message| invalid(TLS_INSECURE, message))?;
        }
    }
    match (&tls.tls_cert, &tls.tls_key) {
        (Some(_), None) => Err(CliError::new(
            Kind::Usage,
            format!("{} is given without --tls-key", from_env.tls_cert()),
        )
        .hint("a client certificate needs its private key: pass --tls-key FILE (or set QUORUMLOCK_TLS_KEY)")),
        (None, Some(_)) => Err(CliError::new(
            Kind::Usage,
            format!("{} is given without --tls-cert", from_env.tls_key()),
        )
        .hint("a private key needs its client certificate: pass --tls-cert FILE (or set QUORUMLOCK_TLS_CERT)")),
        _ => Ok(()),
    }
}

/// The usage error for a variable whose value does not parse.
fn invalid(name: &str, message: String) -> CliError {
    let option = option_of(name);
    CliError::new(Kind::Usage, format!("invalid value in {name}: {message}")).hint(format!(
        "fix {name}, or unset it; {option} on the command line overrides it"
    ))
}

/// A yes-or-no variable, as clap's boolish values: 1/0, true/false, yes/no, on/off.
fn parse_boolish(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" | "on" => Ok(true),
        "0" | "false" | "no" | "n" | "off" => Ok(false),
        other => Err(format!(
            "{other:?} is not a yes or no: write 1 or 0, true or false, yes or no, on or off"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::args::Cli;

    /// The global options of `words` (after `quorumlock`), with `vars` as the environment.
    fn global(words: &[&str], vars: &[(&str, &str)]) -> Result<GlobalArgs, CliError> {
        let mut cli = Cli::try_parse_from(["quorumlock"].iter().chain(words)).unwrap();
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        apply(&mut cli.global, |name| vars.get(name).map(OsString::from))?;
        Ok(cli.global)
    }

    #[test]
    fn the_command_line_wins_over_the_environment() {
        let vars = [(NODES, "redis://env:1"), (KEY_PREFIX, "env:")];
        let given = global(&["--nodes", "redis://flag:1", "status", "x"], &vars).unwrap();
        assert_eq!(given.nodes, ["redis://flag:1"]);
        assert_eq!(given.from_env.nodes(), "--nodes");
        assert_eq!(given.from_env.key_prefix(), KEY_PREFIX);
        assert_eq!(given.key_prefix.as_deref(), Some("env:"));
        let from_env = global(&["status", "x"], &vars).unwrap();
        assert_eq!(from_env.nodes, ["redis://env:1"]);
        assert_eq!(from_env.from_env.nodes(), NODES);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let err = global(&["status", "x"], &[(NODES, "redis://a:1,localhost:6379")]).unwrap_err();
        assert_eq!(err.code(), 64);
        assert!(
            err.message
                .starts_with("invalid value in QUORUMLOCK_NODES: `localhost:6379`"),
            "{err}"
        );
        assert!(!err.to_string().contains("--nodes <"), "{err}");
        let err = global(&["status", "x"], &[(CONNECT_TIMEOUT, "5")]).unwrap_err();
        assert!(err.message.contains(CONNECT_TIMEOUT), "{err}");
        let err = global(&["status", "x"], &[(TLS_INSECURE, "maybe")]).unwrap_err();
        assert!(err.message.contains(TLS_INSECURE), "{err}");
    }

    #[test]
    fn empty_variables_are_unset() {
        let vars = [(NODES, " "), (CONNECT_TIMEOUT, ""), (TLS_CA, "")];
        let args = global(&["status", "x"], &vars).unwrap();
        assert!(
            args.nodes.is_empty() && args.connect_timeout.is_none() && args.tls.tls_ca.is_none()
        );
        assert_eq!(args.from_env, FromEnv::default());
        let args = global(
            &["status", "x"],
            &[(CONNECT_TIMEOUT, "2s"), (TLS_INSECURE, "on")],
        )
        .unwrap();
        assert_eq!(args.connect_timeout, Some(Duration::from_secs(2)));
        assert!(args.tls.tls_insecure);
    }

    #[test]
    fn a_certificate_and_its_key_come_together_from_either_source() {
        let both = global(
            &["--tls-cert", "c.pem", "status", "x"],
            &[(TLS_KEY, "k.pem")],
        )
        .unwrap();
        assert_eq!(both.tls.tls_key, Some(PathBuf::from("k.pem")));
        let err = global(&["status", "x"], &[(TLS_CERT, "c.pem")]).unwrap_err();
        assert_eq!(err.code(), 64);
        assert!(err.message.starts_with(TLS_CERT), "{err}");
        let err = global(&["--tls-key", "k.pem", "status", "x"], &[]).unwrap_err();
        assert!(err.message.starts_with("--tls-key"), "{err}");
    }
}
