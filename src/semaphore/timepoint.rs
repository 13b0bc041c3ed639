//! Timepoints: "call me when the semaphore reaches `value`, or fails".
//!
//! A [`Timepoint`] is an intrusive node the *caller* owns: embedded in a
//! queue action, taken from a [`TimepointPool`], or on the stack of a thread
//! that waits. Registering it never allocates. Its callback is a plain
//! function pointer plus a context pointer, so it needs no allocation either.
//!
//! # Contract
//! [`Semaphore::register`](crate::Semaphore::register) either answers at once
//! (already reached, or failed; the callback is *not* run) or links the
//! timepoint, after which exactly one of these happens:
//! - a `signal` reaching `value`, or a `fail`, unlinks it and runs the
//!   callback once, with no lock held (it may signal other semaphores);
//! - [`Semaphore::cancel`](crate::Semaphore::cancel) unlinks it first and
//!   returns `true`: the callback will never run.
//!
//! If `cancel` returns `false`, the callback has run or is about to: the
//! owner must let the callback finish with the timepoint before reusing or
//! freeing it. From the moment the callback starts, the timepoint belongs to
//! the callback (it may free it).
//!
//! `cancel` waits while another thread works on the semaphore's list (it
//! must unlink the timepoint before its memory can go). An
//! [abandonable](Timepoint::abandonable) timepoint, whose memory the
//! callback can free, is given up instead with
//! [`Semaphore::abandon`](crate::Semaphore::abandon), which never waits:
//! - `true`: the timepoint will never *fire*. It stays the semaphore's
//!   until the thread holding the list's turn unlinks it, which then runs
//!   the callback once more to hand the memory back: the callback sees
//!   [`is_abandoned`](Timepoint::is_abandoned) and must only free it.
//! - `false`: it fired or is firing (as `cancel`'s `false`). The callback
//!   may still be queued behind others on the signalling thread, which
//!   may be the caller's own: an owner must not wait for it there. The
//!   crate's own owners (host waits, `wait_async` futures) mark the
//!   timepoint's memory given up and let the callback free it if it has
//!   not finished yet.
//!
//! Exactly one of the two happens: a firing claims the timepoint with a
//! CAS, and so does `abandon`.

use std::fmt;
use std::ptr::NonNull;

use crate::error::Error;
use crate::list::{DoubleLinks, SingleLinks};
#[cfg(any(test, feature = "testing"))]
use crate::pool::{BlockPool, BlockPoolConfig};
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::UnsafeCell;

/// `Timepoint::claim`: a plain timepoint (only `cancel` ends it early).
const PLAIN: u8 = 0;
/// `Timepoint::claim`: abandonable, registered, neither fired nor abandoned.
const ARMED: u8 = 1;
/// `Timepoint::claim`: claimed by a firing.
const FIRED: u8 = 2;
/// `Timepoint::claim`: claimed by `abandon`.
const ABANDONED: u8 = 3;

/// What a timepoint runs when it fires: the timepoint itself and `Ok` when
/// the value was reached, or the semaphore's failure.
///
/// # Safety
/// Called once per firing, with a timepoint that is no longer linked and
/// that the callback now owns.
pub type TimepointFn = unsafe fn(timepoint: NonNull<Timepoint>, result: Result<(), Error>);

