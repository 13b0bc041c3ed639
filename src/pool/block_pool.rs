//! `BlockPool`: fixed-size, aligned memory blocks behind a lock-free,
//! ABA-safe free list.
//!
//! # How it works
//!
//! Blocks live in *chunks* that the pool grows geometrically: chunk `k` holds
//! `first_chunk_blocks << k` blocks (the last one possibly cut short by the
//! cap), so a block's global index maps to its chunk with one leading-zero
//! count, and 32 chunk slots cover every `u32` index. A chunk is never freed
//! while the pool is shared (only [`BlockPool::trim`] and `Drop`, which take
//! `&mut self`, free chunks), so any index ever seen stays addressable.
//!
//! The free list is a Treiber stack of block *indices*. Its head is one
//! `AtomicU64` packing `(index: u32, generation: u32)`; every successful CAS
//! bumps the generation, so a pop whose `(index, next)` snapshot went stale
//! (the index popped and pushed back in between — the ABA case) fails its
//! CAS instead of installing a dangling `next`. The link of each free block is
//! an `AtomicU32` kept *beside* the block memory, not inside it (a chunk is
//! one allocation, `[links][blocks]`, its directory entry pointing at the
//! first block with the links just below it): a pop may read
//! the link of a block another thread has just taken, and that read must not
//! race with the new owner's writes to the block (with links inside the block
//! it would be a data race, which is undefined behaviour even if the CAS then
//! fails). A stale link read is harmless because the generation check rejects
//! it. The generation wraps after 2^32 successful operations; an ABA failure
//! needs one thread to stall across exactly a multiple of 2^32 pool operations
//! between its load and its CAS, which we accept (as IREE's
//! `iree_atomic_freelist` does with 16 bits).
//!
//! Growth is the only allocating path: when the list is empty, `acquire`
//! allocates the next chunk, installs it with a CAS on its slot (a racing
//! grower that loses frees its chunk and retries the pop), keeps one block and
//! pushes the rest in one CAS. Past the optional cap, `acquire` returns
//! [`ErrorKind::ResourceExhausted`]. A lost CAS race backs off
//! (`crossbeam_utils::Backoff`) before retrying: on two contending threads
//! that made acquire+release about 13x faster in `benches/pool.rs`.
//!
//! Cost: `acquire` + `release` is two CAS on one shared line. For an owner
//! that loops, [`BlockCache`] keeps a private stash and moves blocks in
//! halves, one CAS each (`pop_chain` / `release_raw_all`).

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::mem;

use std::ptr::{self, NonNull};

use crossbeam_utils::CachePadded;

use crate::error::{Error, ErrorKind};
use crate::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Sentinel index: "no block" (end of the free list).
mod free_list;

const NIL: u32 = u32::MAX;
/// Chunk slots; with chunk `k` holding `first << k` blocks, 32 slots address
/// more than `u32::MAX` blocks for any `first >= 1`.
const MAX_CHUNKS: usize = 32;
/// The largest cap: every index below it is a valid `u32` distinct from `NIL`.
const MAX_BLOCKS: u32 = NIL - 1;

#[inline]
fn pack(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

#[inline]
fn unpack(head: u64) -> (u32, u32) {
    (head as u32, (head >> 32) as u32)
}

/// How a [`BlockPool`] is shaped. `Default` gives 4 KiB blocks aligned to 64
/// bytes, first chunk of 8 blocks, no cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPoolConfig {
    /// Usable bytes per block (rounded up to a multiple of `align`). Must be > 0.
    pub block_size: usize,
    /// Alignment of every block; a power of two.
    pub align: usize,
    /// Blocks in the first chunk; later chunks double. Rounded up to a power
    /// of two; at least 1.
    pub first_chunk_blocks: u32,
    /// Most blocks the pool may ever hold; `acquire` past it returns
    /// `ResourceExhausted`. `None`: limited only by memory (and `u32::MAX - 1`).
    pub max_blocks: Option<u32>,
}

impl Default for BlockPoolConfig {
    fn default() -> Self {
        BlockPoolConfig {
            block_size: 4096,
            align: crate::prefetch::CACHE_LINE,
            first_chunk_blocks: 8,
            max_blocks: None,
        }
    }
}

