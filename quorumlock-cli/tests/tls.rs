//! The CLI on real TLS servers (Debian's redis-server is built with TLS), with
//! certificates generated per test: the TLS flags and their environment variables, mutual
//! TLS, `--tls-insecure`, a refused private CA, and the operator commands on `rediss://`
//! without any option.

mod cli_support;

use quorumlock_testkit::{NodeOptions, NodeTls, RedisCluster, TestCertificates};
use tokio::process::Command;

use cli_support::{bare, output};

async fn tls_cluster(nodes: usize, certs: &TestCertificates, auth_clients: bool) -> RedisCluster {
    let options = NodeOptions::default().with_tls(NodeTls::from_certificates(certs, auth_clients));
    RedisCluster::start_with(nodes, options)
        .await
        .expect("start TLS redis-server nodes (a redis-server built with TLS)")
}

#[tokio::test]
async fn the_cli_takes_the_tls_flags_and_environment() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(3, &certs, true).await;
    let nodes = cluster.tls_urls().join(",");
    let base = || {
        let mut command = bare();
        command.env("QUORUMLOCK_NODES", &nodes).args([
            "--connect-timeout",
            "5s",
            "--node-timeout",
            "250ms",
        ]);
        command
    };
    // Flags.
    let run = base()
        .args(["--tls-ca"])
        .arg(certs.ca_cert())
        .arg("--tls-cert")
        .arg(certs.client_cert())
        .arg("--tls-key")
        .arg(certs.client_key())
        .args(["run", "-r", "cli-tls", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // Environment, and the operator commands.
    let with_env = |command: &mut Command| {
        command
            .env("QUORUMLOCK_TLS_CA", certs.ca_cert())
            .env("QUORUMLOCK_TLS_CERT", certs.client_cert())
            .env("QUORUMLOCK_TLS_KEY", certs.client_key());
    };
    let mut status = base();
    with_env(&mut status);
    let status = status.args(["status", "cli-tls"]).output().await.unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(String::from_utf8_lossy(&status.stdout).contains("free"));
    let mut release = base();
    with_env(&mut release);
    let release = release
        .args(["release", "cli-tls", "--token", "nobody"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&release.stderr);
    assert!(!text.contains("failed"), "{text}");
    // Insecure skips verification of the server but still presents the client certificate.
    let run = base()
        .env("QUORUMLOCK_TLS_INSECURE", "1")
        .arg("--tls-cert")
        .arg(certs.client_cert())
        .arg("--tls-key")
        .arg(certs.client_key())
        .args(["run", "-r", "cli-tls", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // No CA: the private CA is refused, and the message names a node.
    let run = base()
        .args(["run", "-r", "cli-tls", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_ne!(run.status.code(), Some(0));
    let text = String::from_utf8_lossy(&run.stderr);
    assert!(text.contains("rediss://127.0.0.1:"), "{text}");
}

/// `status` and `release` make their own connections, which need the crypto provider as
/// much as the lock's: a `rediss://` URL with no TLS option at all (`#insecure`).
#[tokio::test]
async fn the_cli_operator_commands_take_rediss_without_options() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(1, &certs, false).await;
    let url = format!("{}/#insecure", cluster.node(0).tls_url().unwrap());
    for args in [
        &["status", "plain"][..],
        &["release", "plain", "--token", "x"][..],
    ] {
        let output = output(bare().env("QUORUMLOCK_NODES", &url).args(args)).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("failed"), "{args:?}: {stderr}");
        // status: free (0); release of a token that holds nothing: not held (exit 3 or
        // whatever the CLI gives), but every node answered.
        if args[0] == "status" {
            assert_eq!(output.status.code(), Some(0), "{stderr}");
        }
    }
}
