//! loom models of the crate's one counted handle (`sync::counted::Counted`,
//! the real code), as host memory, CUDA memory, recordings and pooled
//! events use it: handles cloned and dropped on several threads, the last
//! drop's `last_drop` run exactly once, after every other handle's uses.
//! Each handle's user writes a loom `UnsafeCell` of its own through the
//! shared value before dropping its handle, and `last_drop` reads them
//! all: loom reports a causality violation if a drop's uses do not happen
//! before it.
#![cfg(fenceline_loom)]

use std::ptr::NonNull;

use fenceline::testing::{Counted, Counts};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

struct Probe {
    refs: AtomicUsize,
    /// One cell per user, written while it holds a handle.
    uses: [UnsafeCell<u64>; 3],
    /// `last_drop` calls, and the sum of the uses it saw.
    report: Arc<AtomicUsize>,
}

// SAFETY: every thread writes only its own cell, while holding a handle.
unsafe impl Sync for Probe {}
// SAFETY: as above.
unsafe impl Send for Probe {}

// SAFETY: `refs` is the handles' count alone.
unsafe impl Counts for Probe {
    fn count(&self) -> &AtomicUsize {
        &self.refs
    }

    unsafe fn last_drop(this: NonNull<Probe>) {
        // SAFETY: made by `Box::leak` in `probe`; the last handle.
        let probe = unsafe { Box::from_raw(this.as_ptr()) };
        // SAFETY: every user's write happened before (what the model checks).
        let sum: u64 = probe.uses.iter().map(|c| c.with(|p| unsafe { *p })).sum();
        probe
            .report
            .fetch_add(1 + 10 * sum as usize, Ordering::Relaxed);
    }
}

fn probe(report: &Arc<AtomicUsize>) -> Counted<Probe> {
    let value = Box::new(Probe {
        refs: AtomicUsize::new(1),
        uses: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
        report: report.clone(),
    });
    // SAFETY: a new value counted 1, freed by its `last_drop`.
    unsafe { Counted::from_raw(NonNull::from(Box::leak(value))) }
}

/// Writes user `i`'s cell through `handle`, then drops it.
fn use_and_drop(handle: Counted<Probe>, i: usize) {
    // SAFETY: cell `i` is this user's alone.
    handle.uses[i].with_mut(|p| unsafe { *p = 1 });
    drop(handle);
}

// Catches: the last drop running before another handle's uses are
// visible, or running twice or never. Mutation checked: the
// `fence(Acquire)` before `last_drop` removed (loom: causality violation
// reading a cell in `last_drop`).
#[test]
fn last_drop_runs_once_after_every_use() {
    loom::model(|| {
        let report = Arc::new(AtomicUsize::new(0));
        let a = probe(&report);
        let (b, c) = (a.clone(), a.clone());
        let tb = thread::spawn(move || use_and_drop(b, 1));
        let tc = thread::spawn(move || use_and_drop(c, 2));
        use_and_drop(a, 0);
        tb.join().unwrap();
        tc.join().unwrap();
        // Once, having seen all three uses.
        assert_eq!(report.load(Ordering::Relaxed), 1 + 10 * 3);
    });
}

// Catches: `is_unique` true while another handle's uses may still be
// unseen. Mutations checked: its load `Relaxed`, and the drops' decrement
// `Relaxed` instead of `Release` (loom, each: concurrent writes to the
// cell through `get_mut` after `is_unique`).
#[test]
fn is_unique_sees_every_dropped_use() {
    loom::model(|| {
        let report = Arc::new(AtomicUsize::new(0));
        let mut a = probe(&report);
        let b = a.clone();
        let t = thread::spawn(move || use_and_drop(b, 1));
        if Counted::is_unique(&a) {
            // SAFETY: the only handle, no other borrow.
            let probe = unsafe { Counted::get_mut(&mut a) };
            probe.uses[1].with_mut(|p| unsafe { *p += 1 });
        }
        t.join().unwrap();
        drop(a);
        let seen = report.load(Ordering::Relaxed);
        assert!(seen == 1 + 10 || seen == 1 + 20, "{seen}");
    });
}
