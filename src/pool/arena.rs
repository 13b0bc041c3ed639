//! `Arena`: bump allocation inside [`BlockPool`] blocks, for memory owned by
//! one recorder (a command buffer) and released all at once.
//!
//! Each block the arena takes starts with a small header holding the block
//! taken before it, so the blocks form a chain inside their own memory and
//! the arena itself is four words. An allocation that cannot fit in a fresh
//! block goes to the global allocator on a side list (also intrusive: a
//! header in front of the allocation). [`Arena::reset`] gives every pool
//! block back with one CAS on the pool's free list and frees the side list.

use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::mem;
use std::ptr::{self, NonNull};

use super::block_pool::{BlockPool, RawBlock};
use crate::error::{Error, ErrorKind};
use crate::sync::Arc;

/// Written at the start of every pool block the arena holds.
struct BlockHeader {
    /// The block taken before this one (the chain ends at `None`).
    prev: Option<RawBlock>,
}

/// Written at the start of every oversized allocation.
struct OversizedHeader {
    next: *mut OversizedHeader,
    /// Layout of the whole allocation (header included), for `dealloc`.
    layout: Layout,
}

const BLOCK_HEADER: usize = mem::size_of::<BlockHeader>();

/// Bytes to add to `addr` to reach a multiple of `align` (a power of two).
#[inline]
fn pad_to(addr: usize, align: usize) -> usize {
    addr.wrapping_neg() & (align - 1)
}

/// Bump allocator over blocks of a shared [`BlockPool`].
///
/// Single owner (`Send`, not `Sync`). Allocations live until
/// [`reset`](Arena::reset) or drop; values placed in it are never dropped.
///
/// ```
/// use std::sync::Arc;
/// use fenceline::pool::{Arena, BlockPool};
/// let pool = Arc::new(BlockPool::new(4096, 64)?);
/// let mut arena = Arena::new(pool.clone())?;
/// let xs = arena.alloc_copy(&[1u32, 2, 3])?;
/// xs[0] = 7;
/// assert_eq!(xs, &[7, 2, 3]);
/// arena.reset(); // the block goes back to `pool`
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct Arena {
    pool: Arc<BlockPool>,
    /// Next free byte of the current block (null: no block yet).
    cur: Cell<*mut u8>,
    /// One past the current block.
    end: Cell<*mut u8>,
    /// The current block; its header links the earlier ones.
    blocks: Cell<Option<RawBlock>>,
    block_count: Cell<usize>,
    oversized: Cell<*mut OversizedHeader>,
    oversized_count: Cell<usize>,
}

// SAFETY: the arena exclusively owns its blocks and oversized allocations;
// the pool is `Sync`. `Cell` keeps it `!Sync`.
unsafe impl Send for Arena {}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("blocks", &self.block_count.get())
            .field("oversized", &self.oversized_count.get())
            .finish()
    }
}

