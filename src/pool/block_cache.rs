//! `BlockCache`: a per-owner stash of free blocks in front of a
//! [`BlockPool`], so a worker's acquire and release touch no shared atomic
//! while the stash lasts.

use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Deref;

use super::{BlockPool, RawBlock};
use crate::error::Error;

/// A single owner's stash of free blocks in front of a shared [`BlockPool`]
/// (a "magazine", as in slab allocators): `acquire` and `release` touch no
/// atomic while the stash has blocks (or room), and move half a stash at a
/// time to or from the pool with **one** CAS. For owners that acquire and
/// release in a loop: an executor worker, a queue's issuer.
///
/// `P` is anything that derefs to the pool (`&BlockPool`,
/// `Arc<BlockPool>`). Blocks in a stash are not on the pool's free list
/// (`count_free` does not see them); dropping the cache, or
/// [`flush`](Self::flush), returns them.
///
/// ```
/// use fenceline::testing::pool::{BlockCache, BlockPool};
/// let pool = BlockPool::new(64, 64)?;
/// let mut cache: BlockCache<&BlockPool> = BlockCache::new(&pool);
/// let block = cache.acquire()?;
/// // SAFETY: `block` came from `cache`, whose pool is `pool`.
/// unsafe { cache.release(block) };
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct BlockCache<P: Deref<Target = BlockPool>, const N: usize = 32> {
    pool: P,
    len: usize,
    blocks: [MaybeUninit<RawBlock>; N],
}

/// How many acquires ahead the stash starts fetching a block for writing:
/// a block freed on another core (a task retired by another worker) comes
/// over while the caller fills the ones before it.
const ACQUIRE_AHEAD: usize = 3;

impl<P: Deref<Target = BlockPool>, const N: usize> fmt::Debug for BlockCache<P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache")
            .field("stashed", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

impl<P: Deref<Target = BlockPool>, const N: usize> BlockCache<P, N> {
    const HALF: usize = {
        assert!(N >= 2, "a BlockCache holds at least 2 blocks");
        N / 2
    };

    /// An empty cache in front of `pool`.
    pub fn new(pool: P) -> Self {
        let _ = Self::HALF;
        BlockCache {
            pool,
            len: 0,
            blocks: [const { MaybeUninit::uninit() }; N],
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// The pool behind the cache.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    #[cfg(any(test, feature = "testing"))]
    /// Blocks stashed now.
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(any(test, feature = "testing"))]
    /// Whether the stash is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A block from the stash, refilling half of it from the pool (one CAS)
    /// when it is empty, growing the pool when that is empty too.
    ///
    /// Errors: `ResourceExhausted` as for [`BlockPool::acquire`].
    #[inline]
    pub fn acquire(&mut self) -> Result<RawBlock, Error> {
        if self.len == 0 {
            return self.refill();
        }
        self.len -= 1;
        if let Some(ahead) = self.len.checked_sub(ACQUIRE_AHEAD) {
            // SAFETY: slots below `len` hold blocks.
            let p = unsafe { self.blocks[ahead].assume_init_ref() }.ptr.as_ptr();
            // Its first two lines (a task's header and payload start; an
            // action's header and payload).
            crate::prefetch::write_line(p);
            crate::prefetch::write_line(p.wrapping_add(crate::prefetch::CACHE_LINE));
        }
        // SAFETY: slots below the old `len` hold blocks; this one is moved
        // out and the slot counts as empty from now on.
        Ok(unsafe { self.blocks[self.len].assume_init_read() })
    }

    #[cold]
    fn refill(&mut self) -> Result<RawBlock, Error> {
        debug_assert_eq!(self.len, 0, "a refill of an empty stash");
        // The chain fills the stash from its first slot (all empty); its
        // last block is the one returned.
        let count = self.pool.pop_chain_into(&mut self.blocks[..=Self::HALF]);
        if count == 0 {
            return self.pool.acquire_raw();
        }
        self.len = count - 1;
        // SAFETY: `pop_chain_into` wrote slots `0..count` with the blocks it
        // popped, now ours; the last is moved out, the rest are the stash.
        Ok(unsafe { self.blocks[count - 1].assume_init_read() })
    }

    /// Puts a block in the stash, first returning half of a full stash to
    /// the pool (one CAS).
    ///
    /// # Safety
    /// `block` was acquired from this cache's pool (through any cache or the
    /// pool itself) and is released once.
    #[inline]
    pub unsafe fn release(&mut self, block: RawBlock) {
        if self.len == N {
            self.spill(Self::HALF);
        }
        self.blocks[self.len].write(block);
        self.len += 1;
    }

    /// Returns the top `count` stashed blocks to the pool in one push.
    fn spill(&mut self, count: usize) {
        let from = self.len - count;
        self.len = from;
        // SAFETY: slots `from..from + count` held blocks of this pool
        // (release's contract); `len` no longer counts them.
        unsafe { release_slots(&self.blocks[from..from + count], &self.pool) };
    }

    /// Returns every stashed block to `pool`, the cache's own pool reached
    /// another way (for an owner whose cache points into itself, dropping
    /// it: the cache's pointer may not be used then).
    ///
    /// # Safety
    /// `pool` is this cache's pool.
    pub(crate) unsafe fn flush_to(&mut self, pool: &BlockPool) {
        let count = std::mem::take(&mut self.len);
        // SAFETY: slots below the old `len` held blocks of this pool, which
        // is `pool` per contract; `len` is 0 now.
        unsafe { release_slots(&self.blocks[..count], pool) };
    }

    /// Returns every stashed block to the pool (one CAS).
    pub fn flush(&mut self) {
        if self.len > 0 {
            self.spill(self.len);
        }
    }
}

/// Where task blocks come from and go back to: a [`BlockCache`], or a
/// graph's choice of one (its own, or one lent to it).
pub(crate) trait BlockSource {
    /// A block (see [`BlockCache::acquire`]).
    fn acquire(&mut self) -> Result<RawBlock, Error>;
    /// Takes a block back (see [`BlockCache::release`]).
    ///
    /// # Safety
    /// As [`BlockCache::release`]: `block` came from this source's pool and
    /// is released once.
    unsafe fn release(&mut self, block: RawBlock);
}

impl<P: Deref<Target = BlockPool>, const N: usize> BlockSource for BlockCache<P, N> {
    #[inline]
    fn acquire(&mut self) -> Result<RawBlock, Error> {
        BlockCache::acquire(self)
    }

    #[inline]
    unsafe fn release(&mut self, block: RawBlock) {
        // SAFETY: forwarded contract.
        unsafe { BlockCache::release(self, block) }
    }
}

/// The pool itself, with no stash (one CAS per acquire and per release).
impl BlockSource for &BlockPool {
    #[inline]
    fn acquire(&mut self) -> Result<RawBlock, Error> {
        self.acquire_raw()
    }

    #[inline]
    unsafe fn release(&mut self, block: RawBlock) {
        // SAFETY: forwarded contract.
        unsafe { self.release_raw(block) }
    }
}

impl<P: Deref<Target = BlockPool>, const N: usize> Drop for BlockCache<P, N> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Moves the blocks out of `slots` and returns them to `pool` in one push.
///
/// # Safety
/// Every slot holds a block of `pool` that its cache no longer counts, so
/// each is moved out (and released) exactly once.
unsafe fn release_slots(slots: &[MaybeUninit<RawBlock>], pool: &BlockPool) {
    // SAFETY: per contract.
    let blocks = slots.iter().map(|slot| unsafe { slot.assume_init_read() });
    // SAFETY: per contract: this pool's blocks, released once.
    unsafe { pool.release_raw_all(blocks) };
}
