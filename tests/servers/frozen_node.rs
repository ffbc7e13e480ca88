//! A frozen node (it accepts, never answers) costs bounded memory, and receives no burst of
//! stale requests when it thaws. Real redis-server nodes; a counting allocator measures the
//! live heap of this test process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{cluster, command_calls, config, node_command, redlock, TTL};

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CYCLES: usize = 20_000;

/// The most live heap the frozen node may cost this process.
const MEMORY_BOUND: usize = 5 << 20;

/// The most requests a thawed node may receive: the most one node keeps for rounds that
/// no longer wait (1024), with room for the connection checks made meanwhile.
const BURST_BOUND: u64 = 1024 + 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_costs_bounded_memory_and_gets_no_burst_at_thaw() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    for i in 0..500 {
        crate::common::acquire_and_release(&lock, &format!("warm:{}", i % 8)).await;
    }
    let before = LIVE.load(Ordering::Relaxed);
    node_command(cluster.node(4), &["CONFIG", "RESETSTAT"]).await;
    cluster.node_mut(4).freeze().await.unwrap();

    let mut highest = 0;
    for i in 0..CYCLES {
        crate::common::acquire_and_release(&lock, &format!("cycle:{}", i % 8)).await;
        if i % 500 == 0 {
            highest = highest.max(LIVE.load(Ordering::Relaxed).saturating_sub(before));
        }
    }
    highest = highest.max(LIVE.load(Ordering::Relaxed).saturating_sub(before));
    eprintln!(
        "live heap growth over {CYCLES} cycles with node 4 frozen: at most {} KB",
        highest / 1024
    );

    cluster.node_mut(4).thaw().await.unwrap();
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
        received <= BURST_BOUND,
        "the thawed node received {received} stale lock requests"
    );
}