/// An intrusive "value reached" notification. See the [module docs](self).
pub struct Timepoint {
    pub(crate) links: DoubleLinks<Timepoint>,
    /// Its place in the semaphore's inbox of new registrations.
    pub(crate) inbox: SingleLinks<Timepoint>,
    /// Its place in the semaphore's stack of abandoned timepoints.
    pub(crate) removal: SingleLinks<Timepoint>,
    value: u64,
    callback: TimepointFn,
    context: *const (),
    /// Whether the timepoint is in a semaphore's list; read and written
    /// only by the thread holding that semaphore's turn.
    pub(crate) linked: UnsafeCell<bool>,
    /// `PLAIN`, or for an abandonable timepoint who ended it: `ARMED`
    /// (nobody yet), `FIRED` or `ABANDONED` (each set by a CAS from
    /// `ARMED`, so exactly one wins).
    claim: AtomicU8,
    /// Block index when the timepoint came from a [`TimepointPool`].
    pool_index: u32,
}
link!(
    /// A timepoint's place in its semaphore's list (or, once fired, in the
    /// signaller's local list of callbacks to run).
    pub(crate) TimepointLink: DoubleLinks<Timepoint> => links
);
link!(
    /// A timepoint's place in its semaphore's inbox, from `register` until
    /// the turn's holder merges it into the list.
    pub(crate) TimepointInbox: SingleLinks<Timepoint> => inbox
);
link!(
    /// An abandoned timepoint's place in its semaphore's stack of
    /// removals, from `abandon` until the turn's holder unlinks it.
    pub(crate) TimepointRemoval: SingleLinks<Timepoint> => removal
);

// SAFETY: the raw context pointer is the owner's business (its callback
// decides how it is used); everything else is plain data or guarded by the
// semaphore's lock.
unsafe impl Send for Timepoint {}
// SAFETY: shared access to the non-atomic fields is by the thread holding
// the semaphore's turn, or through the inbox's release/acquire hand-off.
unsafe impl Sync for Timepoint {}

impl fmt::Debug for Timepoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timepoint")
            .field("value", &self.value)
            .finish()
    }
}

impl Timepoint {
    /// A timepoint for `value` that runs `callback` with `context` available
    /// through [`context`](Self::context).
    pub fn new(value: u64, callback: TimepointFn, context: *const ()) -> Timepoint {
        Timepoint::with_claim(value, callback, context, PLAIN)
    }

    /// As [`new`](Self::new), for a timepoint that its owner gives up with
    /// [`Semaphore::abandon`](crate::Semaphore::abandon) (never waits)
    /// instead of [`cancel`](crate::Semaphore::cancel). Its callback runs
    /// exactly once either way: to fire it, or, once abandoned, to hand its
    /// memory back ([`is_abandoned`](Self::is_abandoned) tells which). One
    /// registration per timepoint.
    pub fn abandonable(value: u64, callback: TimepointFn, context: *const ()) -> Timepoint {
        Timepoint::with_claim(value, callback, context, ARMED)
    }

    fn with_claim(value: u64, callback: TimepointFn, context: *const (), claim: u8) -> Timepoint {
        Timepoint {
            links: DoubleLinks::new(),
            inbox: SingleLinks::new(),
            removal: SingleLinks::new(),
            value,
            callback,
            context,
            linked: UnsafeCell::new(false),
            claim: AtomicU8::new(claim),
            pool_index: u32::MAX,
        }
    }

    /// The timepoint, recording that it lives in block `index` of a pool
    /// (a [`TimepointPool`]'s, or the wait nodes').
    pub(crate) fn in_block(mut self, index: u32) -> Timepoint {
        self.pool_index = index;
        self
    }

    /// The pool block given to [`in_block`](Self::in_block).
    pub(crate) fn pool_index(&self) -> u32 {
        self.pool_index
    }

    /// For the callback of an abandonable timepoint: `true` when it runs
    /// to hand the memory back (the timepoint was abandoned, and never
    /// fires), `false` when it fires.
    pub fn is_abandoned(&self) -> bool {
        // Acquire: pairs with `abandon`'s CAS (the callback then frees what
        // the owner wrote before giving the timepoint up).
        self.claim.load(Ordering::Acquire) == ABANDONED
    }