/// A pool of fixed-size, aligned blocks with a lock-free free list.
///
/// `acquire` and `release` are one CAS each and allocate nothing once the
/// pool has grown to its working size; see the module docs for the scheme.
///
/// ```
/// use fenceline::testing::pool::BlockPool;
/// let pool = BlockPool::new(256, 64)?;
/// let block = pool.acquire()?;
/// assert_eq!(block.as_ptr().as_ptr() as usize % 64, 0);
/// assert_eq!(block.size(), 256);
/// drop(block); // back on the free list
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct BlockPool {
    /// Free-list head: `(index, generation)` packed, see `pack`.
    head: CachePadded<AtomicU64>,
    /// Chunk `k`'s first block, or null. A chunk is one allocation:
    /// `[links][blocks]`, the link of the block at offset `i` stored
    /// `i + 1` links *below* the first block, so one directory load finds
    /// both a block and its link.
    chunks: [AtomicPtr<u8>; MAX_CHUNKS],
    block_size: usize,
    align: usize,
    first_chunk_blocks: u32,
    max_blocks: u32,
}

// SAFETY: the pool owns its chunks (raw pointers it allocated); all shared
// state is atomic, and block memory is handed to exactly one owner at a time.
unsafe impl Send for BlockPool {}
// SAFETY: as above; every `&self` method synchronizes through atomics.
unsafe impl Sync for BlockPool {}

impl fmt::Debug for BlockPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockPool")
            .field("block_size", &self.block_size)
            .field("align", &self.align)
            .field("capacity", &self.capacity())
            .field("max_blocks", &self.max_blocks)
            .finish()
    }
}

impl BlockPool {
    #[cfg(any(test, feature = "testing"))]
    /// A pool of `block_size`-byte blocks aligned to `align`, with no cap.
    ///
    /// Errors: `InvalidArgument` if `block_size` is 0 or `align` is not a
    /// power of two.
    pub fn new(block_size: usize, align: usize) -> Result<BlockPool, Error> {
        BlockPool::with_config(BlockPoolConfig {
            block_size,
            align,
            ..BlockPoolConfig::default()
        })
    }

