//! A frozen node (it accepts, never answers) costs bounded memory, and receives no burst of
//! stale requests when it thaws. Real redis-server nodes; a counting allocator measures the
//! live heap of the threads of this test's own runtime, so that the tests running beside it
//! in this binary do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use crate::common::{cluster, command_calls, config, node_command, redlock, TTL};
use quorumlock::LockConfig;

/// The system allocator, counting the bytes allocated and freed on the threads that count.
struct Counting;

/// Bytes allocated minus bytes freed on the counting threads: a difference between two
/// readings is what they kept meanwhile.
static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    // `const`-initialised: reading it never allocates, which an allocator needs.
    static COUNTS: Cell<bool> = const { Cell::new(false) };
}

fn counted(bytes: usize, sign: isize) {
    if COUNTS.try_with(Cell::get).unwrap_or(false) {
        LIVE.fetch_add(
            sign * isize::try_from(bytes).unwrap_or(isize::MAX),
            Ordering::Relaxed,
        );
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counting touches
// a thread-local flag and an atomic only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size(), 1);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        counted(layout.size(), -1);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Lock cycles with the node frozen: several times the most requests one node keeps for
/// rounds that no longer wait (1024), so that a keeper without that bound would show.
const CYCLES: usize = 6_000;

/// The cycle after which the kept requests are at their bound: from here on the live heap
/// may not grow with the cycles.
const SATURATED: usize = 2_000;

/// The most live heap the frozen node may cost this process.
const MEMORY_BOUND: isize = 5 << 20;

/// The most the live heap may grow from [`SATURATED`] to [`CYCLES`]: 4,000 more requests
/// kept would cost several megabytes (each holds its boxed future, about 0.7 KB, and its
/// command), so a growth under a quarter of one is the bound holding.
const GROWTH_BOUND: isize = 256 << 10;

/// The most requests a thawed node may receive: the most one node keeps for rounds that
/// no longer wait (1024), with room for the connection checks made meanwhile.
const BURST_BOUND: u64 = 1024 + 64;

/// One acquire and release of `resource`; whether both went through.
async fn cycle(lock: &quorumlock::Redlock, resource: &str) -> bool {
    match lock.try_acquire(resource).await {
        Ok(guard) => guard.release().await.is_ok(),
        Err(_) => false,
    }
}

#[test]
fn a_frozen_node_costs_bounded_memory_and_gets_no_burst_at_thaw() {
    COUNTS.set(true);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| COUNTS.set(true))
        .build()
        .expect("a runtime");
    runtime.block_on(frozen_node());
}

async fn frozen_node() {
    let mut cluster = cluster(5).await;
    // The library's default per-node timeout: how soon a silent connection is given up,
    // and so how much is written to it meanwhile, depends on it.
    let defaults = config(TTL)
        .to_builder()
        .node_timeout(LockConfig::DEFAULT_NODE_TIMEOUT)
        .build()
        .unwrap();
    let lock = redlock(&cluster, defaults).await;
    for i in 0..500 {
        cycle(&lock, &format!("warm:{}", i % 8)).await;
    }
    let before = LIVE.load(Ordering::Relaxed);
    node_command(cluster.node(4), &["CONFIG", "RESETSTAT"]).await;
    cluster.node_mut(4).freeze().await.unwrap();

    let mut highest = 0;
    let mut saturated = 0;
    let mut done = 0;
    for i in 0..CYCLES {
        done += usize::from(cycle(&lock, &format!("cycle:{}", i % 8)).await);
        if i % 500 == 0 {
            highest = highest.max(LIVE.load(Ordering::Relaxed) - before);
        }
        if i == SATURATED {
            saturated = LIVE.load(Ordering::Relaxed);
        }
    }
    let at_end = LIVE.load(Ordering::Relaxed);
    // At the default 50 ms node timeout a loaded machine fails some cycles; the frozen
    // node must still have been sent most of them.
    assert!(
        done > CYCLES / 2,
        "only {done} of {CYCLES} cycles went through"
    );
    highest = highest.max(at_end - before);
    let growth = at_end - saturated;
    eprintln!(
        "live heap growth over {CYCLES} cycles with node 4 frozen: at most {} KB, {} KB of it \
         after cycle {SATURATED}",
        highest / 1024,
        growth / 1024
    );

    cluster.node_mut(4).thaw().await.unwrap();
    // What the node held back arrives at once; the connection checks since then are
    // counted in the bound.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let node = cluster.node(4);
    let received = command_calls(node, "set").await
        + command_calls(node, "evalsha").await
        + command_calls(node, "eval").await;
    eprintln!("node 4 received {received} lock requests at thaw");
    assert!(
        highest < MEMORY_BOUND,
        "the frozen node cost {} KB of live heap",
        highest / 1024
    );
    assert!(
        growth < GROWTH_BOUND,
        "the live heap grew by {} KB after cycle {SATURATED}",
        growth / 1024
    );
    assert!(
        received <= BURST_BOUND,
        "the thawed node received {received} stale lock requests"
    );
}
