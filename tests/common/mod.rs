//! A counting global allocator shared by the zero-allocation tests. Each
//! test binary installs it with
//! `#[global_allocator] static GLOBAL: common::Counting = common::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Forwards to `System`, counting every allocation and reallocation on
/// every thread but the test harness's (see [`allocations`]).
pub struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// The sizes of the first counted allocations, for a failing test to show
/// (see [`sizes_since`]).
static SIZES: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];

std::thread_local! {
    /// This thread's allocations (const, no destructor: reading it never
    /// allocates, even from the allocator or during thread exit).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Set on the harness's main thread, whose allocations `allocations`
    /// does not count (const, no destructor, as `MINE`).
    static HARNESS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Allocations (and reallocations) so far, on every thread but the test
/// harness's main thread, which runs no test but may allocate while one
/// runs (it allocates when it first blocks on its channel, late on a busy
/// machine). Every other thread counts: the test's own and every thread
/// the library starts. So a counting binary holds one `#[test]`: a second
/// test's thread would count too, and it allocates on itself (libtest's
/// set-up) before its body runs, late on a busy machine, inside the other
/// test's window.
#[allow(dead_code)] // not every test binary uses both counts
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Marks the process's main thread as the harness's before `main` runs
/// (a constructor in `.init_array`, run on the main thread by the loader).
/// Elsewhere than Linux the main thread counts, as before.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static MARK_MAIN_THREAD: extern "C" fn() = {
    extern "C" fn mark() {
        HARNESS.with(|h| h.set(true));
    }
    mark
};

/// Allocations (and reallocations) so far on the calling thread, counted
/// whether or not it is the harness's.
#[allow(dead_code)]
pub fn thread_allocations() -> usize {
    MINE.with(|m| m.get())
}

/// The sizes of the counted allocations numbered `from..` (as
/// [`allocations`] counts them; at most 16 kept, the rest 0), for an
/// assertion's message: which pool or buffer grew.
#[allow(dead_code)]
pub fn sizes_since(from: usize) -> Vec<usize> {
    (from..allocations())
        .map(|n| SIZES.get(n - from).map_or(0, |s| s.load(Ordering::Relaxed)))
        .collect()
}

/// Where the next counted allocations' sizes are kept from: `allocations()`
/// when this was called.
static SIZES_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Starts keeping the sizes of the counted allocations (see
/// [`sizes_since`]); returns `allocations()`.
///
/// With `FENCELINE_ALLOC_BACKTRACE` set, each of those allocations also
/// prints where it was made (to find what allocated in a window).
#[allow(dead_code)]
pub fn keep_sizes() -> usize {
    let trace = std::env::var_os("FENCELINE_ALLOC_BACKTRACE").is_some();
    BACKTRACES.store(trace, Ordering::Relaxed);
    let from = allocations();
    SIZES_FROM.store(from, Ordering::Relaxed);
    from
}

/// Print a backtrace of each allocation [`keep_sizes`] keeps.
static BACKTRACES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

std::thread_local! {
    /// Set while this thread prints a backtrace (which allocates).
    static PRINTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count(size: usize) {
    if PRINTING.with(|p| p.get()) {
        return;
    }
    if !HARNESS.with(|h| h.get()) {
        let n = ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if let Some(slot) = n
            .checked_sub(SIZES_FROM.load(Ordering::Relaxed))
            .and_then(|k| SIZES.get(k))
        {
            slot.store(size, Ordering::Relaxed);
            // Not while panicking: the panic hook holds the backtrace
            // lock while it prints (and allocates).
            if BACKTRACES.load(Ordering::Relaxed) && !std::thread::panicking() {
                PRINTING.with(|p| p.set(true));
                eprintln!(
                    "allocation of {size} bytes:\n{}",
                    std::backtrace::Backtrace::force_capture()
                );
                PRINTING.with(|p| p.set(false));
            }
        }
    }
    MINE.with(|m| m.set(m.get() + 1));
}

// SAFETY: forwards to `System`, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Asserts that no thread allocates in the next 50 ms (an idle device or
/// executor: a thread that started late would do its start-up by then).
#[allow(dead_code)]
pub fn assert_idle_allocates_nothing(what: &str) {
    let before = keep_sizes();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let during = allocations() - before;
    assert_eq!(
        during,
        0,
        "{what}: threads allocated while idle (sizes {:?})",
        sizes_since(before)
    );
}
