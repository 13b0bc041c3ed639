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