impl Arena {
    /// An empty arena drawing blocks from `pool`. Takes nothing from the pool
    /// until the first allocation.
    ///
    /// Errors: `InvalidArgument` if the pool's blocks are too small to hold
    /// the arena's 16-byte block header plus one byte, or are aligned below 8.
    pub fn new(pool: Arc<BlockPool>) -> Result<Arena, Error> {
        if pool.block_size() <= BLOCK_HEADER || pool.block_align() < mem::align_of::<BlockHeader>()
        {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "arena needs pool blocks over {BLOCK_HEADER} bytes aligned to at least {}; got {} bytes aligned to {}",
                    mem::align_of::<BlockHeader>(),
                    pool.block_size(),
                    pool.block_align()
                ),
            ));
        }
        Ok(Arena {
            pool,
            cur: Cell::new(ptr::null_mut()),
            end: Cell::new(ptr::null_mut()),
            blocks: Cell::new(None),
            block_count: Cell::new(0),
            oversized: Cell::new(ptr::null_mut()),
            oversized_count: Cell::new(0),
        })
    }

    /// The pool the arena draws from.
    pub fn pool(&self) -> &Arc<BlockPool> {
        &self.pool
    }

    /// Pool blocks held now.
    pub fn block_count(&self) -> usize {
        self.block_count.get()
    }

    /// Oversized allocations (from the global allocator) held now.
    pub fn oversized_count(&self) -> usize {
        self.oversized_count.get()
    }

    /// Whether `layout` fits in a fresh block whatever the block's address.
    fn fits_in_fresh_block(&self, layout: Layout) -> bool {
        let block = self.pool.block_size();
        let worst_start = if layout.align() <= self.pool.block_align() {
            // The block start is aligned to `align`, so is the header end
            // rounded up to `align`.
            BLOCK_HEADER.next_multiple_of(layout.align())
        } else {
            BLOCK_HEADER + layout.align() - 1
        };
        worst_start
            .checked_add(layout.size())
            .is_some_and(|end| end <= block)
    }

    /// Allocates `layout.size()` bytes aligned to `layout.align()` (any power
    /// of two). The memory is uninitialized and valid until `reset`/drop.
    /// A zero-size layout returns a dangling, aligned pointer and uses
    /// nothing.
    ///
    /// Errors: `ResourceExhausted` if the pool is at its cap or memory ran out.
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, Error> {
        if layout.size() == 0 {
            // An address equal to the alignment is non-null and aligned; it
            // carries no provenance, which a zero-size access does not need.
            // SAFETY: a layout's alignment is a power of two, never zero.
            return Ok(unsafe {
                NonNull::new_unchecked(ptr::without_provenance_mut(layout.align()))
            });
        }
        let cur = self.cur.get();
        if !cur.is_null() {
            let pad = pad_to(cur as usize, layout.align());
            let room = self.end.get() as usize - cur as usize;
            if pad.checked_add(layout.size()).is_some_and(|n| n <= room) {
                // SAFETY: `pad + size <= room`, so both stay inside the block.
                let start = unsafe { cur.add(pad) };
                // SAFETY: as above.
                self.cur.set(unsafe { start.add(layout.size()) });
                // SAFETY: `start` is derived from a non-null block pointer.
                return Ok(unsafe { NonNull::new_unchecked(start) });
            }
        }
        if self.fits_in_fresh_block(layout) {
            self.alloc_in_new_block(layout)
        } else {
            self.alloc_oversized(layout)
        }
    }

    fn alloc_in_new_block(&self, layout: Layout) -> Result<NonNull<u8>, Error> {
        let block = self.pool.acquire_raw()?;
        let base = block.as_ptr().as_ptr();
        // SAFETY: the block is ours, at least BLOCK_HEADER bytes long and
        // aligned for the header (checked in `new`).
        unsafe {
            base.cast::<BlockHeader>().write(BlockHeader {
                prev: self.blocks.take(),
            })
        };
        self.blocks.set(Some(block));
        self.block_count.set(self.block_count.get() + 1);
        // SAFETY: the header fits in the block.
        let data = unsafe { base.add(BLOCK_HEADER) };
        let pad = pad_to(data as usize, layout.align());
        // SAFETY: `fits_in_fresh_block` bounds `HEADER + pad + size` by the
        // block size, so these stay inside the block.
        let start = unsafe { data.add(pad) };
        // SAFETY: as above.
        unsafe {
            self.cur.set(start.add(layout.size()));
            self.end.set(base.add(self.pool.block_size()));
        }
        // SAFETY: derived from the non-null block pointer.
        Ok(unsafe { NonNull::new_unchecked(start) })
    }

    fn alloc_oversized(&self, layout: Layout) -> Result<NonNull<u8>, Error> {
        let too_big = || {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "arena allocation of {} bytes aligned to {} is too large",
                    layout.size(),
                    layout.align()
                ),
            )
        };
        let header = mem::size_of::<OversizedHeader>();
        let align = layout.align().max(mem::align_of::<OversizedHeader>());
        let offset = header.next_multiple_of(layout.align());
        let total = offset.checked_add(layout.size()).ok_or_else(too_big)?;
        let whole = Layout::from_size_align(total, align).map_err(|_| too_big())?;
        // SAFETY: `whole` has a non-zero size (it includes the header).
        let base = unsafe { std::alloc::alloc(whole) };
        if base.is_null() {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!("out of memory for an arena allocation of {total} bytes"),
            ));
        }
        // SAFETY: `base` is aligned to at least the header's alignment and the
        // allocation starts with room for the header.
        unsafe {
            base.cast::<OversizedHeader>().write(OversizedHeader {
                next: self.oversized.get(),
                layout: whole,
            })
        };
        self.oversized.set(base.cast());
        self.oversized_count.set(self.oversized_count.get() + 1);
        // SAFETY: `offset + size == total`, inside the allocation; `offset`
        // is a multiple of `align` and `base` is aligned to it.
        Ok(unsafe { NonNull::new_unchecked(base.add(offset)) })
    }

    /// Places `value` in the arena. Its destructor will never run.
    // Each call returns fresh memory no other reference points to, so many
    // `&mut` from one `&self` never alias (bumpalo's reasoning too).
    #[allow(clippy::mut_from_ref)]
    pub fn alloc_value<T>(&self, value: T) -> Result<&mut T, Error> {
        let p = self.alloc(Layout::new::<T>())?.cast::<T>();
        // SAFETY: `p` is fresh, aligned and sized for `T`, and no other
        // reference to it exists until `reset` (which takes `&mut self`).
        unsafe {
            p.as_ptr().write(value);
            Ok(&mut *p.as_ptr())
        }
    }

    /// Copies `src` into the arena.
    #[allow(clippy::mut_from_ref)] // see `alloc_value`
    pub fn alloc_copy<T: Copy>(&self, src: &[T]) -> Result<&mut [T], Error> {
        let layout = Layout::for_value(src);
        let p = self.alloc(layout)?.cast::<T>();
        // SAFETY: `p` is fresh, aligned and sized for `src.len()` values of T
        // (or dangling and aligned for an empty slice), and unaliased until
        // `reset`.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len());
            Ok(std::slice::from_raw_parts_mut(p.as_ptr(), src.len()))
        }
    }

    /// Returns every block to the pool (one CAS on its free list) and frees
    /// the oversized allocations. Earlier allocations are gone; the arena can
    /// be used again.
    pub fn reset(&mut self) {
        let chain = BlockChain {
            next: self.blocks.take(),
        };
        // SAFETY: every block of the chain was acquired from `self.pool` and
        // is released once; `&mut self` ends every borrow of their memory.
        unsafe { self.pool.release_raw_all(chain) };
        self.block_count.set(0);
        self.cur.set(ptr::null_mut());
        self.end.set(ptr::null_mut());
        let mut node = self.oversized.replace(ptr::null_mut());
        while !node.is_null() {
            // SAFETY: `node` heads an allocation we made in `alloc_oversized`
            // with its header written; we free it once.
            unsafe {
                let OversizedHeader { next, layout } = node.read();
                std::alloc::dealloc(node.cast(), layout);
                node = next;
            }
        }
        self.oversized_count.set(0);
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.reset();
    }
}

