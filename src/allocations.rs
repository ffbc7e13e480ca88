//! Tests only: counts the heap allocations the current thread makes, so that a unit test
//! can pin what a piece of state costs (see the lease's tests). The count is per thread,
//! so tests running beside it on other threads do not disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each thread's allocations.
struct Counting;

thread_local! {
    // `const`-initialised cells: reading them never allocates, which an allocator needs.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counting touches
// only thread-local cells, and `try_with` keeps it from running during a thread's teardown.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count(bytes: usize) {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    let _ = BYTES.try_with(|n| n.set(n.get() + bytes));
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// What `f` allocated on this thread: `(its result, allocations, bytes)`.
pub(crate) fn counted<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let (allocations, bytes) = (ALLOCATIONS.get(), BYTES.get());
    let value = f();
    (value, ALLOCATIONS.get() - allocations, BYTES.get() - bytes)
}
