//! Client memory with many locks held: a counting global allocator, and the measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use quorumlock::{AutoExtend, LockConfig, LockGuard, Redlock};

/// The system allocator, counting the bytes currently allocated and their peak.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grow(new_size);
        }
        new
    }
}

fn grow(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// What holding `locks` locks cost the client.
#[derive(Debug, Clone)]
pub struct MemoryReport {
    pub locks: usize,
    pub ttl: Duration,
    pub held_for: Duration,
    /// Live bytes per lock with the guards held, before auto-extension started.
    pub held_per_lock: f64,
    /// Live bytes per lock with every guard auto-extending, after at least one extension
    /// round of each.
    pub extended_per_lock: f64,
    /// Peak live bytes per lock over the whole measurement (acquisitions, extensions).
    pub peak_per_lock: f64,
    pub extensions: u64,
    pub lost: usize,
    pub acquire_secs: f64,
}

/// Acquires `locks` locks on distinct resources (64 acquisitions in flight), starts
/// `auto_extend` on each, keeps them held until every one was extended at least once, and
/// reports the bytes allocated and still live per lock, relative to before the first
/// acquisition (connections already open, scripts loaded).
pub async fn measure(urls: &[String], locks: usize, ttl: Duration) -> MemoryReport {
    let config = LockConfig::builder().ttl(ttl).build().expect("config");
    let lock = Redlock::connect(urls, config).await.expect("connect");
    // Warm up: open the connections, load the scripts.
    for i in 0..32 {
        let guard = lock
            .acquire(&format!("mem:warm:{i}"))
            .await
            .expect("warm-up");
        guard.release().await.expect("warm-up release");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = lock.metrics();
    let baseline = live();
    reset_peak();

    let started = Instant::now();
    let mut guards: Vec<LockGuard> = stream::iter(0..locks)
        .map(|i| {
            let lock = &lock;
            async move {
                lock.acquire(&format!("mem:lock:{i}"))
                    .await
                    .expect("acquire")
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let acquire_secs = started.elapsed().as_secs_f64();
    let held = live().saturating_sub(baseline);

    for guard in &mut guards {
        guard
            .auto_extend(AutoExtend::default())
            .expect("the default interval is never refused");
    }
    // The first extension of a lock comes a third of the TTL after it was acquired; wait
    // until the last acquired lock was extended too, and then some.
    let waited = Instant::now();
    tokio::time::sleep(ttl / 3 + ttl / 4).await;
    // Every lock's first extension falls due at once, a burst of rounds that a loaded
    // machine can take longer than that to send: wait for the count (within one more TTL),
    // not for a fixed time, so that the bytes are those of extended locks.
    let give_up = Instant::now() + ttl;
    while lock.metrics().extended - before.extended < locks as u64 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held_for = waited.elapsed();
    let extended = live().saturating_sub(baseline);
    let peak = peak().saturating_sub(baseline);
    let after = lock.metrics();
    let lost = guards.iter().filter(|guard| guard.lost().is_lost()).count();

    // Release everything (not measured).
    stream::iter(guards)
        .for_each_concurrent(64, |guard| async move {
            let _ = guard.release().await;
        })
        .await;

    let per_lock = |bytes: usize| bytes as f64 / locks as f64;
    MemoryReport {
        locks,
        ttl,
        held_for,
        held_per_lock: per_lock(held),
        extended_per_lock: per_lock(extended),
        peak_per_lock: per_lock(peak),
        extensions: after.extended - before.extended,
        lost,
        acquire_secs,
    }
}

/// Live heap bytes per lock while `contender` holds `locks` locks on `urls` (acquired 64 at
/// a time, with no auto-extension), relative to the connected client before the first;
/// then releases them all.
pub async fn held_per_lock(
    contender: crate::clients::Contender,
    urls: &[String],
    locks: usize,
) -> f64 {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(120))
        .build()
        .expect("config");
    let client = crate::clients::Client::connect(contender, urls, &config).await;
    for i in 0..32 {
        client
            .cycle(&format!("held:warm:{i}"))
            .await
            .expect("warm-up");
    }
    let baseline = live();
    let label = contender.label();
    let held: Vec<_> = stream::iter(0..locks)
        .map(|i| {
            let client = &client;
            async move { client.acquire(&format!("held:{label}:{i}")).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let per_lock = live().saturating_sub(baseline) as f64 / locks.max(1) as f64;
    stream::iter(held.into_iter().flatten())
        .map(|lock| client.release(lock))
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    per_lock
}
