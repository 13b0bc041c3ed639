//! [`Counted`]: the one counted handle of the crate. A value that counts
//! its own handles (the count is a field of it, so a value can live in a
//! pool block, a recording's arena header or a heap box alike) and says
//! what its last handle's drop does ([`Counts::last_drop`]: free it, hand
//! its block back to a pool, recycle it). Host memory, CUDA memory,
//! recordings and pooled events are handed out through it.
//!
//! One last-drop idiom, `Arc`'s: every drop decrements with Release (its
//! uses of the value happen before the count falls), and the drop that
//! takes the count to zero issues an Acquire fence (it sees every other
//! handle's uses) before `last_drop` runs, exactly once. Modelled by
//! `loom-tests/tests/counted.rs`.

use std::ops::Deref;
use std::ptr::NonNull;

use crate::sync::atomic::{fence, AtomicUsize, Ordering};

/// A value shared by [`Counted`] handles, which keeps their count.
///
/// # Safety
///
/// [`count`](Self::count) returns the same counter for the value's whole
/// life, and nothing but `Counted` handles (and the code that makes the
/// first one) changes it.
pub unsafe trait Counts {
    /// The number of live handles.
    fn count(&self) -> &AtomicUsize;

    /// What the last handle's drop does with the value (free it, give its
    /// block back, recycle it).
    ///
    /// # Safety
    ///
    /// Called once, by the drop that took the count to zero, after it
    /// synchronized with every other handle's drop: `this` is valid and
    /// nothing else reaches the value.
    unsafe fn last_drop(this: NonNull<Self>);
}

/// A counted handle to a `T`: cloning counts one more handle; the last
/// drop calls [`Counts::last_drop`]. `Send` and `Sync` when `T` is both,
/// as `Arc`.
pub struct Counted<T: Counts>(NonNull<T>);

// SAFETY: handles on several threads share `&T` (so `T: Sync`) and the
// last one, on any thread, runs `last_drop` (so `T: Send`); the count is
// atomic.
unsafe impl<T: Counts + Send + Sync> Send for Counted<T> {}
// SAFETY: as above.
unsafe impl<T: Counts + Send + Sync> Sync for Counted<T> {}

impl<T: Counts> Counted<T> {
    /// Adopts one handle to the value at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is a valid `T` whose count includes this handle (a new value
    /// starts at 1), and it stays valid until its `last_drop`.
    pub unsafe fn from_raw(ptr: NonNull<T>) -> Counted<T> {
        Counted(ptr)
    }

    /// Whether two handles share one value.
    pub fn ptr_eq(a: &Counted<T>, b: &Counted<T>) -> bool {
        a.0 == b.0
    }

    /// The value's address (its identity: the same for every handle).
    pub fn as_ptr(this: &Counted<T>) -> *const T {
        this.0.as_ptr()
    }

    /// Whether this is the only handle. A `true` stays true until this
    /// handle is cloned: no other handle exists to clone it.
    pub fn is_unique(this: &Counted<T>) -> bool {
        // Acquire: pairs with the Release decrement of every other
        // handle's drop, so their uses of the value happen before the
        // caller's (it may write the value through `get_mut`).
        this.count().load(Ordering::Acquire) == 1
    }

    /// The value, to change it.
    ///
    /// # Safety
    ///
    /// This is the only handle ([`is_unique`](Self::is_unique)), and no
    /// other borrow of the value is live.
    pub unsafe fn get_mut(this: &mut Counted<T>) -> &mut T {
        // SAFETY: the only handle and no other borrow (the contract).
        unsafe { this.0.as_mut() }
    }
}

impl<T: Counts> Deref for Counted<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the value lives until its last handle's drop, and this
        // handle is counted.
        unsafe { self.0.as_ref() }
    }
}

impl<T: Counts> Clone for Counted<T> {
    #[inline]
    fn clone(&self) -> Counted<T> {
        // Relaxed: a new handle comes from a live one, which keeps the
        // value alive meanwhile (as `Arc::clone`); it pairs with nothing.
        self.count().fetch_add(1, Ordering::Relaxed);
        Counted(self.0)
    }
}

impl<T: Counts> Drop for Counted<T> {
    #[inline]
    fn drop(&mut self) {
        // Release: pairs with the Acquire fence below, run by whichever
        // drop is the last: this handle's uses happen before `last_drop`.
        if self.count().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Acquire: pairs with the Release decrements of every other
        // handle's drop (the count's release sequence).
        fence(Ordering::Acquire);
        // SAFETY: this drop took the count to zero after every other
        // handle's (the fence above), so this is the one call and
        // nothing else reaches the value.
        unsafe { T::last_drop(self.0) }
    }
}

impl<T: Counts + std::fmt::Debug> std::fmt::Debug for Counted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
