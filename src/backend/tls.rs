//! [`TlsOptions`]: how `rediss://` nodes are verified, and how this client proves who it is.
//!
//! Without options, a `rediss://` node must present a certificate that chains to a public
//! (webpki) root and names the host of its URL. A private CA, a client certificate for
//! servers that require one (`tls-auth-clients yes`), or (for development only) no
//! verification at all are set here, and the options then build each node's
//! [`redis::Client`]:
//!
//! ```no_run
//! use quorumlock::{LockConfig, Nodes, Redlock, TlsOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let tls = TlsOptions::new()
//!     .ca_file("/etc/redis/tls/ca.crt")?
//!     .client_identity_files("/etc/redis/tls/client.crt", "/etc/redis/tls/client.key")?;
//! let urls = ["rediss://a:6380", "rediss://b:6380", "rediss://c:6380"];
//! let lock = Redlock::connect(Nodes::new(urls)?.tls(tls), LockConfig::default()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The TLS handshake is part of each connection attempt, so it is bounded by
//! [`Nodes::connect_timeout`](crate::Nodes::connect_timeout), not by the per-node request
//! timeout.

use std::fmt;
use std::path::Path;

use redis::{ClientTlsConfig, ConnectionAddr, TlsCertificates};

/// How `rediss://` nodes are verified and how the client authenticates to them.
///
/// The default verifies servers against the public webpki roots and presents no client
/// certificate. Certificates and keys are PEM. `Debug` never prints key material.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    insecure: bool,
}

impl TlsOptions {
    /// Verification against the public webpki roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificates of `pem` (one or more PEM certificates), instead of the
    /// public roots: for servers with certificates from a private CA.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(pem.into());
        self
    }

    /// [`ca_pem`](Self::ca_pem) with the contents of the file at `path`. Fails, before
    /// any connection, when the file cannot be read or holds no PEM certificate (a key, a
    /// DER file, an empty file): every verification would fail later, with a handshake
    /// error that does not name the file.
    pub fn ca_file(self, path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref();
        let pem = read(path)?;
        if certificates_in(&pem) == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "no certificate in {}: a CA file holds PEM certificates \
                     (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ),
            ));
        }
        Ok(self.ca_pem(pem))
    }

    /// Presents the client certificate `cert` (PEM, its chain may follow) with its private
    /// key `key` (PEM: PKCS#8, PKCS#1 or SEC1), for servers that require client
    /// certificates (mutual TLS, `tls-auth-clients yes`).
    pub fn client_identity_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// [`client_identity_pem`](Self::client_identity_pem) with the contents of two files.
    pub fn client_identity_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> std::io::Result<Self> {
        let cert = read(cert.as_ref())?;
        let key = read(key.as_ref())?;
        Ok(self.client_identity_pem(cert, key))
    }

    /// Skips verifying the server's certificate and host name (`true`). **For development
    /// only**: anybody on the network path can then impersonate the nodes. The traffic is
    /// still encrypted, and a client certificate is still presented.
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }

    /// Whether any option differs from the default (public roots, no client certificate,
    /// verification on).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The client for `info` with these options; see [`client`](Self::client).
    pub fn client_for(&self, info: redis::ConnectionInfo) -> Result<redis::Client, String> {
        let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        if !is_tls {
            if self.is_default() {
                return redis::Client::open(info).map_err(|err| err.to_string());
            }
            return Err("TLS options were given for a plain redis:// node; \
                        use rediss:// for TLS"
                .to_owned());
        }
        install_crypto_provider();
        let info = if self.insecure {
            let ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() else {
                unreachable!("checked above")
            };
            info.set_addr(ConnectionAddr::TcpTls {
                host,
                port,
                insecure: true,
                tls_params: None,
            })
        } else {
            info
        };
        if self.ca.is_none() && self.identity.is_none() {
            return redis::Client::open(info).map_err(|err| err.to_string());
        }
        let certificates = TlsCertificates {
            client_tls: self.identity.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        };
        redis::Client::build_with_tls(info, certificates)
            .map_err(|err| format!("TLS certificates not usable: {err}"))
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "<set>"))
            .field("client_identity", &self.identity.as_ref().map(|_| "<set>"))
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// How many PEM certificates `pem` holds.
fn certificates_in(pem: &[u8]) -> usize {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .filter(Result::is_ok)
        .count()
}

fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(path).map_err(|err| {
        std::io::Error::new(err.kind(), format!("cannot read {}: {err}", path.display()))
    })
}

/// Installs rustls's process-level crypto provider (ring), once, unless the application
/// installed one already. rustls panics on the first TLS connection without one ("Could
/// not automatically determine the process-level CryptoProvider").
pub(crate) fn install_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Another thread may win the race; its provider serves as well as ours.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_for_a_plain_url_are_refused_and_defaults_pass() {
        assert!(TlsOptions::new().client("redis://127.0.0.1:1").is_ok());
        let err = TlsOptions::new()
            .insecure(true)
            .client("redis://:pw@127.0.0.1:1")
            .unwrap_err();
        assert!(err.to_string().contains("rediss://"), "{err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("quorumlock-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = TlsOptions::new().ca_file(&empty).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("no certificate in"), "{err}");
        assert!(err.to_string().contains("empty.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn debug_prints_no_key_material() {
        let tls = TlsOptions::new().client_identity_pem("CERT", "SECRET-KEY");
        let text = format!("{tls:?}");
        assert!(!text.contains("SECRET-KEY"), "{text}");
    }

    #[test]
    fn the_provider_is_installed_once_and_tolerates_one_already_there() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
