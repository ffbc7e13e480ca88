//! `rediss://` on real TLS servers (Debian's redis-server is built with TLS), with
//! certificates generated per test: out of the box, a private CA, a wrong CA, mutual TLS,
//! a client built by the caller, a quorum of five TLS nodes with one frozen, and the CLI's
//! TLS flags.

mod common;

use std::time::Duration;

use quorumlock::testkit::{NodeOptions, NodeTls, RedisCluster, TestCertificates};
use quorumlock::{redis, DistributedLock, LockConfig, LockError, RedisLock, Redlock, TlsOptions};

/// Room for TLS handshakes on a loaded machine.
fn tls_config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_secs(5))
        .retry_count(0)
        .build()
        .unwrap()
}

async fn tls_cluster(nodes: usize, certs: &TestCertificates, auth_clients: bool) -> RedisCluster {
    let options = NodeOptions::default().with_tls(NodeTls::from_certificates(certs, auth_clients));
    RedisCluster::start_with(nodes, options)
        .await
        .expect("start TLS redis-server nodes (a redis-server built with TLS)")
}

fn trusting(certs: &TestCertificates) -> TlsOptions {
    TlsOptions::new().ca_file(certs.ca_cert()).unwrap()
}

/// Acquires and releases `resource`, retrying a little while the connections come up.
async fn lock_cycle<L: DistributedLock>(lock: &L, resource: &str) {
    let mut last = None;
    for _ in 0..20 {
        match lock.try_acquire(resource).await {
            Ok(guard) => {
                guard.release().await.expect("release over TLS");
                return;
            }
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no lock over TLS: {}", last.unwrap());
}

/// The panic this guards against: rustls without a process-level crypto provider panicked
/// on the first `rediss://` connection ("Could not automatically determine the
/// process-level CryptoProvider"). A `#insecure` URL needs no trusted CA.
#[tokio::test]
async fn rediss_works_out_of_the_box() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(1, &certs, false).await;
    let url = format!("{}/#insecure", cluster.node(0).tls_url().unwrap());
    let lock = RedisLock::connect(&url, tls_config()).await.unwrap();
    assert!(!lock.node_name().contains('#'), "{}", lock.node_name());
    // Without a provider the connection task panicked and the lock never got an answer.
    tokio::time::timeout(Duration::from_secs(20), lock_cycle(&lock, "out-of-the-box"))
        .await
        .expect("a rediss:// lock within 20 s");
}

#[tokio::test]
async fn a_private_ca_is_trusted_when_given() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(3, &certs, false).await;
    let lock = Redlock::connect_tls(cluster.tls_urls(), &trusting(&certs), tls_config())
        .await
        .unwrap();
    lock_cycle(&lock, "private-ca").await;
    // Only the TLS ports were used: the lock's names are the rediss:// URLs.
    let names: Vec<&str> = lock.node_names().collect();
    assert_eq!(names, cluster.tls_urls());
}

#[tokio::test]
async fn a_wrong_ca_is_refused_with_an_error_naming_the_node() {
    let certs = TestCertificates::generate().unwrap();
    let other = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(1, &certs, false).await;
    let url = cluster.node(0).tls_url().unwrap();
    for tls in [trusting(&other), TlsOptions::new()] {
        let lock = RedisLock::connect_tls(&url, &tls, tls_config())
            .await
            .unwrap();
        let error = lock.try_acquire("wrong-ca").await.unwrap_err();
        let text = error.to_string();
        eprintln!("{text}");
        assert!(matches!(error, LockError::NoQuorum { .. }), "{text}");
        assert!(text.contains(&url), "the error names the node: {text}");
        assert!(
            text.contains("invalid peer certificate"),
            "the error says why: {text}"
        );
    }
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(1, &certs, true).await;
    let url = cluster.node(0).tls_url().unwrap();

    let without = RedisLock::connect_tls(&url, &trusting(&certs), tls_config())
        .await
        .unwrap();
    let error = without.try_acquire("mtls").await.unwrap_err();
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");

    let with = trusting(&certs)
        .client_identity_files(certs.client_cert(), certs.client_key())
        .unwrap();
    let lock = RedisLock::connect_tls(&url, &with, tls_config())
        .await
        .unwrap();
    lock_cycle(&lock, "mtls").await;
}

