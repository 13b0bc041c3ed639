//! Where a graph's task blocks come from, and how unsubmitted tasks go
//! back there.

use super::*;

/// Where a graph's task blocks come from. (The own cache stays inline:
/// boxing it would allocate per graph.)
#[allow(clippy::large_enum_variant)]
pub(super) enum GraphBlocks<'e> {
    /// A cache of its own, filled from the pool in batches and flushed
    /// back when the graph goes (a graph built by a user).
    Own(BlockCache<&'e BlockPool>),
    /// A cache lent for the graph's life: the worker's the graph is built
    /// on, or its queue issuer's, so a submission's blocks come from where
    /// the last one's went (see [`Graph::with_cache`]).
    Lent(LentCache),
}

/// A lent cache's pointer.
pub(super) struct LentCache(pub(super) NonNull<BlockCache<TaskPool>>);

// SAFETY: a `Graph` is `Send` (a user's graph may be built on one thread
// and submitted on another), but a graph with a lent cache never leaves
// the thread that lent it (`with_cache`'s contract: the crate builds one,
// fills and submits or drops it inside one call), so the cache is never
// touched from another thread.
unsafe impl Send for LentCache {}

impl BlockSource for GraphBlocks<'_> {
    #[inline]
    fn acquire(&mut self) -> Result<RawBlock, Error> {
        match self {
            GraphBlocks::Own(c) => c.acquire(),
            // SAFETY: a lent cache outlives the graph and nothing else
            // borrows it now (`with_cache`'s contract); this borrow ends
            // here.
            GraphBlocks::Lent(c) => unsafe { c.0.as_mut() }.acquire(),
        }
    }

    #[inline]
    unsafe fn release(&mut self, block: RawBlock) {
        match self {
            // SAFETY: forwarded contract.
            GraphBlocks::Own(c) => unsafe { c.release(block) },
            GraphBlocks::Lent(c) => {
                // SAFETY: a lent cache outlives the graph and nothing else
                // borrows it now (`with_cache`'s contract); this borrow ends
                // here.
                let cache = unsafe { c.0.as_mut() };
                // SAFETY: forwarded contract.
                unsafe { cache.release(block) }
            }
        }
    }
}

/// Frees the unsubmitted tasks of `chunks` (ready chunks in the
/// injector's form) into `cache`, without running them.
///
/// # Safety
/// The caller owns every task of the chunks, none submitted, all from
/// `cache`'s pool; no borrow of the cache is held across the call.
pub(super) unsafe fn free_chunks<C: BlockSource + ?Sized>(
    cache: &mut C,
    mut chunks: SList<ForkLink>,
) {
    while let Some(head) = chunks.pop_front().map(Handle::into_raw) {
        // SAFETY: a chunk's chain of tasks we own, per contract.
        let mut chunk = unsafe { SList::<QueueLink>::from_chain(head) };
        while let Some(task) = chunk.pop_front().map(Handle::into_raw) {
            // SAFETY: ours, unsubmitted: free it as `Graph::drop` does.
            unsafe { free_unsubmitted(cache, task) };
        }
    }
}

/// Drops an unsubmitted task's payload and gives its block back.
///
/// # Safety
/// The caller owns `task` (never handed to the executor), from `cache`'s
/// pool; no borrow of the cache is held across the call.
pub(super) unsafe fn free_unsubmitted<C: BlockSource + ?Sized>(cache: &mut C, task: NonNull<Task>) {
    // A capture whose `Drop` panicked has no task to fail (nothing ran):
    // the error is dropped, and every other task is still freed. No borrow
    // of the cache is held while the captures drop (they may build and
    // drop graphs that borrow a lent cache themselves).
    // SAFETY: owned per contract, the payload live until here.
    let _ = unsafe { drop_payload(task) };
    // Its edge blocks (`precede`), from the same pool; the successors are
    // freed on their own.
    // SAFETY: owned per contract.
    let successors = unsafe { task.as_ref() }.successors.get();
    // SAFETY: per contract; given back once, here.
    unsafe { successors.drain(cache, |_| {}) };
    // SAFETY: the payload is gone; the block came from this cache's pool.
    unsafe { release_block(cache, task) };
}
