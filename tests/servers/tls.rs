//! `rediss://` on real TLS servers (Debian's redis-server is built with TLS), with
//! certificates generated per test: out of the box, a private CA, a wrong CA, mutual TLS,
//! a client built by the caller, and a quorum of five TLS nodes with one frozen.
//! quorumlock-cli/tests/tls.rs tests the CLI's TLS flags.

use std::time::Duration;

use quorumlock::{
    redis, DistributedLock, IntoNodes, LockConfig, LockError, Nodes, RedisLock, Redlock, TlsOptions,
};
use quorumlock_testkit::{NodeOptions, NodeTls, RedisCluster, TestCertificates};

/// Room for TLS handshakes on a loaded machine.
fn tls_config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .retry_count(0)
        .build()
        .unwrap()
}

/// `nodes` with the TLS options `tls`, and room for TLS handshakes on a loaded machine.
fn tls_nodes(nodes: impl IntoNodes, tls: TlsOptions) -> Nodes {
    Nodes::new(nodes)
        .unwrap()
        .tls(tls)
        .connect_timeout(Duration::from_secs(5))
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
    let lock = RedisLock::connect(tls_nodes(&url, TlsOptions::new()), tls_config())
        .await
        .unwrap();
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
    let nodes = tls_nodes(cluster.tls_urls(), trusting(&certs));
    let lock = Redlock::connect(nodes, tls_config()).await.unwrap();
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
        let lock = RedisLock::connect(tls_nodes(&url, tls), tls_config())
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

    let without = RedisLock::connect(tls_nodes(&url, trusting(&certs)), tls_config())
        .await
        .unwrap();
    let error = without.try_acquire("mtls").await.unwrap_err();
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");

    let with = trusting(&certs)
        .client_identity_files(certs.client_cert(), certs.client_key())
        .unwrap();
    let lock = RedisLock::connect(tls_nodes(&url, with), tls_config())
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
    let nodes = tls_nodes(clients, TlsOptions::new());
    let lock = Redlock::connect(nodes, tls_config()).await.unwrap();
    let names: Vec<&str> = lock.node_names().collect();
    assert_eq!(names, cluster.tls_urls());
    lock_cycle(&lock, "own-client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_five_tls_nodes_survives_a_frozen_one() {
    let certs = TestCertificates::generate().unwrap();
    let mut cluster = tls_cluster(5, &certs, false).await;
    let nodes = tls_nodes(cluster.tls_urls(), trusting(&certs));
    let lock = Redlock::connect(nodes, tls_config()).await.unwrap();
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

/// A TLS handshake that never completes (the server accepts, then is frozen) is bounded by
/// the connect timeout, not left hanging.
#[tokio::test]
async fn a_stuck_tls_handshake_is_bounded_by_the_connect_timeout() {
    let certs = TestCertificates::generate().unwrap();
    let mut cluster = tls_cluster(1, &certs, false).await;
    cluster.node_mut(0).freeze().await.unwrap();
    let started = tokio::time::Instant::now();
    let url = cluster.node(0).tls_url().unwrap();
    let nodes = tls_nodes(&url, trusting(&certs)).connect_timeout(Duration::from_millis(300));
    let lock = RedisLock::connect(nodes, tls_config()).await.unwrap();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(2), "connect took {waited:?}");
    let error = lock.try_acquire("stuck").await.unwrap_err();
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");
    cluster.node_mut(0).thaw().await.unwrap();
}
