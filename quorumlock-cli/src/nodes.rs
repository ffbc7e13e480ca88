//! The nodes a command talks to, how it connects to them, and the key a name maps to.

use std::time::Duration;

use quorumlock::{LockConfig, LockError, Nodes, TlsOptions};

use crate::args::GlobalArgs;
use crate::exit::{CliError, Kind};
use crate::explain;

/// The node URLs given with `--nodes` or `QUORUMLOCK_NODES`, empty entries left out.
pub fn node_urls(global: &GlobalArgs) -> Result<Vec<String>, CliError> {
    let urls: Vec<String> = global
        .nodes
        .iter()
        .filter(|url| !url.is_empty())
        .cloned()
        .collect();
    if urls.is_empty() {
        return Err(CliError::new(Kind::Config, "no nodes given").hint(
            "pass --nodes redis://host:port,... or set QUORUMLOCK_NODES \
             (comma-separated redis:// URLs; 3 or 5 independent servers)",
        ));
    }
    Ok(urls)
}

/// The Redis key of `resource` under the key prefix, by the library's own rule for the
/// nodes given ([`Nodes::key_for`]: hash-tagged with a Redis Cluster member), for the
/// commands that talk to the nodes directly. Fails on a name that cannot be a lock.
pub fn lock_key(global: &GlobalArgs, resource: &str) -> Result<String, CliError> {
    let mut config = LockConfig::builder();
    if let Some(prefix) = &global.key_prefix {
        config = config.key_prefix(prefix.clone());
    }
    let config = config
        .build()
        .map_err(|error| explain::config_error(&error, global))?;
    let urls: Vec<&String> = global.nodes.iter().filter(|url| !url.is_empty()).collect();
    Nodes::new(urls)
        .and_then(|nodes| nodes.key_for(&config, resource))
        .map_err(|error| explain::lock_error(&error, global))
}

/// The TLS options of `--tls-ca`, `--tls-cert`, `--tls-key` and `--tls-insecure`; an
/// unreadable file is a configuration error (exit 78).
pub fn tls_options(global: &GlobalArgs) -> Result<TlsOptions, CliError> {
    let tls = &global.tls;
    let from_env = &global.from_env;
    // Named as given, the option or its variable; the library's error names the file.
    let unreadable = |option: String, error: std::io::Error| {
        CliError::new(Kind::Config, format!("{option}: {error}"))
    };
    let mut options = TlsOptions::new().insecure(tls.tls_insecure);
    if let Some(ca) = &tls.tls_ca {
        options = options
            .ca_file(ca)
            .map_err(|error| unreadable(from_env.tls_ca().to_owned(), error))?;
    }
    if let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) {
        let given = format!("{} and {}", from_env.tls_cert(), from_env.tls_key());
        options = options
            .client_identity_files(cert, key)
            .map_err(|error| unreadable(given, error))?;
    }
    Ok(options)
}

/// The node set of `urls`, with the TLS options and the `--connect-timeout` of `global`,
/// checked up front so that a malformed URL is a configuration error (exit 78) before any
/// node is asked anything. TLS options a node would ignore (on a plain `redis://` URL, a
/// cluster member) are one too.
pub fn check_urls(global: &GlobalArgs, urls: &[String]) -> Result<Nodes, CliError> {
    let invalid = |error: LockError| explain::lock_error(&error, global);
    let mut nodes = Nodes::new(urls).map_err(invalid)?.tls(tls_options(global)?);
    if let Some(timeout) = global.connect_timeout {
        nodes = nodes.connect_timeout(timeout);
    }
    if let Some(lease) = global.longest_lease {
        nodes = nodes.longest_lease(lease);
    }
    nodes = nodes.restart_abstention(!global.no_restart_abstention);
    nodes.clients().map_err(invalid)?;
    Ok(nodes)
}

/// The per-node budget of the operator commands (`status`, `release`): `--node-timeout`,
/// or 1 s, which covers opening a connection as well as the command.
pub fn operator_timeout(global: &GlobalArgs) -> Duration {
    global.node_timeout.unwrap_or(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_url::parse_node;

    fn global(nodes: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            nodes: nodes
                .map(|list| {
                    list.split(',')
                        .map(|url| parse_node(url).unwrap())
                        .collect()
                })
                .unwrap_or_default(),
            key_prefix: None,
            node_timeout: None,
            connect_timeout: None,
            longest_lease: None,
            no_restart_abstention: false,
            json: false,
            verbose: 0,
            quiet: false,
            tls: Default::default(),
            from_env: Default::default(),
        }
    }

    #[test]
    fn node_lists_are_split_and_trimmed() {
        let urls = node_urls(&global(Some(" redis://a:1, redis://b:2,,redis://c:3 ,"))).unwrap();
        assert_eq!(urls, ["redis://a:1", "redis://b:2", "redis://c:3"]);
    }

    #[test]
    fn no_nodes_is_a_config_error_that_says_what_to_do() {
        for nodes in [None, Some(""), Some(" , ")] {
            let err = node_urls(&global(nodes)).unwrap_err();
            assert_eq!(err.code(), 78);
            let text = err.to_string();
            assert!(text.contains("--nodes") && text.contains("QUORUMLOCK_NODES"));
        }
    }

    #[test]
    fn malformed_urls_are_config_errors_without_passwords() {
        let err = check_urls(
            &global(None),
            &["redis://:hunter2@host:notaport".to_owned()],
        )
        .unwrap_err();
        assert_eq!(err.code(), 78);
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn keys_follow_the_prefix_rule() {
        let mut args = global(None);
        assert_eq!(lock_key(&args, "job").unwrap(), "job");
        args.key_prefix = Some("locks:".to_owned());
        assert_eq!(lock_key(&args, "job").unwrap(), "locks:job");
    }

    #[test]
    fn names_are_checked() {
        let args = global(None);
        assert_eq!(lock_key(&args, "").unwrap_err().code(), 64);
        assert_eq!(lock_key(&args, &"x".repeat(1025)).unwrap_err().code(), 64);
        assert!(lock_key(&args, "job").is_ok());
    }
}