/// A client the caller built with redis's own TLS API serves as well as a URL.
#[tokio::test]
async fn a_client_built_by_the_caller_serves_a_lock() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(3, &certs, true).await;
    let clients = cluster
        .tls_urls()
        .iter()
        .map(|url| {
            redis::Client::build_with_tls(
                url.as_str(),
                redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: std::fs::read(certs.client_cert()).unwrap(),
                        client_key: std::fs::read(certs.client_key()).unwrap(),
                    }),
                    root_cert: Some(std::fs::read(certs.ca_cert()).unwrap()),
                },
            )
            .unwrap()
        })
        .collect::<Vec<_>>();
    let lock = Redlock::from_clients(clients, tls_config()).await.unwrap();
    let names: Vec<&str> = lock.node_names().collect();
    assert_eq!(names, cluster.tls_urls());
    lock_cycle(&lock, "own-client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_five_tls_nodes_survives_a_frozen_one() {
    let certs = TestCertificates::generate().unwrap();
    let mut cluster = tls_cluster(5, &certs, false).await;
    let lock = Redlock::connect_tls(cluster.tls_urls(), &trusting(&certs), tls_config())
        .await
        .unwrap();
    lock_cycle(&lock, "warm").await;
    cluster.node_mut(4).freeze().await.unwrap();
    for i in 0..50 {
        let guard = lock
            .try_acquire(&format!("frozen:{}", i % 4))
            .await
            .expect("a quorum of 4 TLS nodes");
        guard.release().await.expect("release");
    }
    cluster.node_mut(4).thaw().await.unwrap();
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn the_cli_takes_the_tls_flags_and_environment() {
    use std::process::Stdio;
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(3, &certs, true).await;
    let nodes = cluster.tls_urls().join(",");
    let bin = env!("CARGO_BIN_EXE_quorumlock");
    let base = || {
        let mut command = tokio::process::Command::new(bin);
        command
            .env("QUORUMLOCK_NODES", &nodes)
            .env_remove("QUORUMLOCK_TLS_CA")
            .env_remove("QUORUMLOCK_TLS_CERT")
            .env_remove("QUORUMLOCK_TLS_KEY")
            .env_remove("QUORUMLOCK_TLS_INSECURE")
            .args(["--connect-timeout", "5s", "--node-timeout", "250ms"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
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
    let with_env = |command: &mut tokio::process::Command| {
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

/// A TLS handshake that never completes (the server accepts, then is frozen) is bounded by
/// the connect timeout, not left hanging.
#[tokio::test]
async fn a_stuck_tls_handshake_is_bounded_by_the_connect_timeout() {
    let certs = TestCertificates::generate().unwrap();
    let mut cluster = tls_cluster(1, &certs, false).await;
    cluster.node_mut(0).freeze().await.unwrap();
    let config = tls_config()
        .to_builder()
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let url = cluster.node(0).tls_url().unwrap();
    let lock = RedisLock::connect_tls(&url, &trusting(&certs), config)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(2), "connect took {waited:?}");
    let error = lock.try_acquire("stuck").await.unwrap_err();
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");
    cluster.node_mut(0).thaw().await.unwrap();
}

/// `status` and `release` make their own connections, which need the crypto provider as
/// much as the lock's: a `rediss://` URL with no TLS option at all (`#insecure`).
#[cfg(feature = "cli")]
#[tokio::test]
async fn the_cli_operator_commands_take_rediss_without_options() {
    let certs = TestCertificates::generate().unwrap();
    let cluster = tls_cluster(1, &certs, false).await;
    let url = format!("{}/#insecure", cluster.node(0).tls_url().unwrap());
    for args in [
        &["status", "plain"][..],
        &["release", "plain", "--token", "x"][..],
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .env("QUORUMLOCK_NODES", &url)
            .env_remove("QUORUMLOCK_TLS_CA")
            .env_remove("QUORUMLOCK_TLS_CERT")
            .env_remove("QUORUMLOCK_TLS_KEY")
            .env_remove("QUORUMLOCK_TLS_INSECURE")
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
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
