//! Counting atomics (`RUSTFLAGS="--cfg fenceline_count_rmw"`, never for
//! production: a cfg, not a feature, so no dependent can turn it on for a
//! whole build): the crate's atomics and `Arc` with every read-modify-write (a CAS counts
//! whether it succeeds or not), every `SeqCst` fence and every reference
//! count change counted on the calling thread. `tests/rmw_per_submission.rs`
//! reads the counts around one path to report (and bound) what it costs.
//!
//! Only what goes through [`crate::sync`] is counted: crossbeam's deque,
//! the std `Arc`s a few device handles use directly, parking and the
//! allocator are not.

use std::cell::Cell;
use std::sync::atomic::Ordering;

thread_local! {
    static RMW: Cell<u64> = const { Cell::new(0) };
    static FENCE: Cell<u64> = const { Cell::new(0) };
    /// Where each RMW came from, while [`trace`] is on for this thread.
    static SITES: std::cell::RefCell<Option<Vec<&'static std::panic::Location<'static>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts (`true`) or stops recording where this thread's RMWs come from;
/// stopping returns the sites recorded, as `file:line`, in order.
pub fn trace(on: bool) -> Vec<String> {
    SITES.with(|s| {
        let old = s.replace(on.then(Vec::new));
        old.unwrap_or_default()
            .iter()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .collect()
    })
}

/// Every thread's read-modify-writes together (itself not counted).
static ALL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Set while every thread's RMW sites are recorded ([`trace_all`]).
static TRACE_ALL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
#[allow(clippy::type_complexity)]
static ALL_SITES: std::sync::Mutex<Vec<(Option<String>, &'static std::panic::Location<'static>)>> =
    std::sync::Mutex::new(Vec::new());

/// Starts (`true`) or stops recording where every thread's RMWs come from;
/// stopping returns them as `thread: file:line`, in order.
pub fn trace_all(on: bool) -> Vec<String> {
    TRACE_ALL.store(on, Ordering::SeqCst);
    let mut all = ALL_SITES.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *all)
        .into_iter()
        .map(|(t, l)| format!("{}: {}:{}", t.unwrap_or_default(), l.file(), l.line()))
        .collect()
}

#[inline(always)]
#[track_caller]
fn rmw() {
    let site = std::panic::Location::caller();
    if TRACE_ALL.load(Ordering::Relaxed) {
        let name = std::thread::current().name().map(str::to_owned);
        ALL_SITES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, site));
    }
    SITES.with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if let Some(v) = s.as_mut() {
                v.push(site);
            }
        }
    });
    RMW.with(|c| c.set(c.get() + 1));
    ALL.fetch_add(1, Ordering::Relaxed);
}

/// Counts so far: the calling thread's read-modify-writes (atomic RMWs
/// and `Arc` count changes), its `SeqCst` fences, and every thread's
/// read-modify-writes together.
pub fn counts() -> (u64, u64, u64) {
    (
        RMW.with(Cell::get),
        FENCE.with(Cell::get),
        ALL.load(Ordering::Relaxed),
    )
}

