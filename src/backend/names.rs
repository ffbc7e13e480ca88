//! A node's name, for logs and errors: its URL, or its client's address, without
//! credentials. [`LockNode::name`](crate::node::LockNode::name) must never hold a
//! password, and every error that names a node names it so. And a URL as typed, its
//! password masked, for the errors that echo it.

/// A URL with any user name, password and query removed, fit for logs and errors.
///
/// ```
/// # use quorumlock::backend::redact_url;
/// assert_eq!(redact_url("redis://:s3cret@10.0.0.1:6379/2"), "redis://10.0.0.1:6379/2");
/// assert_eq!(redact_url("rediss://user:pw@host:6380?password=x"), "rediss://host:6380");
/// assert_eq!(redact_url("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
/// ```
pub fn redact_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = without_query.split_once("://") else {
        // Not a URL we understand: show only what cannot be a credential.
        return "<unparseable node address>".to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

/// A node's name for a client's address, as a URL without credentials:
/// `redis://host:port[/db]`, `rediss://host:port[/db]` (TLS) or `redis+unix:///path`.
pub fn client_name(info: &redis::ConnectionInfo) -> String {
    use redis::ConnectionAddr;
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{}:{port}{db}", bracketed(host)),
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{}:{port}{db}", bracketed(host))
        }
        ConnectionAddr::Unix(path) => format!("redis+unix://{}{db}", path.display()),
        other => format!("{other}"),
    }
}

/// `text` (a URL as typed) with its password, in the user part or a `password` query
/// parameter, replaced by `***`, and nothing else changed, so that a message can echo what
/// was typed.
///
/// ```
/// # use quorumlock::backend::mask_password;
/// assert_eq!(
///     mask_password("rediss://user:pw@host:6380/0?password=x&db=1"),
///     "rediss://user:***@host:6380/0?password=***&db=1"
/// );
/// assert_eq!(mask_password("redis+cluster://:pw@a:1,b:2"), "redis+cluster://:***@a:1,b:2");
/// ```
pub fn mask_password(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        return mask_unparsed(text);
    };
    let password_query = url
        .query_pairs()
        .any(|(key, _)| key.eq_ignore_ascii_case("password"));
    if url.password().is_none() && !password_query {
        // Nothing to mask: the text as typed, not as the URL parser would write it.
        return text.to_owned();
    }
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

/// An IPv6 address in brackets, as URLs write it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redaction_removes_every_credential() {
        for (url, expected) in [
            ("redis://127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://:pw@127.0.0.1:7001", "redis://127.0.0.1:7001"),
            ("redis://user:p@ss@host:1/0", "redis://host:1/0"),
            ("redis://host:1/0?password=pw", "redis://host:1/0"),
            (
                "redis+unix:///tmp/redis.sock",
                "redis+unix:///tmp/redis.sock",
            ),
            ("no-scheme:pw@host", "<unparseable node address>"),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }
}
