//! Certificates for TLS test nodes, made with the `openssl` command-line tool.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::error::TestkitError;

/// A throwaway CA with a server certificate (for `127.0.0.1` and `localhost`) and a client
/// certificate, all signed by it, as PEM files in a temporary directory removed on drop.
///
/// Made with the `openssl` command-line tool (ECDSA P-256 keys, valid for one day).
#[derive(Debug)]
pub struct TestCertificates {
    dir: TempDir,
}

impl TestCertificates {
    /// Generates a new CA and the server and client certificates it signs.
    pub fn generate() -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-tls-")
            .tempdir()?;
        let certs = TestCertificates { dir };
        let path = |name: &str| certs.dir.path().join(name);
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=quorumlock test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &path("ca.key").to_string_lossy(),
            "-out",
            &path("ca.crt").to_string_lossy(),
        ])?;
        certs.leaf("server", "serverAuth,clientAuth")?;
        certs.leaf("client", "clientAuth")?;
        Ok(certs)
    }

    /// Makes `NAME.key` and `NAME.crt`, signed by the CA.
    fn leaf(&self, name: &str, usage: &str) -> Result<(), TestkitError> {
        let path = |file: String| self.dir.path().join(file).to_string_lossy().into_owned();
        let ext = path(format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                 extendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
            ),
        )?;
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN=quorumlock test {name}"),
            "-keyout",
            &path(format!("{name}.key")),
            "-out",
            &path(format!("{name}.csr")),
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-days",
            "1",
            "-in",
            &path(format!("{name}.csr")),
            "-CA",
            &path("ca.crt".into()),
            "-CAkey",
            &path("ca.key".into()),
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &path(format!("{name}.crt")),
        ])
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The server certificate (for `127.0.0.1` and `localhost`).
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.crt")
    }

    /// The server certificate's private key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// The client certificate.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.crt")
    }

    /// The client certificate's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }
}

fn openssl(args: &[&str]) -> Result<(), TestkitError> {
    let output = match Command::new("openssl").args(args).output() {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(TestkitError::ToolNotFound {
                tool: "openssl",
                package: "openssl",
            })
        }
        Err(error) => return Err(error.into()),
    };
    if output.status.success() {
        Ok(())
    } else {
        Err(TestkitError::Io(std::io::Error::other(format!(
            "openssl {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        ))))
    }
}
