//! A counting global allocator shared by the zero-allocation tests. Each
//! test binary installs it with
//! `#[global_allocator] static GLOBAL: common::Counting = common::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Forwards to `System`, counting every allocation and reallocation on
/// every thread.
pub struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// This thread's allocations (const, no destructor: reading it never
    /// allocates, even from the allocator or during thread exit).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Allocations (and reallocations) so far, on every thread.
#[allow(dead_code)] // not every test binary uses both counts
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Allocations (and reallocations) so far on the calling thread: for a
/// test whose measured work all runs on its own thread, so that the test
/// harness's main thread (which may allocate while it first waits for the
/// test, late on a busy machine) is not counted.
#[allow(dead_code)]
pub fn thread_allocations() -> usize {
    MINE.with(|m| m.get())
}

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    MINE.with(|m| m.set(m.get() + 1));
}

// SAFETY: forwards to `System`, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