    /// A pool shaped by `config`. Nothing is allocated until the first
    /// `acquire` or `preallocate`.
    pub fn with_config(config: BlockPoolConfig) -> Result<BlockPool, Error> {
        if config.block_size == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "block pool block_size 0: must be > 0",
            ));
        }
        if !config.align.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("block pool align {}: must be a power of two", config.align),
            ));
        }
        let block_size = config
            .block_size
            .checked_next_multiple_of(config.align)
            .filter(|&s| Layout::from_size_align(s, config.align).is_ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "block pool block_size {} with align {}: too large",
                        config.block_size, config.align
                    ),
                )
            })?;
        let first = config
            .first_chunk_blocks
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 31);
        let max_blocks = config.max_blocks.unwrap_or(MAX_BLOCKS).min(MAX_BLOCKS);
        Ok(BlockPool {
            head: CachePadded::new(AtomicU64::new(pack(NIL, 0))),
            chunks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            block_size,
            align: config.align,
            first_chunk_blocks: first,
            max_blocks,
        })
    }

    #[cfg(any(test, feature = "testing"))]
    /// Usable bytes per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    #[cfg(any(test, feature = "testing"))]
    /// Alignment of every block.
    pub fn block_align(&self) -> usize {
        self.align
    }

    #[cfg(any(test, feature = "testing"))]
    /// The cap on the number of blocks.
    pub fn max_blocks(&self) -> u32 {
        self.max_blocks
    }

    /// Blocks the pool holds now, free or in use.
    pub fn capacity(&self) -> usize {
        // Acquire: pairs with the install CAS in `install_chunk`
        // (free_list.rs); only nullness is used, so nothing relies on it.
        (0..MAX_CHUNKS)
            .filter(|&k| !self.chunks[k].load(Ordering::Acquire).is_null())
            .map(|k| self.chunk_len(k) as usize)
            .sum()
    }

    // ---------------------------------------------------------------------
    // Index arithmetic
    // ---------------------------------------------------------------------

    /// First global index of chunk `k` (may exceed `u32` for large `k`).
    #[inline]
    fn chunk_base(&self, k: usize) -> u64 {
        u64::from(self.first_chunk_blocks) * ((1u64 << k) - 1)
    }

    /// Blocks in chunk `k`: `first << k`, cut short by the cap.
    #[inline]
    fn chunk_len(&self, k: usize) -> u32 {
        let full = u64::from(self.first_chunk_blocks) << k;
        let room = u64::from(self.max_blocks).saturating_sub(self.chunk_base(k));
        full.min(room) as u32
    }

    /// Layout of chunk `k`'s allocation and the offset of its first block.
    fn chunk_layout(&self, k: usize) -> Option<(Layout, usize)> {
        let len = self.chunk_len(k) as usize;
        let align = self.align.max(mem::align_of::<AtomicU32>());
        let links = len
            .checked_mul(mem::size_of::<AtomicU32>())?
            .checked_next_multiple_of(align)?;
        let blocks = self.block_size.checked_mul(len)?;
        let layout = Layout::from_size_align(links.checked_add(blocks)?, align).ok()?;
        Some((layout, links))
    }

    /// `(chunk, offset in chunk)` of a global block index.
    #[inline]
    fn locate(&self, index: u32) -> (usize, usize) {
        let q = (u64::from(index) >> self.first_chunk_blocks.trailing_zeros()) + 1;
        let k = (63 - q.leading_zeros()) as usize;
        (k, (u64::from(index) - self.chunk_base(k)) as usize)
    }

    /// First block of the installed chunk holding `index`, and the offset
    /// of `index` in it.
    ///
    /// # Safety
    /// `index` was handed out by this pool (it is on the free list or held by
    /// a caller), so its chunk is installed and, the pool being borrowed, not
    /// freed.
    #[inline]
    unsafe fn chunk_of(&self, index: u32) -> (*mut u8, usize) {
        let (k, offset) = self.locate(index);
        // Acquire pairs with the AcqRel install in `install_chunk`; the index
        // reached us through a chain of release/acquire on `head` (or from
        // the installer itself), so the slot is non-null.
        let blocks = self.chunks[k].load(Ordering::Acquire);
        debug_assert!(!blocks.is_null(), "block index {index} has no chunk");
        (blocks, offset)
    }

    /// The free-list link of block `index`.
    ///
    /// # Safety
    /// As for `chunk_of`.
    #[inline]
    pub(in crate::pool) unsafe fn next_of(&self, index: u32) -> &AtomicU32 {
        // SAFETY: forwarded contract.
        let (blocks, offset) = unsafe { self.chunk_of(index) };
        // SAFETY: the chunk's `len` links sit just below its first block,
        // inside its allocation; `offset < len`.
        let link = unsafe { blocks.cast::<AtomicU32>().sub(offset + 1) };
        // SAFETY: the link was initialized at install and is alive until
        // the chunk is freed (which needs `&mut self`).
        unsafe { &*link }
    }

    /// Block `index`'s address and its free-list link, from one chunk
    /// lookup.
    ///
    /// # Safety
    /// As for `chunk_of`.
    #[inline]
    pub(in crate::pool) unsafe fn block_and_link(&self, index: u32) -> (NonNull<u8>, &AtomicU32) {
        // SAFETY: forwarded contract.
        let (blocks, offset) = unsafe { self.chunk_of(index) };
        // SAFETY: as in `block_ptr`: the block lies inside the chunk's
        // allocation (`offset` < its length).
        let block = unsafe { blocks.add(offset * self.block_size) };
        // SAFETY: as in `block_ptr`: the chunk pointer is non-null and the
        // block lies inside its allocation.
        let block = unsafe { NonNull::new_unchecked(block) };
        // SAFETY: as in `next_of`: the block's link lies just below the
        // chunk's first block, inside its allocation (`offset` < its length).
        let link = unsafe { blocks.cast::<AtomicU32>().sub(offset + 1) };
        // SAFETY: the link was initialized at install and is alive until
        // the chunk is freed (which needs `&mut self`).
        (block, unsafe { &*link })
    }

    /// # Safety
    /// As for `chunk_of`.
    #[inline]
    pub(in crate::pool) unsafe fn block_ptr(&self, index: u32) -> NonNull<u8> {
        // SAFETY: forwarded contract.
        let (blocks, offset) = unsafe { self.chunk_of(index) };
        // SAFETY: offset < chunk length, so the block lies inside the chunk's
        // allocation.
        let block = unsafe { blocks.add(offset * self.block_size) };
        // SAFETY: the chunk pointer is non-null and the block lies inside
        // its allocation.
        unsafe { NonNull::new_unchecked(block) }
    }

    // ---------------------------------------------------------------------
    // Public operations
    // ---------------------------------------------------------------------

    #[cfg(any(test, feature = "testing"))]
    /// Takes a free block, growing the pool if none is free.
    ///
    /// Errors: `ResourceExhausted` when the pool is at its cap (or memory
    /// ran out). Never panics.
    #[inline]
    pub fn acquire(&self) -> Result<Block<'_>, Error> {
        let raw = self.acquire_raw()?;
        Ok(Block {
            pool: self,
            raw,
            _not_sync: PhantomData,
        })
    }

    /// [`acquire`](Self::acquire) without the guard: the caller releases the
    /// block with [`release_raw`](Self::release_raw).
    #[inline]
    pub fn acquire_raw(&self) -> Result<RawBlock, Error> {
        if let Some(index) = self.pop() {
            // SAFETY: `index` came off this pool's free list.
            let ptr = unsafe { self.block_ptr(index) };
            return Ok(RawBlock { ptr, index });
        }
        self.acquire_slow()
    }

    /// `acquire_raw` when the free list looked empty: grow, or retry the pop
    /// if another thread grew first.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self) -> Result<RawBlock, Error> {
        loop {
            if let Some(index) = self.pop() {
                // SAFETY: `index` came off this pool's free list.
                let ptr = unsafe { self.block_ptr(index) };
                return Ok(RawBlock { ptr, index });
            }
            if let Some((base, len)) = self.grow()? {
                // Keep `base`, free the rest of the new chunk in one push.
                // SAFETY: the chunk was just installed by us; no one else has
                // seen its indices.
                unsafe { self.push_range(base + 1, len - 1) };
                // SAFETY: `base` is in the chunk just installed.
                let ptr = unsafe { self.block_ptr(base) };
                return Ok(RawBlock { ptr, index: base });
            }
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Returns a block to the pool (the same as dropping it).
    ///
    /// # Panics
    /// If `block` came from another pool: releasing it here would hand the
    /// same memory to two owners.
    pub fn release(&self, block: Block<'_>) {
        assert!(
            ptr::eq(block.pool, self),
            "BlockPool::release: block {} belongs to another pool",
            block.raw.index
        );
        drop(block);
    }

    /// Returns a raw block to the pool.
    ///
    /// # Safety
    /// `block` was acquired from this pool (by `acquire_raw` or
    /// `Block::into_raw`) and is released once; the caller no longer uses
    /// its memory.
    #[inline]
    pub unsafe fn release_raw(&self, block: RawBlock) {
        // SAFETY: forwarded contract: `block` is this pool's and now unowned.
        unsafe { self.push_chain(block.index, block.index) };
    }

    /// A block holding `make(index)`: a `T` written in place, and the
    /// block index [`release_value`](Self::release_value) needs back.
    ///
    /// # Panics
    /// If a `T` does not fit a block (size or alignment).
    ///
    /// Errors: as [`acquire`](Self::acquire).
    pub(crate) fn acquire_value<T>(
        &self,
        make: impl FnOnce(u32) -> T,
    ) -> Result<NonNull<T>, Error> {
        assert!(
            mem::size_of::<T>() <= self.block_size && mem::align_of::<T>() <= self.align,
            "a value of {} bytes fits a block of {}",
            mem::size_of::<T>(),
            self.block_size
        );
        let block = self.acquire_raw()?;
        let value = block.as_ptr().cast::<T>();
        // SAFETY: the block is ours, large and aligned enough (asserted).
        unsafe { value.as_ptr().write(make(block.index())) };
        // Under the model checker: live until released.
        crate::sync::liveness::born(value.as_ptr());
        Ok(value)
    }

    /// Drops a value from [`acquire_value`](Self::acquire_value) and gives
    /// its block back.
    ///
    /// # Safety
    /// `value` came from this pool's `acquire_value`, which gave `index`;
    /// nothing uses it after this (it is released once).
    pub(crate) unsafe fn release_value<T>(&self, value: NonNull<T>, index: u32) {
        // Under the model checker: a value released twice fails here.
        crate::sync::liveness::check(value.as_ptr(), "a pooled value (released twice)");
        crate::sync::liveness::died(value.as_ptr());
        // SAFETY: initialized by `acquire_value` and dropped once
        // (contract).
        unsafe { ptr::drop_in_place(value.as_ptr()) };
        // SAFETY: `value` is the start of block `index` of this pool
        // (contract).
        let block = unsafe { RawBlock::from_parts(value.cast(), index) };
        // SAFETY: the block is this pool's, released once (contract).
        unsafe { self.release_raw(block) };
    }

    /// Returns many raw blocks with a single CAS on the free list (an arena's
    /// `reset`).
    ///
    /// # Safety
    /// As for [`release_raw`](Self::release_raw), for every block.
    pub unsafe fn release_raw_all(&self, blocks: impl IntoIterator<Item = RawBlock>) {
        let mut first = NIL;
        let mut last = NIL;
        for block in blocks {
            if first == NIL {
                first = block.index;
            } else {
                // SAFETY: `last` is one of this pool's blocks, owned by us.
                unsafe { self.next_of(last) }.store(block.index, Ordering::Relaxed);
            }
            last = block.index;
        }
        if first != NIL {
            // SAFETY: the chain holds only blocks of this pool we own.
            unsafe { self.push_chain(first, last) };
        }
    }

    /// Grows the pool until it holds at least `count` blocks; the new blocks
    /// go on the free list, so later acquires up to that count do not
    /// allocate.
    ///
    /// Errors: `ResourceExhausted` if `count` is above the cap (nothing is
    /// allocated then) or memory ran out.
    pub fn preallocate(&self, count: usize) -> Result<(), Error> {
        if count > self.max_blocks as usize {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "block pool preallocate({count}): above its cap of {} blocks",
                    self.max_blocks
                ),
            ));
        }
        while self.capacity() < count {
            if let Some((base, len)) = self.grow()? {
                // SAFETY: the chunk was just installed by us.
                unsafe { self.push_range(base, len) };
            }
        }
        Ok(())
    }

    #[cfg(any(test, feature = "testing"))]
    /// Walks the free list. Needs `&mut self`: exact only with no other user.
    fn free_indices(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        let capacity = self.capacity();
        let (mut index, _) = unpack(self.head.load(Ordering::Relaxed));
        while index != NIL {
            // A longer list repeats a block: a bug, reported instead of
            // looping forever.
            assert!(
                out.len() < capacity,
                "BlockPool free list is corrupt: longer than the pool's {capacity} blocks"
            );
            out.push(index);
            // SAFETY: indices on the free list belong to installed chunks.
            index = unsafe { self.next_of(index) }.load(Ordering::Relaxed);
        }
        out
    }

    #[cfg(any(test, feature = "testing"))]
    /// Blocks on the free list now. Takes `&mut self` because the count is
    /// only meaningful with no other user (e.g. after joining all threads).
    pub fn count_free(&mut self) -> usize {
        self.free_indices().len()
    }

    #[cfg(any(test, feature = "testing"))]
    /// Frees every chunk whose blocks are all free and returns how many
    /// blocks that released. Blocks still in use keep their chunk alive.
    /// Takes `&mut self`: trimming while another thread pops could free a
    /// block under it (IREE's trim has the same rule, unenforced).
    pub fn trim(&mut self) -> usize {
        let free = self.free_indices();
        let mut free_per_chunk = [0u32; MAX_CHUNKS];
        for &index in &free {
            free_per_chunk[self.locate(index).0] += 1;
        }
        let doomed: [bool; MAX_CHUNKS] = std::array::from_fn(|k| {
            !self.chunks[k].load(Ordering::Relaxed).is_null()
                && free_per_chunk[k] == self.chunk_len(k)
        });
        // Relink the survivors, preserving their order.
        let kept: Vec<u32> = free
            .into_iter()
            .filter(|&i| !doomed[self.locate(i).0])
            .collect();
        let mut head = NIL;
        for &index in kept.iter().rev() {
            // SAFETY: `index` is a free block of a chunk we keep.
            unsafe { self.next_of(index) }.store(head, Ordering::Relaxed);
            head = index;
        }
        let (_, generation) = unpack(self.head.load(Ordering::Relaxed));
        self.head
            .store(pack(head, generation.wrapping_add(1)), Ordering::Relaxed);
        let mut released = 0;
        for (k, &doom) in doomed.iter().enumerate() {
            if doom {
                released += self.chunk_len(k) as usize;
                let blocks = self.chunks[k].swap(ptr::null_mut(), Ordering::Relaxed);
                // SAFETY: every block of the chunk is free and unlinked, and
                // `&mut self` means no thread can be reading it.
                unsafe { self.free_chunk(k, blocks) };
            }
        }
        released
    }
}

