//! Degradation you can see: with one of three nodes failing (a wrong password), every
//! acquisition still succeeds, and the library says so: a rate-limited `warn` event naming
//! the node and the reason, the tally on the `lock acquired` event, per-node counters, and
//! spans per acquire, refresh and release. With the `metrics` feature, the documented
//! metric names are recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{LockConfig, LockError, Redlock};
use quorumlock_testkit::{NodeOptions, RedisCluster};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

type Fields = HashMap<String, String>;

#[derive(Default)]
struct Fieldset(Fields);

impl Visit for Fieldset {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// What the library emitted: events (level and fields) and closed spans (name and fields).
#[derive(Default, Clone)]
struct Captured {
    events: Arc<Mutex<Vec<(Level, Fields)>>>,
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
}

struct SpanFields(Fields);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Captured {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fieldset::default();
        event.record(&mut fields);
        self.events
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields.0));
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fieldset::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.0));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut fields = Fieldset::default();
            values.record(&mut fields);
            if let Some(known) = span.extensions_mut().get_mut::<SpanFields>() {
                known.0.extend(fields.0);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<SpanFields>()
                .map(|known| known.0.clone())
                .unwrap_or_default();
            self.spans
                .lock()
                .unwrap()
                .push((span.name().to_owned(), fields));
        }
    }
}

impl Captured {
    fn events(&self, level: Level, message: &str) -> Vec<Fields> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, fields)| {
                *at == level
                    && fields
                        .get("message")
                        .is_some_and(|text| text.starts_with(message))
            })
            .map(|(_, fields)| fields.clone())
            .collect()
    }

    fn spans(&self, name: &str) -> Vec<Fields> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|(span, _)| span == name)
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .retry_count(0)
        .build()
        .unwrap()
}

/// Three nodes with a password; the third URL carries a wrong one.
async fn one_wrong_password() -> (RedisCluster, Vec<String>) {
    let cluster = RedisCluster::start_with(3, NodeOptions::default().with_password("right"))
        .await
        .unwrap();
    let mut urls = cluster.urls();
    urls[2] = format!("redis://:wrong@{}", cluster.node(2).address());
    (cluster, urls)
}

// Current-thread runtime: the capturing subscriber is this thread's default, and every
// task of the test runs on this thread.
#[tokio::test]
async fn a_failing_node_is_warned_about_counted_and_tallied_while_locks_succeed() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let (_cluster, urls) = one_wrong_password().await;
    let lock = Redlock::connect(&urls, config()).await.unwrap();
    let failing = lock.node_names().nth(2).unwrap().to_owned();
    assert!(!failing.contains("wrong"), "{failing}");

    for _ in 0..20 {
        let mut guard = lock.try_acquire("obs").await.expect("a quorum of two");
        guard.refresh().await.unwrap();
        guard.release().await.unwrap();
    }
    let other = Redlock::connect(&urls, config()).await.unwrap();
    let held = lock.try_acquire("obs").await.unwrap();
    let refused = other.try_acquire("obs").await.unwrap_err();
    assert!(matches!(refused, LockError::Held { .. }), "{refused}");
    held.release().await.unwrap();

    // One warning per failing node per 10 s, naming it and saying why (each lock warns
    // for its own nodes).
    let warnings = captured.events(Level::WARN, "node failed");
    let of_first: Vec<_> = warnings
        .iter()
        .filter(|fields| fields.get("node") == Some(&failing))
        .collect();
    assert!(
        (1..=2).contains(&of_first.len()),
        "one warning per lock for the failing node: {warnings:#?}"
    );
    for warning in &warnings {
        assert_eq!(warning.get("node"), Some(&failing), "{warning:?}");
        assert!(
            warning
                .get("reason")
                .is_some_and(|r| r.contains("authentication failed")),
            "{warning:?}"
        );
    }

    // The tally on the acquired event.
    let acquired = captured.events(Level::DEBUG, "lock acquired");
    assert!(acquired.len() >= 21, "{}", acquired.len());
    for event in &acquired {
        assert_eq!(
            event.get("nodes").map(String::as_str),
            Some("3"),
            "{event:?}"
        );
        assert_eq!(
            event.get("quorum").map(String::as_str),
            Some("2"),
            "{event:?}"
        );
    }
    assert!(
        acquired
            .iter()
            .any(|event| event.get("failed").map(String::as_str) == Some("1")),
        "some acquisition counted the failing node: {acquired:#?}"
    );

    // Per-node counters.
    let nodes = lock.node_metrics();
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[2].node, failing);
    assert!(nodes[2].errors > 0, "{nodes:#?}");
    assert!(
        nodes[2]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("authentication failed")),
        "{nodes:#?}"
    );
    for healthy in &nodes[..2] {
        assert_eq!(healthy.errors + healthy.timeouts, 0, "{healthy:?}");
        assert!(healthy.replies >= 60, "{healthy:?}");
        assert!(healthy.latency_max > Duration::ZERO, "{healthy:?}");
        assert!(healthy.mean_latency().unwrap() <= healthy.latency_max);
    }

    // Spans: acquire, refresh, release, with resource, attempts and outcome.
    let acquires = captured.spans("quorumlock.acquire");
    assert!(acquires.len() >= 22, "{}", acquires.len());
    for span in &acquires {
        assert_eq!(
            span.get("resource").map(String::as_str),
            Some("obs"),
            "{span:?}"
        );
        assert_eq!(
            span.get("attempts").map(String::as_str),
            Some("1"),
            "{span:?}"
        );
    }
    let outcomes: Vec<&str> = acquires
        .iter()
        .filter_map(|span| span.get("outcome").map(String::as_str))
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "held").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(outcomes.len(), acquires.len(), "every span has an outcome");
    let refreshes = captured.spans("quorumlock.refresh");
    assert_eq!(refreshes.len(), 20);
    assert!(refreshes
        .iter()
        .all(|span| span.get("outcome").map(String::as_str) == Some("extended")));
    let releases = captured.spans("quorumlock.release");
    assert!(releases.len() >= 21);
    assert!(releases
        .iter()
        .all(|span| span.get("outcome").map(String::as_str) == Some("released")));
}