/// Links followed in the crate's intrusive lists, by every thread (each
/// read of a node's next link: a walk's step).
static LINK_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts one link followed (`crate::list`'s `next`).
#[inline(always)]
pub(crate) fn link_read() {
    LINK_READS.fetch_add(1, Ordering::Relaxed);
}

/// Links followed in the crate's intrusive lists so far, by every thread:
/// the nodes that walks (a take's reversal, a chunk's walk, a pop) visited.
pub fn link_reads() -> u64 {
    LINK_READS.load(Ordering::Relaxed)
}

pub(crate) fn fence(order: Ordering) {
    if order == Ordering::SeqCst {
        FENCE.with(|c| c.set(c.get() + 1));
    }
    std::sync::atomic::fence(order);
}

/// The methods every counting atomic has, on a wrapper whose field `0` is
/// the std atomic of values `$t`: RMWs count, loads and stores do not.
macro_rules! counted_methods {
    ($t:ty) => {
        #[inline(always)]
        pub(crate) fn load(&self, o: Ordering) -> $t {
            self.0.load(o)
        }
        #[inline(always)]
        pub(crate) fn store(&self, v: $t, o: Ordering) {
            self.0.store(v, o)
        }
        #[inline(always)]
        #[track_caller]
        pub(crate) fn swap(&self, v: $t, o: Ordering) -> $t {
            rmw();
            self.0.swap(v, o)
        }
        #[inline(always)]
        #[track_caller]
        pub(crate) fn compare_exchange(
            &self,
            a: $t,
            b: $t,
            s: Ordering,
            f: Ordering,
        ) -> Result<$t, $t> {
            rmw();
            self.0.compare_exchange(a, b, s, f)
        }
        #[inline(always)]
        #[track_caller]
        pub(crate) fn compare_exchange_weak(
            &self,
            a: $t,
            b: $t,
            s: Ordering,
            f: Ordering,
        ) -> Result<$t, $t> {
            rmw();
            self.0.compare_exchange_weak(a, b, s, f)
        }
        #[inline(always)]
        pub(crate) fn get_mut(&mut self) -> &mut $t {
            self.0.get_mut()
        }
        #[inline(always)]
        pub(crate) fn into_inner(self) -> $t {
            self.0.into_inner()
        }
        #[inline(always)]
        pub(crate) fn as_ptr(&self) -> *mut $t {
            self.0.as_ptr()
        }
    };
}

/// A counting integer (or bool) atomic, with the listed `fetch_*` RMWs.
macro_rules! counted_int {
    ($name:ident, $t:ty $(, $fetch:ident)*) => {
        #[derive(Debug, Default)]
        #[repr(transparent)]
        pub(crate) struct $name(std::sync::atomic::$name);

        #[allow(dead_code)]
        impl $name {
            pub(crate) const fn new(v: $t) -> Self {
                $name(std::sync::atomic::$name::new(v))
            }
            counted_methods!($t);
            $(
                #[inline(always)]
                #[track_caller]
                pub(crate) fn $fetch(&self, v: $t, o: Ordering) -> $t {
                    rmw();
                    self.0.$fetch(v, o)
                }
            )*
        }
    };
}

counted_int!(AtomicBool, bool);
counted_int!(AtomicU8, u8, fetch_add, fetch_sub, fetch_or, fetch_and);
counted_int!(AtomicU32, u32, fetch_add, fetch_sub, fetch_or, fetch_and);
counted_int!(AtomicU64, u64, fetch_add, fetch_sub, fetch_or, fetch_and);
counted_int!(
    AtomicUsize,
    usize,
    fetch_add,
    fetch_sub,
    fetch_or,
    fetch_and
);

/// `AtomicPtr` with counted RMWs.
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct AtomicPtr<T>(std::sync::atomic::AtomicPtr<T>);

#[allow(dead_code)]
impl<T> AtomicPtr<T> {
    pub(crate) const fn new(p: *mut T) -> Self {
        AtomicPtr(std::sync::atomic::AtomicPtr::new(p))
    }
    counted_methods!(*mut T);
}

/// `std::sync::Arc` with its count changes counted (clone and drop; `new`,
/// `into_raw` and `from_raw` change no count).
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct Arc<T: ?Sized>(std::mem::ManuallyDrop<std::sync::Arc<T>>);

#[allow(dead_code)]
impl<T> Arc<T> {
    pub(crate) fn new(v: T) -> Self {
        Arc(std::mem::ManuallyDrop::new(std::sync::Arc::new(v)))
    }
    pub(crate) fn into_raw(this: Self) -> *const T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: `this` is never dropped; the inner Arc moves out once.
        std::sync::Arc::into_raw(unsafe { std::ptr::read(&*this.0) })
    }
    /// # Safety
    /// As `std::sync::Arc::from_raw`.
    pub(crate) unsafe fn from_raw(p: *const T) -> Self {
        // SAFETY: per contract.
        Arc(std::mem::ManuallyDrop::new(unsafe {
            std::sync::Arc::from_raw(p)
        }))
    }
}

#[allow(dead_code)]
impl<T: ?Sized> Arc<T> {
    pub(crate) fn as_ptr(this: &Self) -> *const T {
        std::sync::Arc::as_ptr(&this.0)
    }
    pub(crate) fn ptr_eq(a: &Self, b: &Self) -> bool {
        std::sync::Arc::ptr_eq(&a.0, &b.0)
    }
    pub(crate) fn strong_count(this: &Self) -> usize {
        std::sync::Arc::strong_count(&this.0)
    }
}

impl<T: ?Sized> Clone for Arc<T> {
    #[track_caller]
    fn clone(&self) -> Self {
        rmw();
        Arc(self.0.clone())
    }
}

impl<T: ?Sized> Drop for Arc<T> {
    fn drop(&mut self) {
        rmw();
        // SAFETY: dropped once, here.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.0) }
    }
}

impl<T: ?Sized> std::ops::Deref for Arc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
