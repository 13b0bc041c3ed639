//! The one place fenceline takes its synchronization primitives from.
//!
//! Every concurrent structure in the crate imports atomics, `UnsafeCell`,
//! `Arc` and `thread` from here, never from `std` directly, so that the same
//! code runs under the real std types and, with `RUSTFLAGS="--cfg fenceline_loom"`,
//! under [loom]'s model checker (the approach of tokio's `src/loom/`).
//!
//! [loom]: https://docs.rs/loom

// Re-exported by `testing`, but not with the counting atomics, whose
// counter type is the crate's own.
#[cfg_attr(
    any(not(feature = "testing"), fenceline_count_rmw),
    allow(unreachable_pub)
)]
pub(crate) mod counted;
#[cfg(all(not(fenceline_loom), fenceline_count_rmw))]
pub(crate) mod rmw_count;
pub(crate) mod sleeper;

#[cfg(not(fenceline_loom))]
mod imp {
    pub(crate) use std::cell::Cell;
    #[cfg(not(fenceline_count_rmw))]
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::{Mutex, MutexGuard};
    pub(crate) use std::thread;

    #[cfg(fenceline_count_rmw)]
    pub(crate) use super::rmw_count::Arc;

    /// Parks the current thread for at most `timeout` (loom has no time:
    /// there it parks until unparked).
    pub(crate) fn park_timeout(timeout: std::time::Duration) {
        std::thread::park_timeout(timeout)
    }

    pub(crate) mod atomic {
        #[cfg(fenceline_count_rmw)]
        pub(crate) use super::super::rmw_count::{
            fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        };
        pub(crate) use std::sync::atomic::Ordering;
        #[cfg(not(fenceline_count_rmw))]
        pub(crate) use std::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
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

#[cfg(fenceline_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;

    /// `std::cell::Cell` for `Copy` values, on loom's `UnsafeCell`, so the
    /// model checker sees (and checks for races) every access to the plain
    /// fields of objects shared through raw pointers (task headers).
    #[derive(Debug)]
    pub(crate) struct Cell<T: Copy>(UnsafeCell<T>);

    impl<T: Copy> Cell<T> {
        pub(crate) fn new(value: T) -> Self {
            Cell(UnsafeCell::new(value))
        }

        pub(crate) fn get(&self) -> T {
            // SAFETY: a `Copy` read; loom reports a racing write.
            self.0.with(|p| unsafe { *p })
        }

        pub(crate) fn set(&self, value: T) {
            // SAFETY: loom reports a racing access.
            self.0.with_mut(|p| unsafe { *p = value })
        }
    }
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread;

    /// Parks the current thread for at most `timeout` (loom has no time:
    /// there it parks until unparked).
    pub(crate) fn park_timeout(_timeout: std::time::Duration) {
        loom::thread::park()
    }

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }

    pub(crate) mod hint {
        pub(crate) use loom::hint::spin_loop;
    }
}

#[allow(unused_imports)]
pub(crate) use imp::*;

