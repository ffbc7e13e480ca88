//! The CLI on real TLS servers (Debian's redis-server is built with TLS), with
//! certificates generated per test: the TLS flags and their environment variables, mutual
//! TLS, `--tls-insecure`, a refused private CA, and the operator commands on `rediss://`
//! without any option.

use std::ffi::OsString;

use quorumlock_testkit::{NodeOptions, NodeTls, RedisCluster, TestCertificates};

use crate::support::{bare, code, output, stderr, stdout, FOREIGN_TOKEN};

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
    // The client certificate and its key, as flags; and a run under the lock.
    let identity: [OsString; 4] = [
        "--tls-cert".into(),
        certs.client_cert().into(),
        "--tls-key".into(),
        certs.client_key().into(),
    ];
    let run_true = ["run", "-r", "cli-tls", "--", "true"];
    // Flags.
    let run = output(
        base()
            .arg("--tls-ca")
            .arg(certs.ca_cert())
            .args(&identity)
            .args(run_true),
    )
    .await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    // Environment, and the operator commands.
    let with_env = || {
        let mut command = base();
        command
            .env("QUORUMLOCK_TLS_CA", certs.ca_cert())
            .env("QUORUMLOCK_TLS_CERT", certs.client_cert())
            .env("QUORUMLOCK_TLS_KEY", certs.client_key());
        command
    };
    let status = output(with_env().args(["status", "cli-tls"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    assert!(stdout(&status).contains("free"));
    let release = output(with_env().args(["release", "cli-tls", "--token", FOREIGN_TOKEN])).await;
    let text = stderr(&release);
    assert!(!text.contains("failed"), "{text}");
    // Insecure skips verification of the server but still presents the client certificate.
    let run = output(
        base()
            .env("QUORUMLOCK_TLS_INSECURE", "1")
            .args(&identity)
            .args(run_true),
    )
    .await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    // No CA: the private CA is refused, and the message names a node.
    let run = output(base().args(run_true)).await;
    assert_ne!(run.status.code(), Some(0));
    let text = stderr(&run);
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
        &["release", "plain", "--token", FOREIGN_TOKEN][..],
    ] {
        let output = output(bare().env("QUORUMLOCK_NODES", &url).args(args)).await;
        let stderr = stderr(&output);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("failed"), "{args:?}: {stderr}");
        // status: free (0); release of a token that holds nothing: not held (exit 3 or
        // whatever the CLI gives), but every node answered.
        if args[0] == "status" {
            assert_eq!(output.status.code(), Some(0), "{stderr}");
        }
    }
}
