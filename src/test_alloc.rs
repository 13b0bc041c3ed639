//! The unit tests' global allocator: the system's, counting the
//! allocations each thread makes, for the tests of paths that promise to
//! allocate nothing (see [`on_this_thread`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

std::thread_local! {
    /// This thread's allocations (const, no destructor: reading it never
    /// allocates, even inside the allocator).
    static MINE: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to `System`, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        MINE.with(|m| m.set(m.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        MINE.with(|m| m.set(m.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns how many allocations (and reallocations) the
/// calling thread made inside it.
pub(crate) fn on_this_thread(f: impl FnOnce()) -> usize {
    let before = MINE.with(Cell::get);
    f();
    MINE.with(Cell::get) - before
}
