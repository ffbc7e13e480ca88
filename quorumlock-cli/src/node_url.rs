//! Node URLs as typed: one `--nodes` entry parsed and checked, and a URL's password
//! masked whenever one is echoed back.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

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
/// the Redis client accepts, or an empty string for an empty entry (`a,,b` or a trailing
/// comma), which is skipped. The error echoes the entry, its password masked.
pub fn parse_node(text: &str) -> Result<String, String> {
    let entry = text.trim();
    if entry.is_empty() {
        return Ok(String::new());
    }
    let shown = mask_password(entry);
    // A cluster or Sentinel URL lists several hosts, which no URL parser takes: the
    // library reads it.
    let member = quorumlock::backend::cluster_seeds(entry)
        .map(|seeds| seeds.map(drop))
        .or_else(|| quorumlock::backend::sentinel_client(entry).map(|client| client.map(drop)));
    if let Some(member) = member {
        return member.map(|()| entry.to_owned()).map_err(|error| {
            let reason = match error {
                quorumlock::LockError::InvalidNode { reason, .. } => reason,
                other => other.to_string(),
            };
            format!(
                "`{}` is not a valid node URL: {reason}",
                mask_unparsed(entry)
            )
        });
    }
    if !entry.contains("://") {
        return Err(format!(
            "`{shown}` is not a node URL: missing `redis://` (write redis://{shown}, \
             rediss:// for TLS, redis+unix:///path/to/socket, redis+cluster://host:port;... \
             for a Redis Cluster, or redis+sentinel://host:port;.../<master name>)"
        ));
    }
    // The url crate says what is wrong (`invalid port number`); the Redis client only that
    // something is.
    let reason = match url::Url::parse(entry) {
        Err(error) => Some(error.to_string()),
        Ok(_) => redis::Client::open(entry)
            .err()
            .map(|error| match error.detail() {
                Some(detail) => format!("{} ({detail})", error.category()),
                None => error.category().to_owned(),
            }),
    };
    match reason {
        None => Ok(entry.to_owned()),
        Some(reason) => Err(format!("`{shown}` is not a valid node URL: {reason}")),
    }
}

/// `url` with its password (in the user part, or a `password` query parameter) replaced
/// by `***`, and nothing else changed, so that a message can echo what was typed.
pub fn mask_password(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        return mask_unparsed(text);
    };
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    let masked_query: Option<Vec<(String, String)>> = url.query().map(|_| {
        url.query_pairs()
            .map(|(key, value)| {
                let value = if key.eq_ignore_ascii_case("password") {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (key.into_owned(), value)
            })
            .collect()
    });
    if let Some(pairs) = masked_query {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// `text`, which does not parse as a URL, with whatever stands between the first `:` of
/// its user part and the last `@` of its authority replaced by `***`.
fn mask_unparsed(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}{name}:***@{host}{path}"),
            None => text.to_owned(),
        },
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
