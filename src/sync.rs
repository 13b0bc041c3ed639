//! The one place fenceline takes its synchronization primitives from.
//!
//! Every concurrent structure in the crate imports atomics, `UnsafeCell`,
//! `Arc` and `thread` from here, never from `std` directly, so that the same
//! code runs under the real std types and, with `RUSTFLAGS="--cfg loom"`,
//! under [loom]'s model checker (the approach of tokio's `src/loom/`).
//!
//! [loom]: https://docs.rs/loom

// The shim offers the whole set the crate's layers draw from; a layer not
// yet built leaves some unused.
#![allow(unused_imports, dead_code)]

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use std::thread;

    /// Parks the current thread for at most `timeout` (loom has no time:
    /// there it parks until unparked).
    pub(crate) fn park_timeout(timeout: std::time::Duration) {
        std::thread::park_timeout(timeout)
    }

    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        };
    }

    pub(crate) mod hint {
        pub(crate) use std::hint::spin_loop;
    }

    /// `std::cell::UnsafeCell` with loom's closure-based access API, so code
    /// written against it compiles unchanged under loom (which checks every
    /// access for data races).
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        #[inline(always)]
        pub(crate) const fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }
    }

    impl<T: ?Sized> UnsafeCell<T> {
        /// Reads through a shared raw pointer. The caller upholds the
        /// aliasing rules of `std::cell::UnsafeCell` when it dereferences it.
        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Writes through a mutable raw pointer. The caller upholds the
        /// aliasing rules of `std::cell::UnsafeCell` when it dereferences it.
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread;

    /// Parks the current thread for at most `timeout` (loom has no time:
    /// there it parks until unparked).
    pub(crate) fn park_timeout(_timeout: std::time::Duration) {
        loom::thread::park()
    }

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        };
    }

    pub(crate) mod hint {
        pub(crate) use loom::hint::spin_loop;
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;
