//! Criterion micro-benchmarks: the CPU-only pieces of an acquisition, and one uncontended
//! acquire+release on five local redis-server nodes for quorumlock, rslock and the
//! hand-written floor (the load generator with the full scenarios is `benches/scenarios`).
//!
//! ```text
//! cargo bench --bench micro            # about 40 s
//! cargo bench --bench micro -- --test  # each benchmark once, as a check
//! ```

#[allow(dead_code)]
#[path = "scenarios/clients.rs"]
mod clients;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clients::{Client, Contender};
use criterion::{criterion_group, criterion_main, Criterion};
use quorumlock::{LockConfig, LockToken};
use quorumlock_testkit::RedisCluster;

fn cpu_only(c: &mut Criterion) {
    c.bench_function("token/generate", |b| b.iter(LockToken::generate));
    c.bench_function("config/build_validated", |b| {
        b.iter(|| {
            LockConfig::builder()
                .ttl(black_box(Duration::from_secs(10)))
                .retry_count(black_box(5))
                .node_timeout(black_box(Duration::from_millis(20)))
                .build()
        })
    });
}

fn five_nodes(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cluster = runtime
        .block_on(RedisCluster::start(5))
        .expect("start 5 redis-server nodes");
    let urls = cluster.urls();
    let config = LockConfig::default();
    let next = AtomicU64::new(0);

    let mut group = c.benchmark_group("cycle_5_nodes");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for contender in [Contender::Quorumlock, Contender::Rslock, Contender::Floor] {
        let client = runtime.block_on(Client::connect(contender, &urls, &config));
        group.bench_function(contender.label(), |b| {
            b.to_async(&runtime).iter(|| async {
                let i = next.fetch_add(1, Ordering::Relaxed);
                client
                    .cycle(&format!("micro:{}:{i}", contender.label()))
                    .await
                    .expect("uncontended cycle");
            })
        });
        drop(client);
    }
    group.finish();
    drop(cluster);
}

criterion_group!(benches, cpu_only, five_nodes);
criterion_main!(benches);
