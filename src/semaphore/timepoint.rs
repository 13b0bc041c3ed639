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

use std::fmt;
use std::ptr::NonNull;

use crate::error::Error;
use crate::list::{DoubleLinks, SingleLinks};
use crate::pool::{BlockPool, BlockPoolConfig, RawBlock};
use crate::sync::UnsafeCell;

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
    value: u64,
    callback: TimepointFn,
    context: *const (),
    /// Whether the timepoint is in a semaphore's list; read and written
    /// only by the thread holding that semaphore's turn.
    pub(crate) linked: UnsafeCell<bool>,
    /// Block index when the timepoint came from a [`TimepointPool`].
    pool_index: u32,
}
crate::link!(
    /// A timepoint's place in its semaphore's list (or, once fired, in the
    /// signaller's local list of callbacks to run).
    pub(crate) TimepointLink: DoubleLinks<Timepoint> => links
);
crate::link!(
    /// A timepoint's place in its semaphore's inbox, from `register` until
    /// the turn's holder merges it into the list.
    pub(crate) TimepointInbox: SingleLinks<Timepoint> => inbox
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
        Timepoint {
            links: DoubleLinks::new(),
            inbox: SingleLinks::new(),
            value,
            callback,
            context,
            linked: UnsafeCell::new(false),
            pool_index: u32::MAX,
        }
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

/// Timepoints in block-pool memory: for owners (queues, devices) that
/// need timepoints outliving a stack frame without the global allocator.
#[derive(Debug)]
pub struct TimepointPool {
    pool: BlockPool,
}

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

    /// The underlying block pool (for `preallocate`, `capacity`).
    pub fn blocks(&self) -> &BlockPool {
        &self.pool
    }

    /// The underlying block pool, exclusively (for `count_free`, `trim`).
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
        let block = self.pool.acquire_raw()?;
        let tp = block.as_ptr().cast::<Timepoint>();
        let mut timepoint = Timepoint::new(value, callback, context);
        timepoint.pool_index = block.index();
        // SAFETY: the block is ours, sized and aligned for a `Timepoint`.
        unsafe { tp.as_ptr().write(timepoint) };
        Ok(tp)
    }

    /// Returns a pooled timepoint.
    ///
    /// # Safety
    /// `tp` came from this pool's `acquire`, is not registered, and is
    /// released once.
    pub unsafe fn release(&self, tp: NonNull<Timepoint>) {
        // SAFETY: valid per contract.
        let index = unsafe { tp.as_ref() }.pool_index;
        // SAFETY: the timepoint holds nothing that needs dropping beyond its
        // fields, dropped here once.
        unsafe { std::ptr::drop_in_place(tp.as_ptr()) };
        // SAFETY: `tp` is the start of block `index` of this pool.
        unsafe {
            self.pool
                .release_raw(RawBlock::from_parts(tp.cast(), index))
        };
    }
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert!(std::mem::size_of::<Timepoint>() <= 64);
