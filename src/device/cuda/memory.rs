//! [`CudaRef`]: the counted handle a CUDA [`Buffer`](crate::Buffer) holds
//! to its [`DeviceMem`]. A `Device::buffer`'s lives on the heap; a
//! `Queue::alloca`'s in a block of the device's [`HandlePool`], so a frame
//! loop of alloca and dealloca allocates nothing once warm (the memory
//! itself comes from the driver's stream-ordered pool). A [`Counted`], as
//! the CPU device's `HostRef`.

use crate::sync::atomic::AtomicUsize;
use crate::sync::counted::{Counted, Counts};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

pub(crate) use super::driver::DeviceMem as CudaMem;
use super::driver::DeviceMem;
use crate::error::Error;
use crate::pool::{BlockPool, BlockPoolConfig, RawBlock};

/// Where a handle's block goes back to.
enum Home {
    Heap,
    Pool { pool: Arc<HandlePool>, index: u32 },
}

/// Device memory, its handles' count, and where its block goes back.
pub(crate) struct CountedMem {
    refs: AtomicUsize,
    home: Home,
    mem: DeviceMem,
}

/// A counted handle to a [`DeviceMem`]: cloning counts one more; the last
/// drop frees the memory (see `DeviceMem`'s drop) and the handle's block.
pub(crate) type CudaRef = Counted<CountedMem>;

static_assertions::assert_impl_all!(DeviceMem: Send, Sync);
static_assertions::assert_impl_all!(CudaRef: Send, Sync);

impl Counted<CountedMem> {
    /// A handle of its own, on the heap (`Device::buffer`).
    pub(crate) fn boxed(mem: DeviceMem) -> CudaRef {
        let counted = Box::new(CountedMem {
            refs: AtomicUsize::new(1),
            home: Home::Heap,
            mem,
        });
        // SAFETY: a new value, counted 1 (this handle), freed only by its
        // `last_drop`.
        unsafe { Counted::from_raw(NonNull::from(Box::leak(counted))) }
    }
}

impl Deref for CountedMem {
    type Target = DeviceMem;

    fn deref(&self) -> &DeviceMem {
        &self.mem
    }
}

// SAFETY: `refs` is the handles' count alone.
unsafe impl Counts for CountedMem {
    fn count(&self) -> &AtomicUsize {
        &self.refs
    }

    unsafe fn last_drop(this: NonNull<CountedMem>) {
        let counted = this.as_ptr();
        // The last handle: nothing else reaches the block. The memory is
        // dropped once, in place; then the block goes home.
        // SAFETY: the block is valid until it goes home below.
        let mem = unsafe { std::ptr::addr_of_mut!((*counted).mem) };
        // SAFETY: initialized, dropped once (here).
        unsafe { mem.drop_in_place() };
        // SAFETY: the block is valid (above).
        let home = unsafe { std::ptr::addr_of!((*counted).home) };
        // SAFETY: `home` is moved out once; the block is not read again.
        let home = unsafe { home.read() };
        match home {
            Home::Heap => {
                // Freed without dropping its fields again: the memory was
                // dropped above, the count and `Heap` own nothing.
                let whole = counted.cast::<std::mem::ManuallyDrop<CountedMem>>();
                // SAFETY: made by `Box::leak` in `boxed`, freed once.
                drop(unsafe { Box::from_raw(whole) });
            }
            Home::Pool { pool, index } => {
                // SAFETY: the handle starts block `index` of `pool.blocks`
                // (`HandlePool::handle`).
                let block = unsafe { RawBlock::from_parts(this.cast::<u8>(), index) };
                // SAFETY: that pool's block, given back once.
                unsafe { pool.blocks.release_raw(block) };
                drop(pool);
            }
        }
    }
}

/// A CUDA device's handles for `Queue::alloca`: one block per live
/// alloca'd buffer, reused (lock-free) once its last handle is dropped.
pub(crate) struct HandlePool {
    blocks: BlockPool,
}

impl HandlePool {
    pub(crate) fn new() -> Result<HandlePool, Error> {
        Ok(HandlePool {
            blocks: BlockPool::with_config(BlockPoolConfig {
                block_size: std::mem::size_of::<CountedMem>(),
                align: std::mem::align_of::<CountedMem>(),
                first_chunk_blocks: 16,
                max_blocks: None,
            })?,
        })
    }

    /// A handle to `mem` in a block of the pool.
    pub(crate) fn handle(this: &Arc<HandlePool>, mem: DeviceMem) -> Result<CudaRef, Error> {
        let block = this.blocks.acquire_raw()?;
        let index = block.index();
        let at = block.as_ptr().cast::<CountedMem>();
        // SAFETY: the block is ours (just acquired), sized and aligned for
        // a `Counted` (the pool's shape).
        unsafe {
            at.as_ptr().write(CountedMem {
                refs: AtomicUsize::new(1),
                home: Home::Pool {
                    pool: this.clone(),
                    index,
                },
                mem,
            });
        }
        // SAFETY: written above, counted 1 (this handle); its block goes
        // back to the pool only in its `last_drop`.
        Ok(unsafe { Counted::from_raw(at) })
    }
}