/// Walks the arena's block chain, newest first, reading each block's header
/// before yielding the block.
struct BlockChain {
    next: Option<RawBlock>,
}

impl Iterator for BlockChain {
    type Item = RawBlock;

    fn next(&mut self) -> Option<RawBlock> {
        let block = self.next.take()?;
        // SAFETY: every block in the chain starts with a header written in
        // `alloc_in_new_block`; we still own the block while reading it.
        self.next = unsafe { block.as_ptr().cast::<BlockHeader>().as_ptr().read().prev };
        Some(block)
    }
}

static_assertions::assert_impl_all!(Arena: Send);
static_assertions::assert_not_impl_any!(Arena: Sync);
static_assertions::const_assert_eq!(BLOCK_HEADER, 16);

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;
    use crate::pool::BlockPoolConfig;

    fn arena(block_size: usize, align: usize) -> Arena {
        let pool = BlockPool::with_config(BlockPoolConfig {
            block_size,
            align,
            first_chunk_blocks: 2,
            max_blocks: None,
        })
        .unwrap();
        Arena::new(Arc::new(pool)).unwrap()
    }

    /// A pool of at most `blocks` blocks of `block_size` bytes, all in its
    /// first chunk.
    fn capped_pool(block_size: usize, blocks: u32) -> Arc<BlockPool> {
        let config = BlockPoolConfig {
            block_size,
            align: 16,
            first_chunk_blocks: blocks,
            max_blocks: Some(blocks),
        };
        Arc::new(BlockPool::with_config(config).unwrap())
    }

    fn addr(p: NonNull<u8>) -> usize {
        p.as_ptr() as usize
    }

    #[test]
    fn rejects_pools_too_small_for_the_header() {
        let pool = Arc::new(BlockPool::new(16, 16).unwrap());
        assert_eq!(
            Arena::new(pool).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let pool = Arc::new(BlockPool::new(64, 4).unwrap());
        assert_eq!(
            Arena::new(pool).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn alignment_below_and_above_natural() {
        let a = arena(4096, 64);
        for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 256, 1024] {
            for size in [1usize, 3, 8, 13] {
                let p = a
                    .alloc(Layout::from_size_align(size, align).unwrap())
                    .unwrap();
                assert_eq!(addr(p) % align, 0, "size {size} align {align}");
            }
        }
        // Over-aligned relative to the block alignment still fits in blocks.
        assert_eq!(a.oversized_count(), 0);
        // Alignment larger than a block: placed in the current block if an
        // aligned spot happens to be there, else oversized; aligned either way.
        let p = a.alloc(Layout::from_size_align(8, 8192).unwrap()).unwrap();
        assert_eq!(addr(p) % 8192, 0);
        assert!(a.oversized_count() <= 1);
        // Larger than a block and over-aligned: always oversized.
        let before = a.oversized_count();
        let p = a
            .alloc(Layout::from_size_align(5000, 8192).unwrap())
            .unwrap();
        assert_eq!(addr(p) % 8192, 0);
        assert_eq!(a.oversized_count(), before + 1);
    }

    #[test]
    fn consecutive_allocations_bump_and_do_not_overlap() {
        let a = arena(256, 16);
        let x = a.alloc(Layout::from_size_align(10, 1).unwrap()).unwrap();
        let y = a.alloc(Layout::from_size_align(4, 4).unwrap()).unwrap();
        assert!(addr(y) >= addr(x) + 10);
        assert!(addr(y) - (addr(x) + 10) < 4, "padding only to alignment");
        assert_eq!(a.block_count(), 1);
    }

    #[test]
    fn zero_length_allocations_use_nothing() {
        let a = arena(256, 16);
        let p = a.alloc(Layout::from_size_align(0, 64).unwrap()).unwrap();
        assert_eq!(addr(p) % 64, 0);
        let empty: &mut [u64] = a.alloc_copy(&[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(a.block_count(), 0);
        assert_eq!(a.oversized_count(), 0);
    }

    #[test]
    fn blocks_chain_when_full() {
        let a = arena(128, 16); // 112 usable bytes per block
        let mut seen = Vec::new();
        for i in 0..10u8 {
            let s = a.alloc_copy(&[i; 100]).unwrap();
            seen.push(s);
        }
        assert_eq!(
            a.block_count(),
            10,
            "each 100-byte allocation needs its own block"
        );
        for (i, s) in seen.iter().enumerate() {
            assert!(
                s.iter().all(|&b| b == i as u8),
                "allocation {i} overwritten"
            );
        }
        assert_eq!(a.pool().capacity(), 2 + 4 + 8);
    }

    #[test]
    fn oversized_allocations_go_to_the_side_list() {
        let mut a = arena(128, 16);
        let big = a.alloc_copy(&[7u8; 1000]).unwrap();
        assert!(big.iter().all(|&b| b == 7));
        let exact_fit = a.alloc(Layout::from_size_align(112, 16).unwrap()).unwrap();
        let _ = exact_fit;
        assert_eq!(a.oversized_count(), 1);
        assert_eq!(a.block_count(), 1, "112 bytes fit exactly after the header");
        let _ = a.alloc(Layout::from_size_align(113, 1).unwrap()).unwrap();
        assert_eq!(a.oversized_count(), 2);
        a.reset();
        assert_eq!(a.oversized_count(), 0);
    }

    #[test]
    fn reset_returns_blocks_and_reuses_them() {
        let pool = capped_pool(128, 8);
        let mut a = Arena::new(pool.clone()).unwrap();
        for round in 0..50u32 {
            for i in 0..8u32 {
                let v = a
                    .alloc_value([
                        round, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                    ])
                    .unwrap();
                assert_eq!(v[0], round);
            }
            assert_eq!(a.block_count(), 8);
            a.reset();
            assert_eq!(a.block_count(), 0);
        }
        // The cap of 8 would have failed the second round if reset leaked.
        assert_eq!(pool.capacity(), 8);
        drop(a);
        let mut pool = Arc::try_unwrap(pool).unwrap();
        assert_eq!(pool.count_free(), 8);
    }

    #[test]
    fn pool_exhaustion_is_an_error_not_a_panic() {
        let pool = capped_pool(64, 1);
        let a = Arena::new(pool).unwrap();
        a.alloc_copy(&[0u8; 40]).unwrap();
        let e = a.alloc_copy(&[0u8; 40]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
    }
}