/// Thread-locals: loom's under the model checker (its threads share one
/// OS thread, so each needs its own copy), std's with a `const`
/// initializer otherwise. Same syntax as `std::thread_local!`, without
/// the `const { }` (this adds it).
macro_rules! fenceline_thread_local {
    ($($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr;)*) => {
        #[cfg(not(fenceline_loom))]
        std::thread_local! {
            $($(#[$attr])* $vis static $name: $t = const { $init };)*
        }
        #[cfg(fenceline_loom)]
        loom::thread_local! {
            $($(#[$attr])* $vis static $name: $t = $init;)*
        }
    };
}
pub(crate) use fenceline_thread_local as thread_local;

/// A number no other call in the process returns (from 1): identities
/// only (a graph id's per-thread prefix). The count orders nothing, so
/// it is relaxed.
pub(crate) fn unique_number() -> u64 {
    #[cfg(not(fenceline_loom))]
    {
        static NEXT: atomic::AtomicU64 = atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, atomic::Ordering::Relaxed)
    }
    #[cfg(fenceline_loom)]
    {
        loom::lazy_static! {
            static ref NEXT: atomic::AtomicU64 = atomic::AtomicU64::new(1);
        }
        NEXT.fetch_add(1, atomic::Ordering::Relaxed)
    }
}

/// A registry of the live addresses of states freed by hand (a queue's
/// shared state, the executor's), for the model checker only.
///
/// A use-after-free is undefined behaviour that loom cannot see: its
/// atomics keep working in freed memory. Under `cfg(fenceline_loom)` each
/// such state records its address when made and removes it when freed, and
/// every entry point that a thread may reach after handing an object over
/// asserts the address is still live, right after its first atomic access
/// to the state (loom may switch threads just before that access, so a
/// check placed before it would run "atomically" with the hand-off): a
/// model in which the owner can be freed in between then fails instead of
/// passing by luck. The check reads only the registry, never the (maybe
/// freed) state. Without the cfg every function is an empty inline no-op.
pub(crate) mod liveness {
    #[cfg(fenceline_loom)]
    static LIVE: std::sync::Mutex<std::collections::BTreeSet<usize>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());

    #[cfg(fenceline_loom)]
    fn live() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<usize>> {
        LIVE.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `state` was just made.
    #[inline(always)]
    pub(crate) fn born<T>(state: *const T) {
        #[cfg(fenceline_loom)]
        live().insert(state as usize);
        let _ = state;
    }

    /// `state` is being freed.
    #[inline(always)]
    pub(crate) fn died<T>(state: *const T) {
        #[cfg(fenceline_loom)]
        live().remove(&(state as usize));
        let _ = state;
    }

    /// Panics (under the model checker) if `state` was freed.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn check<T>(state: *const T, what: &str) {
        #[cfg(fenceline_loom)]
        assert!(
            live().contains(&(state as usize)),
            "use after free: {what} was freed while a thread still used it"
        );
        let _ = (state, what);
    }
}

/// Lets a thread that starts helper threads (an executor's workers, a
/// CUDA queue's completion thread) return only once each has done its
/// start-up: what a thread allocates for itself when it starts (its
/// worker state, its registration with the deques' epoch, the driver's
/// entry points) then happens before the constructor returns, never in
/// the caller's steady state, however late the OS first runs the thread.
///
/// Under the model checker it does nothing (the models start their
/// threads themselves and check other things).
pub(crate) mod started {
    #[cfg(not(fenceline_loom))]
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Threads yet to finish their start-up, and who waits for them.
    pub(crate) struct Latch {
        #[cfg(not(fenceline_loom))]
        left: AtomicUsize,
        #[cfg(not(fenceline_loom))]
        waiter: std::thread::Thread,
    }

    impl Latch {
        /// A latch for `count` threads, waited for by the calling thread.
        pub(crate) fn new(count: usize) -> Latch {
            let _ = count;
            Latch {
                #[cfg(not(fenceline_loom))]
                left: AtomicUsize::new(count),
                #[cfg(not(fenceline_loom))]
                waiter: std::thread::current(),
            }
        }

        /// Called by each thread once, when its start-up is done (also if
        /// it unwinds: see [`Arrival`]).
        fn arrive(&self) {
            // Release: pairs with the waiter's Acquire load in `wait`: the
            // thread's start-up happens before the waiter's return. (The
            // Acquire half is not needed: the decrements form one release
            // sequence.)
            #[cfg(not(fenceline_loom))]
            if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.waiter.unpark();
            }
        }

        /// A guard that arrives when dropped: a thread makes it first, and
        /// drops it once its start-up is done (or a panic unwinds it).
        pub(crate) fn arrival(self: &std::sync::Arc<Latch>) -> Arrival {
            Arrival(self.clone())
        }

        /// Waits until every thread arrived. Only the thread that made
        /// the latch calls it, after starting `count` threads (each of
        /// which arrives once).
        pub(crate) fn wait(&self) {
            // Acquire: pairs with every `arrive`'s decrement (see there).
            #[cfg(not(fenceline_loom))]
            while self.left.load(Ordering::Acquire) != 0 {
                // A stray wake-up only loops again.
                std::thread::park();
            }
        }
    }

    /// See [`Latch::arrival`].
    pub(crate) struct Arrival(std::sync::Arc<Latch>);

    impl Drop for Arrival {
        fn drop(&mut self) {
            self.0.arrive();
        }
    }
}