impl Drop for BlockPool {
    fn drop(&mut self) {
        for k in 0..MAX_CHUNKS {
            let blocks = self.chunks[k].swap(ptr::null_mut(), Ordering::Relaxed);
            if !blocks.is_null() {
                // SAFETY: no `Block` can outlive the pool (it borrows it), and
                // `RawBlock` holders promised to release before the drop.
                unsafe { self.free_chunk(k, blocks) };
            }
        }
    }
}

impl BlockPool {
    /// Drops chunk `k`'s links and frees its allocation.
    ///
    /// # Safety
    /// `blocks` is chunk `k`'s first block as made by `install_chunk`, and
    /// nobody uses the chunk any more.
    unsafe fn free_chunk(&self, k: usize, blocks: *mut u8) {
        let Some((layout, links)) = self.chunk_layout(k) else {
            unreachable!("chunk {k} was allocated with this layout");
        };
        for i in 0..self.chunk_len(k) as usize {
            // SAFETY: the chunk's links sit just below `blocks`, inside its
            // allocation, as written in `install_chunk`; `i` < the chunk's
            // length.
            let link = unsafe { blocks.cast::<AtomicU32>().sub(i + 1) };
            // SAFETY: the links were written in `install_chunk`, dropped once.
            unsafe { ptr::drop_in_place(link) };
        }
        // SAFETY: the allocation starts `links` bytes below the first block.
        let memory = unsafe { blocks.sub(links) };
        // SAFETY: `memory` is the start of the allocation, made with exactly
        // `layout`.
        unsafe { std::alloc::dealloc(memory, layout) };
    }
}

