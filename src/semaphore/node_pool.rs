//! The pool that host waits and `wait_async` futures take their
//! timepoints from.
//!
//! Their timepoints are [abandonable](super::Timepoint::abandonable): a
//! wait that ends first (a timeout, a dropped future, another semaphore's
//! failure) gives its timepoint up with `Semaphore::abandon`, which never
//! waits, and the semaphore hands the memory back later through the
//! timepoint's callback. So the memory cannot be the waiter's stack frame
//! or the future itself: it comes from this process-wide block pool
//! (lock-free; made with room for 32 nodes when the process makes its
//! first semaphore; it grows when every block is in use and never gives
//! memory back), so a wait allocates nothing unless the process has more
//! registered waits at once than ever before.

use std::ptr::NonNull;

use crate::error::Error;
use crate::pool::{BlockPool, BlockPoolConfig};
use crate::sync::atomic::{AtomicU8, Ordering};

/// Bytes of one block: room for the largest node (a future's).
#[cfg(not(fenceline_loom))]
pub(crate) const BLOCK: usize = 128;
/// Under the model checker, whose atomics and cells are much larger.
#[cfg(fenceline_loom)]
pub(crate) const BLOCK: usize = 2048;
/// Alignment of every block (a cache line).
const ALIGN: usize = 64;

fn config() -> BlockPoolConfig {
    BlockPoolConfig {
        block_size: BLOCK,
        align: ALIGN,
        first_chunk_blocks: FIRST as u32,
        max_blocks: None,
    }
}

/// The pool, made with its first chunk (32 nodes) the first time.
fn make() -> BlockPool {
    let pool = BlockPool::with_config(config()).expect("a valid pool shape");
    // Out of memory here only leaves the first wait to grow the pool.
    let _ = pool.preallocate(FIRST);
    pool
}

/// Nodes the pool starts with.
const FIRST: usize = 32;

#[cfg(not(fenceline_loom))]
fn pool() -> &'static BlockPool {
    static POOL: std::sync::OnceLock<BlockPool> = std::sync::OnceLock::new();
    POOL.get_or_init(make)
}

#[cfg(fenceline_loom)]
fn pool() -> &'static BlockPool {
    // One pool per modelled execution (loom resets its statics).
    loom::lazy_static! {
        static ref POOL: BlockPool = make();
    }
    &POOL
}

/// Makes the pool if it is not made yet: `Semaphore::new` calls this, so
/// that the first wait that parks (maybe long after, in a loop that must
/// not allocate) finds the pool's first chunk there.
pub(crate) fn warm() {
    let _ = pool();
}

/// A node holding `make(index)`, where `index` is what [`release`] needs
/// back (the nodes keep it in their timepoint: `Timepoint::in_block`).
///
/// # Errors
/// `ResourceExhausted` if the pool had to grow and memory ran out.
pub(crate) fn acquire<T>(make: impl FnOnce(u32) -> T) -> Result<NonNull<T>, Error> {
    pool().acquire_value(make)
}

/// Drops the node and gives its block back.
///
/// # Safety
/// `node` came from [`acquire`], which gave `index`; nothing uses it after
/// this (it is released once).
pub(crate) unsafe fn release<T>(node: NonNull<T>, index: u32) {
    // SAFETY: forwarded contract.
    unsafe { pool().release_value(node, index) };
}

/// `LaterFrees`: the timepoint's callback is done with the node.
const FIRED: u8 = 1;
/// `LaterFrees`: the node's owner (a future, a host wait) gave it up.
const DROPPED: u8 = 2;

/// Who gives a fired node back: its callback and its owner each set a
/// mark when they are done with it, and whichever sets its mark second
/// (seeing the other's) hands the node back to the pool. So an owner that
/// ends while the semaphore's firing pass holds its timepoint (claimed,
/// its callback not yet run, maybe queued behind other callbacks on the
/// owner's own thread) returns at once instead of waiting for the
/// callback, and the callback never touches a node its owner freed.
///
/// Both marks are read-modify-writes with acquire-release ordering: the
/// second acquires the first's release, so whoever frees the node sees
/// every write the other made to it (the callback's outcome; the owner's
/// last use). Neither side touches the node after setting its mark unless
/// it saw the other's.
pub(crate) struct LaterFrees(AtomicU8);

impl LaterFrees {
    pub(crate) fn new() -> LaterFrees {
        LaterFrees(AtomicU8::new(0))
    }

    /// The callback's last step on the node: `true` if the owner gave it
    /// up first, and the caller must now hand it back; `false`: the owner
    /// will (the caller must not touch the node again).
    #[must_use = "`true` means the node is the caller's to give back"]
    pub(crate) fn fire(&self) -> bool {
        // AcqRel: pairs with `drop_owner`'s RMW (either is second and
        // acquires the other) and releases the outcome to `fired`.
        self.0.fetch_or(FIRED, Ordering::AcqRel) & DROPPED != 0
    }

    /// The owner gives the node up without waiting: `true` if the
    /// callback was done already, and the caller must now hand it back;
    /// `false`: the callback will (the caller must not touch the node
    /// again).
    #[must_use = "`true` means the node is the caller's to give back"]
    pub(crate) fn drop_owner(&self) -> bool {
        // AcqRel: pairs with `fire`'s RMW, both ways (see the type's docs).
        self.0.fetch_or(DROPPED, Ordering::AcqRel) & FIRED != 0
    }

    /// Whether the callback is done (for the owner, which has not dropped
    /// the node): acquires what it wrote before its mark.
    pub(crate) fn fired(&self) -> bool {
        // Acquire: pairs with `fire`'s AcqRel RMW.
        self.0.load(Ordering::Acquire) & FIRED != 0
    }

    /// As [`fired`](Self::fired), with a read-modify-write: it reads the
    /// latest mark in the word's order, which a parked host wait needs
    /// after a wake-up (the model checker's unpark orders no memory).
    pub(crate) fn fired_latest(&self) -> bool {
        // AcqRel: the Acquire pairs with `fire`'s AcqRel RMW; the Release
        // half publishes nothing anyone needs (no one reads `0` for data).
        self.0.fetch_or(0, Ordering::AcqRel) & FIRED != 0
    }
}
