//! Node URLs as typed: one `--nodes` entry checked by the library's parser, its password
//! masked whenever it is echoed back.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use quorumlock::{LockError, NodeAddress};

use crate::terms;

/// The `--nodes` parser for clap: [`parse_node`], with errors that do not echo the raw
/// value as clap's own do (it could hold a password).
#[derive(Debug, Clone, Copy)]
pub struct NodeParser;

impl TypedValueParser for NodeParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        let option = arg.map_or("--nodes".to_owned(), |arg| arg.to_string());
        let fail = |message: String| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid value for {option}: {message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| fail("a node URL is not valid UTF-8".to_owned()))?;
        parse_node(text).map_err(fail)
    }
}

/// Parses one entry of `--nodes` (clap splits the list at commas): a trimmed URL that
/// the library reads as a node address ([`NodeAddress::parse`]), or an empty string for
/// an empty entry (`a,,b` or a trailing comma), which is skipped. The error is the
/// library's: it echoes the entry, its password masked, and says what is wrong.
pub fn parse_node(text: &str) -> Result<String, String> {
    let entry = text.trim();
    if entry.is_empty() {
        return Ok(String::new());
    }
    let reason = match NodeAddress::parse(entry) {
        Ok(_) => return Ok(entry.to_owned()),
        Err(LockError::InvalidNode { node, reason }) => format!("`{node}` is {reason}"),
        Err(other) => other.to_string(),
    };
    let reason = terms::in_cli_terms(&reason);
    // A list written with spaces (`redis://a:6379 10.0.0.2:6379`), or with another
    // separator between its URLs, reads as one entry, whatever the library then finds
    // wrong with it (a space, an invalid port).
    let several = entry.contains(char::is_whitespace) || entry.matches("://").count() > 1;
    if several && !reason.contains("comma") {
        return Err(format!(
            "{reason}; to list several nodes, separate them with commas \
             (redis://10.0.0.1:6379,redis://10.0.0.2:6379)"
        ));
    }
    Err(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock::backend::mask_password;

    #[test]
    fn cluster_and_sentinel_urls_are_members() {
        let cluster = "redis+cluster://:pw@10.0.0.1:7001;10.0.0.2:7001";
        assert_eq!(parse_node(cluster).unwrap(), cluster);
        let sentinel = "redis+sentinel://10.0.0.1:26379;10.0.0.2:26379/orders";
        assert_eq!(parse_node(sentinel).unwrap(), sentinel);
        let err = parse_node("redis+sentinel://:secret@10.0.0.1:26379").unwrap_err();
        assert!(err.contains("service") && !err.contains("secret"), "{err}");
        assert!(parse_node("redis+cluster://:secret@h:1/2")
            .unwrap_err()
            .contains("***"));
    }

    #[test]
    fn a_list_with_spaces_is_told_to_use_commas() {
        for list in [
            "redis://10.0.0.1:6379 10.0.0.2:6379",
            "redis://10.0.0.1:6379 redis://10.0.0.2:6379",
            "redis://a:1%20redis://b:2 ",
        ] {
            let err = parse_node(list).unwrap_err();
            assert!(err.contains("comma"), "{list}: {err}");
        }
        // A cluster's seeds are separated by semicolons on the command line, where commas
        // separate the nodes.
        let err = parse_node("redis://a:1;b:2").unwrap_err();
        assert!(err.contains("redis+cluster://host:port;host:port"), "{err}");
    }

    #[test]
    fn bad_nodes_are_echoed_with_only_the_password_masked() {
        let err = parse_node("localhost:6379").unwrap_err();
        assert!(err.contains("`localhost:6379`"), "{err}");
        assert!(err.contains("missing `redis://`"), "{err}");
        let err = parse_node(":hunter2@localhost:6379").unwrap_err();
        assert!(
            !err.contains("hunter2") && err.contains("localhost:6379"),
            "{err}"
        );
        let err = parse_node("redis://:hunter2@host:notaport").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("redis://:***@host:notaport"), "{err}");
        assert_eq!(
            mask_password("rediss://user:pw@host:6380/0?password=x&db=1"),
            "rediss://user:***@host:6380/0?password=***&db=1"
        );
        assert_eq!(mask_password("redis://host:1"), "redis://host:1");
    }
}
