//! [`CudaRef`]: the counted handle a CUDA [`Buffer`](crate::Buffer) holds
//! to its [`DeviceMem`]. A `Device::buffer`'s lives on the heap; a
//! `Queue::alloca`'s in a block of the device's [`HandlePool`], so a frame
//! loop of alloca and dealloca allocates nothing once warm (the memory
//! itself comes from the driver's stream-ordered pool). The same shape as
//! the CPU device's `HostRef`.

use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

use super::driver::DeviceMem;
use crate::error::Error;
use crate::pool::{BlockPool, BlockPoolConfig, RawBlock};

/// Where a handle's block goes back to.
enum Home {
    Heap,
    Pool { pool: Arc<HandlePool>, index: u32 },
}

struct Counted {
    refs: AtomicUsize,
    home: Home,
    mem: DeviceMem,
}

/// A counted handle to a [`DeviceMem`]: cloning counts one more; the last
/// drop frees the memory (see `DeviceMem`'s drop) and the handle's block.
pub(crate) struct CudaRef(NonNull<Counted>);

// SAFETY: `DeviceMem` is `Send + Sync`; the count is atomic.
unsafe impl Send for CudaRef {}
// SAFETY: as above.
unsafe impl Sync for CudaRef {}

static_assertions::assert_impl_all!(DeviceMem: Send, Sync);

impl CudaRef {
    /// A handle of its own, on the heap (`Device::buffer`).
    pub(crate) fn boxed(mem: DeviceMem) -> CudaRef {
        let counted = Box::new(Counted {
            refs: AtomicUsize::new(1),
            home: Home::Heap,
            mem,
        });
        CudaRef(NonNull::from(Box::leak(counted)))
    }

    /// Whether two handles are the same memory.
    pub(crate) fn ptr_eq(a: &CudaRef, b: &CudaRef) -> bool {
        a.0 == b.0
    }

    /// The memory's identity (the same for every handle).
    pub(crate) fn as_ptr(this: &CudaRef) -> *const DeviceMem {
        // SAFETY: alive while this handle is.
        unsafe { &raw const (*this.0.as_ptr()).mem }
    }

    fn counted(&self) -> &Counted {
        // SAFETY: alive while this handle is (it counts one).
        unsafe { self.0.as_ref() }
    }
}

impl Deref for CudaRef {
    type Target = DeviceMem;

    fn deref(&self) -> &DeviceMem {
        &self.counted().mem
    }
}

impl Clone for CudaRef {
    fn clone(&self) -> CudaRef {
        // Relaxed: a new handle comes from an existing one, which keeps the
        // memory alive meanwhile (as `Arc`).
        self.counted().refs.fetch_add(1, Ordering::Relaxed);
        CudaRef(self.0)
    }
}

impl Drop for CudaRef {
    fn drop(&mut self) {
        // Release: our uses happen before the last handle's free; the
        // Acquire fence below pairs with every other handle's release.
        if self.counted().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        let counted = self.0.as_ptr();
        // SAFETY: the last handle: nothing else reaches the block. The
        // memory is dropped once, in place; then the block goes home.
        unsafe {
            std::ptr::addr_of_mut!((*counted).mem).drop_in_place();
            match std::ptr::read(&(*counted).home) {
                Home::Heap => {
                    // Freed without dropping its fields again: the memory
                    // was dropped above, the count and `Heap` own nothing.
                    drop(Box::from_raw(
                        counted.cast::<std::mem::ManuallyDrop<Counted>>(),
                    ));
                }
                Home::Pool { pool, index } => {
                    let block = RawBlock::from_parts(self.0.cast::<u8>(), index);
                    pool.blocks.release_raw(block);
                    drop(pool);
                }
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
                block_size: std::mem::size_of::<Counted>(),
                align: std::mem::align_of::<Counted>(),
                first_chunk_blocks: 16,
                max_blocks: None,
            })?,
        })
    }

    /// A handle to `mem` in a block of the pool.
    pub(crate) fn handle(this: &Arc<HandlePool>, mem: DeviceMem) -> Result<CudaRef, Error> {
        let block = this.blocks.acquire_raw()?;
        let index = block.index();
        let at = block.as_ptr().cast::<Counted>();
        // SAFETY: the block is ours (just acquired), sized and aligned for
        // a `Counted` (the pool's shape).
        unsafe {
            at.as_ptr().write(Counted {
                refs: AtomicUsize::new(1),
                home: Home::Pool {
                    pool: this.clone(),
                    index,
                },
                mem,
            });
        }
        Ok(CudaRef(at))
    }
}