// -------------------------------------------------------------------------
// Block handles
// -------------------------------------------------------------------------

/// A block taken from a [`BlockPool`], exclusively owned; returned to its
/// pool when dropped. Its memory is uninitialized when acquired.
pub struct Block<'pool> {
    pool: &'pool BlockPool,
    raw: RawBlock,
    /// `Send` but not `Sync`: the guard hands out a mutable pointer.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the block is exclusively owned, and releasing it from any thread is
// fine because the pool is `Sync`.
unsafe impl Send for Block<'_> {}

impl<'pool> Block<'pool> {
    #[cfg(any(test, feature = "testing"))]
    /// Start of the block's memory, aligned to the pool's alignment.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.raw.ptr
    }

    #[cfg(any(test, feature = "testing"))]
    /// Usable bytes in the block.
    pub fn size(&self) -> usize {
        self.pool.block_size
    }

    #[cfg(any(test, feature = "testing"))]
    /// The block's index in its pool (stable for the pool's lifetime).
    pub fn index(&self) -> u32 {
        self.raw.index
    }

    #[cfg(any(test, feature = "testing"))]
    /// Gives up the guard; the caller must hand the result to
    /// [`BlockPool::release_raw`] of the same pool before the pool drops.
    pub fn into_raw(self) -> RawBlock {
        let raw = RawBlock {
            ptr: self.raw.ptr,
            index: self.raw.index,
        };
        std::mem::forget(self);
        raw
    }
}

