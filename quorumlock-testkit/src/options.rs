//! What a test node runs with: [`NodeOptions`] (persistence, password, TLS), the same
//! for both backends, and the URL a client reaches it at.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::tls::TestCertificates;

/// Durability of a node's data across a kill and restart.
///
/// The default is [`AppendFsyncAlways`](Self::AppendFsyncAlways): what a lock node should
/// run with, and what a lock trusts right after the node starts (a lock's restart
/// abstention keeps a server without it out of the quorum for the longest lease after it
/// starts). The process backend keeps its nodes' directories on `/dev/shm` where there is
/// one, so that fsyncing every write costs tests next to nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// No RDB snapshots, no AOF (`--save "" --appendonly no`): a restarted node
    /// comes back empty.
    None,
    /// AOF with `appendfsync always`: every acknowledged write survives a
    /// `SIGKILL` and is reloaded on restart.
    #[default]
    AppendFsyncAlways,
}

/// Options applied to every node of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOptions {
    /// Data durability across restarts.
    pub persistence: Persistence,
    /// When set, nodes run with `--requirepass` and their URLs carry the
    /// password (`redis://:PASSWORD@127.0.0.1:PORT`).
    pub password: Option<String>,
    /// When set, nodes also listen for TLS on a port of their own
    /// ([`RedisProcess::tls_url`](crate::RedisProcess::tls_url)); the plain port stays for
    /// the harness's own connections (readiness, helpers). Process backend only.
    pub tls: Option<NodeTls>,
    /// When set, nodes run cluster-enabled (`--cluster-enabled yes`), ready to be joined
    /// into a Redis Cluster by [`ShardedCluster`](crate::ShardedCluster), on ports whose
    /// cluster bus port (the port + 10000) is free too.
    pub cluster_enabled: bool,
    /// When set, nodes run under libfaketime with this clock (a libfaketime spec: `+0`,
    /// `+0 x3` for three times the rate, `+3600` an hour ahead), which
    /// [`RedisProcess::set_clock`](crate::RedisProcess::set_clock) changes while they run.
    /// Process backend only; needs Debian's `faketime` and a C compiler (see
    /// `fake_clock`).
    pub fake_clock: Option<String>,
}

/// The TLS settings of a test node (`--tls-port`, `--tls-cert-file`, `--tls-key-file`,
/// `--tls-ca-cert-file`, `--tls-auth-clients`); needs a `redis-server` built with TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTls {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA that client certificates must chain to (PEM).
    pub ca: PathBuf,
    /// Whether clients must present a certificate (mutual TLS).
    pub auth_clients: bool,
}

impl NodeTls {
    /// The server side of `certs`: its server certificate and CA, with client
    /// certificates required if `auth_clients`.
    pub fn from_certificates(certs: &TestCertificates, auth_clients: bool) -> Self {
        NodeTls {
            cert: certs.server_cert(),
            key: certs.server_key(),
            ca: certs.ca_cert(),
            auth_clients,
        }
    }

    /// The `redis-server` arguments that open the TLS port `port` with these files.
    pub(crate) fn server_args(&self, port: u16) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--tls-port".into(), port.to_string().into()];
        args.extend(["--tls-cert-file".into(), self.cert.clone().into()]);
        args.extend(["--tls-key-file".into(), self.key.clone().into()]);
        args.extend(["--tls-ca-cert-file".into(), self.ca.clone().into()]);
        args.extend([
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]);
        args
    }
}

impl NodeOptions {
    /// Returns these options with `persistence` set.
    pub fn with_persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Returns these options with TLS set (see [`NodeOptions::tls`]).
    pub fn with_tls(mut self, tls: NodeTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Returns these options with the nodes' clocks under the test's control, starting at
    /// `spec` (see [`NodeOptions::fake_clock`]).
    pub fn with_fake_clock(mut self, spec: impl Into<String>) -> Self {
        self.fake_clock = Some(spec.into());
        self
    }

    /// Returns these options with a password set.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The `redis-server` arguments for persistence and authentication, shared
    /// by the process and container backends.
    pub(crate) fn server_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["--save".into(), String::new()];
        match self.persistence {
            Persistence::None => args.extend(["--appendonly".into(), "no".into()]),
            Persistence::AppendFsyncAlways => args.extend([
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
            ]),
        }
        if let Some(password) = &self.password {
            args.extend(["--requirepass".into(), password.clone()]);
            if self.cluster_enabled {
                // Replicas authenticate to their master with the same password.
                args.extend(["--masterauth".into(), password.clone()]);
            }
        }
        if self.cluster_enabled {
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    // Fast failure detection, so that failover tests take seconds.
                    "--cluster-node-timeout",
                    "1000",
                    // A lost master fails its own slots only, not the whole cluster.
                    "--cluster-require-full-coverage",
                    "no",
                ]
                .map(String::from),
            );
        }
        args
    }

    /// `redis://[:PASSWORD@]HOST:PORT`, with the password percent-encoded so
    /// any character survives URL parsing.
    pub(crate) fn url(&self, host: &str, port: u16) -> String {
        match &self.password {
            Some(password) => format!("redis://:{}@{host}:{port}", percent_encode(password)),
            None => format!("redis://{host}:{port}"),
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_passwords() {
        let options = NodeOptions::default().with_password("p@ss:w/rd");
        assert_eq!(
            options.url("127.0.0.1", 7000),
            "redis://:p%40ss%3Aw%2Frd@127.0.0.1:7000"
        );
        assert_eq!(
            NodeOptions::default().url("127.0.0.1", 7000),
            "redis://127.0.0.1:7000"
        );
    }

    #[test]
    fn server_args_follow_options() {
        let args = NodeOptions::default()
            .with_persistence(Persistence::AppendFsyncAlways)
            .with_password("pw")
            .server_args();
        assert_eq!(
            args,
            [
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--requirepass",
                "pw"
            ]
        );
    }
}