/// The blocking acquire's span counts its attempts.
#[tokio::test]
async fn a_blocking_acquire_span_counts_its_attempts() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let cluster = crate::common::cluster(3).await;
    let retrying = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .retry_count(2)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let lock = crate::common::redlock(&cluster, retrying.clone()).await;
    let other = crate::common::redlock(&cluster, retrying).await;
    let held = lock.try_acquire("busy").await.unwrap();
    let error = other.acquire("busy").await.unwrap_err();
    assert!(matches!(error, LockError::Held { .. }), "{error}");
    held.release().await.unwrap();
    let busy: Vec<Fields> = captured
        .spans("quorumlock.acquire")
        .into_iter()
        .filter(|span| span.get("outcome").map(String::as_str) == Some("held"))
        .collect();
    assert_eq!(busy.len(), 1, "{busy:#?}");
    assert_eq!(busy[0].get("attempts").map(String::as_str), Some("3"));
    assert_eq!(busy[0].get("resource").map(String::as_str), Some("busy"));
}

#[cfg(feature = "metrics")]
mod with_metrics {
    use super::*;
    use metrics::{
        Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Every registered counter and histogram, by `name{label=value,...}`.
    #[derive(Default)]
    struct Recorded {
        counters: Mutex<HashMap<String, Arc<Count>>>,
        histograms: Mutex<HashMap<String, Arc<Samples>>>,
    }

    #[derive(Default)]
    struct Count(AtomicU64);
    impl CounterFn for Count {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::Relaxed);
        }
    }

    #[derive(Default)]
    struct Samples(Mutex<Vec<f64>>);
    impl HistogramFn for Samples {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    fn name(key: &Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        labels.sort();
        let mut text = key.name().to_owned();
        if !labels.is_empty() {
            let _ = write!(text, "{{{}}}", labels.join(","));
        }
        text
    }

    struct Shared(Arc<Recorded>);

    impl Recorder for Shared {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let count = Arc::clone(
                self.0
                    .counters
                    .lock()
                    .unwrap()
                    .entry(name(key))
                    .or_default(),
            );
            Counter::from_arc(count)
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            let samples = Arc::clone(
                self.0
                    .histograms
                    .lock()
                    .unwrap()
                    .entry(name(key))
                    .or_default(),
            );
            Histogram::from_arc(samples)
        }
    }

    #[tokio::test]
    async fn the_documented_metrics_are_recorded() {
        let recorded = Arc::new(Recorded::default());
        metrics::set_global_recorder(Shared(Arc::clone(&recorded))).unwrap();
        let (_cluster, urls) = one_wrong_password().await;
        let lock = Redlock::connect(&urls, config()).await.unwrap();
        let failing = lock.node_names().nth(2).unwrap().to_owned();
        let healthy = lock.node_names().next().unwrap().to_owned();
        for _ in 0..5 {
            let mut guard = lock.try_acquire("metered").await.unwrap();
            guard.refresh().await.unwrap();
            guard.release().await.unwrap();
        }
        let held = lock.try_acquire("metered").await.unwrap();
        assert!(lock.try_acquire("metered").await.is_err());
        drop(held);

        let count = |key: &str| {
            recorded
                .counters
                .lock()
                .unwrap()
                .get(key)
                .map_or(0, |count| count.0.load(Ordering::Relaxed))
        };
        let samples = |key: &str| {
            recorded
                .histograms
                .lock()
                .unwrap()
                .get(key)
                .map_or(0, |samples| samples.0.lock().unwrap().len())
        };
        assert_eq!(count("quorumlock_acquisitions_total{outcome=acquired}"), 6);
        assert_eq!(count("quorumlock_acquisitions_total{outcome=held}"), 1);
        assert_eq!(count("quorumlock_releases_total{outcome=released}"), 5);
        assert_eq!(count("quorumlock_refreshes_total{outcome=extended}"), 5);
        assert_eq!(samples("quorumlock_acquire_wait_seconds"), 6);
        // Five releases and one guard dropped.
        assert_eq!(samples("quorumlock_hold_seconds"), 6);
        assert!(
            count(&format!(
                "quorumlock_node_errors_total{{kind=error,node={failing}}}"
            )) > 0
        );
        assert_eq!(
            count(&format!(
                "quorumlock_node_errors_total{{kind=error,node={healthy}}}"
            )),
            0
        );
        assert!(
            samples(&format!(
                "quorumlock_node_latency_seconds{{node={healthy}}}"
            )) >= 15
        );
    }
}