    /// Claims the timepoint for a firing: `false` if it was abandoned (it
    /// must not fire). One load for a plain timepoint. Run by the thread
    /// holding the semaphore's turn as it unlinks the timepoint.
    pub(crate) fn claim_fire(&self) -> bool {
        // Relaxed load: `PLAIN` never changes.
        self.claim.load(Ordering::Relaxed) == PLAIN
            // AcqRel: pairs with `claim_abandon`'s CAS: exactly one of the
            // two wins; the loser's owner then acquires the winner's writes.
            || self
                .claim
                .compare_exchange(ARMED, FIRED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Claims the timepoint for `abandon`: `false` if it fired (or is
    /// firing), or is not abandonable.
    pub(crate) fn claim_abandon(&self) -> bool {
        // AcqRel: pairs with `claim_fire`'s CAS (one wins), and releases the
        // owner's writes to the callback's Acquire load in `is_abandoned`.
        self.claim
            .compare_exchange(ARMED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether this is a plain timepoint, not an abandonable one (for
    /// debug checks).
    pub(crate) fn is_plain(&self) -> bool {
        self.claim.load(Ordering::Relaxed) == PLAIN
    }

    /// The value this timepoint waits for.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The context pointer given at creation.
    pub fn context(&self) -> *const () {
        self.context
    }

    /// Runs the callback.
    ///
    /// # Safety
    /// `tp` is valid, unlinked, and owned by the caller, who gives it up.
    pub(crate) unsafe fn fire(tp: NonNull<Timepoint>, result: Result<(), Error>) {
        // SAFETY: valid per contract; read before handing it over.
        let callback = unsafe { tp.as_ref() }.callback;
        // SAFETY: the callback's contract is exactly ours.
        unsafe { callback(tp, result) }
    }
}

#[cfg(any(test, feature = "testing"))]
/// Timepoints in block-pool memory: for owners (queues, devices) that
/// need timepoints outliving a stack frame without the global allocator.
#[derive(Debug)]
pub struct TimepointPool {
    pool: BlockPool,
}

#[cfg(any(test, feature = "testing"))]
impl TimepointPool {
    /// An empty pool of at most `max` timepoints (`None`: no cap).
    pub fn new(max: Option<u32>) -> Result<TimepointPool, Error> {
        Ok(TimepointPool {
            pool: BlockPool::with_config(BlockPoolConfig {
                block_size: std::mem::size_of::<Timepoint>(),
                align: std::mem::align_of::<Timepoint>().max(16),
                first_chunk_blocks: 64,
                max_blocks: max,
            })?,
        })
    }

    /// Timepoints the pool holds now (in use or free).
    pub fn capacity(&self) -> usize {
        self.pool.capacity()
    }

    /// Grows the pool to hold at least `count` timepoints now, so that
    /// acquiring up to that many allocates nothing later.
    ///
    /// Errors: `ResourceExhausted` past the pool's cap.
    pub fn preallocate(&self, count: usize) -> Result<(), Error> {
        self.pool.preallocate(count)
    }

    /// The underlying block pool (feature `testing`: the pool types are
    /// public only there).
    #[cfg(feature = "testing")]
    pub fn blocks(&self) -> &BlockPool {
        &self.pool
    }

    /// The underlying block pool, exclusively (feature `testing`: for
    /// `count_free`, `trim`).
    #[cfg(feature = "testing")]
    pub fn blocks_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    /// A pooled timepoint; give it back with [`release`](Self::release)
    /// (typically from its own callback).
    ///
    /// Errors: `ResourceExhausted` at the pool's cap.
    pub fn acquire(
        &self,
        value: u64,
        callback: TimepointFn,
        context: *const (),
    ) -> Result<NonNull<Timepoint>, Error> {
        self.pool
            .acquire_value(|index| Timepoint::new(value, callback, context).in_block(index))
    }

    /// Returns a pooled timepoint.
    ///
    /// # Safety
    /// `tp` came from this pool's `acquire`, is not registered, and is
    /// released once.
    pub unsafe fn release(&self, tp: NonNull<Timepoint>) {
        // SAFETY: valid per contract.
        let index = unsafe { tp.as_ref() }.pool_index;
        // SAFETY: from this pool's `acquire_value` with `index`, released
        // once.
        unsafe { self.pool.release_value(tp, index) };
    }
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert!(std::mem::size_of::<Timepoint>() <= 64);