impl Drop for Block<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard owns a block of `self.pool` and gives it up here.
        unsafe { self.pool.push_chain(self.raw.index, self.raw.index) };
    }
}

impl fmt::Debug for Block<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block")
            .field("index", &self.raw.index)
            .field("ptr", &self.raw.ptr)
            .finish()
    }
}

/// A block without a guard: its pointer and index. Not `Clone`, so a block
/// is released at most once unless unsafe code forges one.
#[derive(Debug, PartialEq, Eq)]
pub struct RawBlock {
    pub(in crate::pool) ptr: NonNull<u8>,
    pub(in crate::pool) index: u32,
}

// SAFETY: a raw block is a unique claim on pool memory; moving the claim
// between threads is fine.
unsafe impl Send for RawBlock {}

impl RawBlock {
    /// Rebuilds a raw block from its parts.
    ///
    /// # Safety
    /// `ptr` and `index` are those of one block of one pool, owned by the
    /// caller (e.g. an object placed at the start of its block that kept
    /// the index).
    pub(crate) unsafe fn from_parts(ptr: NonNull<u8>, index: u32) -> RawBlock {
        RawBlock { ptr, index }
    }

    /// Start of the block's memory.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The block's index in its pool.
    pub fn index(&self) -> u32 {
        self.index
    }
}

static_assertions::assert_impl_all!(BlockPool: Send, Sync);
static_assertions::assert_impl_all!(Block<'static>: Send);
static_assertions::assert_not_impl_any!(Block<'static>: Sync, Clone);
static_assertions::assert_not_impl_any!(RawBlock: Clone, Copy);
static_assertions::assert_eq_size!(RawBlock, [u64; 2]);
static_assertions::assert_impl_all!(super::BlockCache<std::sync::Arc<BlockPool>>: Send);

#[cfg(all(test, not(fenceline_loom)))]
mod tests;
