//! [`Sleeper`]: a thread that parks, and the flag that says it may be
//! parked: the wake-up half of every protocol in the crate where a thread
//! sleeps until another hands it work (the executor's workers, a device's
//! issuer thread). What the sleeper looks at after arming its flag, and what
//! a waker publishes before taking it, is each protocol's own (their
//! comments say why no wake-up is lost).
//!
//! Waking takes no lock. The sleeper writes its thread handle once, before
//! it first arms the flag; a waker reads the handle only after a swap that
//! took the flag from `true` (acquiring that write). So the handle is never
//! read before it is written, and never written again.
//!
//! Modelled through its users, the real code: `loom-tests/tests/issuer.rs`
//! (the issuer thread) and `executor.rs` (parked workers). Mutation
//! checked: `wake`'s swap `Release` instead of `AcqRel` (loom: the handle
//! read races its write).

use super::atomic::{AtomicBool, Ordering};
use super::thread::{self, Thread};
use super::UnsafeCell;

/// A sleeping thread's flag and handle.
pub(crate) struct Sleeper {
    /// Set by the sleeper before it parks; taken by whoever wakes it.
    sleeping: AtomicBool,
    /// Written once by the sleeper, before it first arms `sleeping`.
    thread: UnsafeCell<Option<Thread>>,
}

// SAFETY: `thread` is written once, by the sleeper, before any waker can
// read it (see the module), then only read; the flag is atomic.
unsafe impl Send for Sleeper {}
// SAFETY: as above.
unsafe impl Sync for Sleeper {}

impl Sleeper {
    pub(crate) fn new() -> Sleeper {
        Sleeper {
            sleeping: AtomicBool::new(false),
            thread: UnsafeCell::new(None),
        }
    }

    /// Records the calling thread as the sleeper.
    ///
    /// # Safety
    /// Called once, by the sleeping thread, before it first arms.
    pub(crate) unsafe fn register_current(&self) {
        // SAFETY: no waker reads the handle before it acquires the first
        // `true`, which the sleeper stores after this write; called once,
        // so there is no other writer.
        self.thread
            .with_mut(|t| unsafe { *t = Some(thread::current()) });
    }

    /// Sets the flag before the sleeper parks (a swap, not a store: loom
    /// lets a plain store fall between a waker's swap read and write, loom
    /// issues #254 and #389). `order` is the caller's: at least Release,
    /// which publishes the handle to the waker's Acquire.
    pub(crate) fn arm(&self, order: Ordering) {
        let _ = self.sleeping.swap(true, order);
    }

    /// Clears the flag once the sleeper is up (a swap, as in `arm`).
    pub(crate) fn disarm(&self, order: Ordering) {
        let _ = self.sleeping.swap(false, order);
    }

    /// Whether the flag is set: a hint (Relaxed), to spare a waker a swap
    /// that would take the cache line from a thread that is awake.
    pub(crate) fn may_sleep(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }

    /// Takes the flag; if it was set, unparks the sleeper. `true` if it
    /// was.
    pub(crate) fn wake(&self) -> bool {
        // AcqRel: the Acquire pairs with the sleeper's Release (or AcqRel)
        // swap of `true` in `arm`, which follows its handle write; the
        // Release pairs with an AcqRel re-arm, publishing what this thread
        // did before waking (each protocol says what it needs of it).
        if !self.sleeping.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.thread.with(|t| {
            // SAFETY: the swap read the sleeper's `true`, stored after it
            // wrote its handle (`register_current`), which is never written
            // again: this read is ordered after the only write.
            if let Some(t) = unsafe { &*t } {
                t.unpark();
            }
        });
        true
    }
}
