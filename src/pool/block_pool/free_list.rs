//! The pool's free list, and its growth: a Treiber stack of block indices
//! whose head packs `(index, generation)` in one `AtomicU64`, so a pop that
//! read a stale head fails its CAS (no ABA); when it is empty, a new chunk
//! is installed and its blocks pushed in one CAS.

use std::mem::MaybeUninit;
use std::ptr;

use crossbeam_utils::Backoff;

use super::{pack, unpack, BlockPool, RawBlock, MAX_CHUNKS, NIL};
use crate::error::{Error, ErrorKind};
use crate::sync::atomic::{AtomicU32, Ordering};

impl BlockPool {
    /// Pushes the chain `first ..= last`, already linked through `next`,
    /// in one CAS.
    ///
    /// # Safety
    /// Every block of the chain belongs to this pool and has no other owner.
    #[inline]
    pub(in crate::pool) unsafe fn push_chain(&self, first: u32, last: u32) {
        // SAFETY: `last` belongs to this pool.
        let last_next = unsafe { self.next_of(last) };
        let backoff = Backoff::new();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let (top, generation) = unpack(head);
            last_next.store(top, Ordering::Relaxed);
            // Release: pairs with the Acquire loads and CASes of `head` in
            // `pop` and `pop_chain_into`: the link above and every write the
            // releasing owner made to the blocks happen-before the popper's.
            match self.head.compare_exchange_weak(
                head,
                pack(first, generation.wrapping_add(1)),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => {
                    backoff.spin();
                    head = now;
                }
            }
        }
    }

    /// Pops one index, or `None` when the list is empty.
    #[inline]
    pub(in crate::pool) fn pop(&self) -> Option<u32> {
        // Acquire: pairs with the Release CAS in `push_chain` that stored
        // this head, so the link of `top` read below is the pusher's.
        let mut head = self.head.load(Ordering::Acquire);
        let backoff = Backoff::new();
        loop {
            let (top, generation) = unpack(head);
            if top == NIL {
                return None;
            }
            // SAFETY: `top` was on the free list of this pool, so it is one of
            // its indices. The link may be stale if `top` was popped since our
            // load; then the generation has moved and the CAS below fails.
            let next = unsafe { self.next_of(top) }.load(Ordering::Relaxed);
            // Acquire on success pairs with the Release push of `top`; on
            // failure we re-read a head whose chunk we must also see.
            match self.head.compare_exchange_weak(
                head,
                pack(next, generation.wrapping_add(1)),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(top),
                Err(now) => {
                    backoff.spin();
                    head = now;
                }
            }
        }
    }

    /// Pops a chain of up to `out.len()` (>= 1) blocks with one CAS and
    /// hands them to `out` in list order; returns how many (0: the list
    /// was empty).
    ///
    /// The walk reads links of blocks other threads may be popping; the reads
    /// are atomic, bounded by `out.len()`, and only indices of installed
    /// chunks are ever stored in links, so a stale walk is harmless: any pop
    /// or push since our load moved the generation and the CAS fails. If the
    /// CAS succeeds, nothing changed the list since the load, so the chain we
    /// walked was the list's front, whose links were published to us by the
    /// Acquire load (every push is a release RMW on `head`). `out` is written
    /// during the walk, before the CAS: a failed CAS only writes it again.
    /// One walk finds the chain's end and each block's address (a chunk
    /// lookup per block, not two walks of two each).
    #[inline]
    pub(in crate::pool) fn pop_chain_into(&self, out: &mut [MaybeUninit<RawBlock>]) -> usize {
        debug_assert!(!out.is_empty(), "a chain of at least one block");
        let backoff = Backoff::new();
        // Acquire: pairs with the Release CAS in `push_chain` that stored
        // this head (see above: it publishes the links the walk reads).
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (top, generation) = unpack(head);
            if top == NIL {
                return 0;
            }
            let mut count = 0;
            let mut index = top;
            let next = loop {
                // SAFETY: `top` is an index of this pool (see `pop`); every
                // link holds NIL or such an index, so each `index` is one too.
                let (ptr, link) = unsafe { self.block_and_link(index) };
                out[count].write(RawBlock { ptr, index });
                count += 1;
                let next = link.load(Ordering::Relaxed);
                if count == out.len() || next == NIL {
                    break next;
                }
                index = next;
            };
            // Acquire (both): pairs with the Release CAS in `push_chain`; on
            // success the blocks' contents, on failure the new head's links.
            match self.head.compare_exchange_weak(
                head,
                pack(next, generation.wrapping_add(1)),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return count,
                Err(now) => {
                    backoff.spin();
                    head = now;
                }
            }
        }
    }

    /// Allocates chunk `k` and installs it. `Ok(None)`: another thread
    /// installed it first (ours was freed); the caller retries the pop.
    fn install_chunk(&self, k: usize) -> Result<Option<(u32, u32)>, Error> {
        let base = self.chunk_base(k);
        if base >= u64::from(self.max_blocks) {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "block pool at its cap of {} blocks of {} bytes",
                    self.max_blocks, self.block_size
                ),
            ));
        }
        let len = self.chunk_len(k);
        let (layout, links) = self.chunk_layout(k).ok_or_else(|| {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!("block pool chunk of {len} blocks overflows the address space"),
            )
        })?;
        // SAFETY: the layout has a non-zero size (block_size > 0, len > 0).
        let memory = unsafe { std::alloc::alloc(layout) };
        if memory.is_null() {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "out of memory growing block pool by {} bytes",
                    layout.size()
                ),
            ));
        }
        // SAFETY: `links <= layout.size()`.
        let blocks = unsafe { memory.add(links) };
        for i in 0..len as usize {
            // SAFETY: `len` links fit below `blocks` (`links` was rounded up
            // from `len` links).
            let link = unsafe { blocks.cast::<AtomicU32>().sub(i + 1) };
            // SAFETY: the link lies in the allocation (just above) and is
            // aligned (the layout's alignment covers `AtomicU32`'s, and
            // `links` is a multiple of it).
            unsafe { link.write(AtomicU32::new(NIL)) };
        }
        // AcqRel: the Release half pairs with the Acquire loads of `chunks[k]`
        // in `chunk_of` (block_pool.rs), publishing the chunk's links before
        // any of its indices can be seen; the Acquire halves pair only with a
        // rival installer's CAS here (read on failure), which nothing needs.
        match self.chunks[k].compare_exchange(
            ptr::null_mut(),
            blocks,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(Some((base as u32, len))),
            Err(_) => {
                // SAFETY: we created the chunk above and never published it.
                unsafe { self.free_chunk(k, blocks) };
                Ok(None)
            }
        }
    }

    /// Installs the first empty chunk slot. See `install_chunk`. Cold: the
    /// only allocating path, kept out of the inlined hot path.
    #[cold]
    #[inline(never)]
    pub(in crate::pool) fn grow(&self) -> Result<Option<(u32, u32)>, Error> {
        // Acquire: pairs with the install CAS in `install_chunk`; only
        // nullness is used here, so nothing relies on it.
        let k = (0..MAX_CHUNKS)
            .find(|&k| self.chunks[k].load(Ordering::Acquire).is_null())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    format!("block pool has all {MAX_CHUNKS} chunks"),
                )
            })?;
        self.install_chunk(k)
    }

    /// Links `first .. first + count` through `next` and pushes them.
    ///
    /// # Safety
    /// The blocks belong to this pool, were just installed and have no owner.
    pub(in crate::pool) unsafe fn push_range(&self, first: u32, count: u32) {
        if count == 0 {
            return;
        }
        for i in first..first + count - 1 {
            // SAFETY: `i` is in a chunk this thread installed.
            unsafe { self.next_of(i) }.store(i + 1, Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { self.push_chain(first, first + count - 1) };
    }
}
