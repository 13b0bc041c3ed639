//! A CPU-device buffer's memory: its bytes (plain memory, aligned to
//! [`BUFFER_ALIGN`]), its [`Hold`] word, and its counted handle
//! ([`HostRef`], a [`Counted`]) whose last drop frees it, or, for queue-ordered
//! transient memory ([`Queue::alloca`](crate::Queue::alloca)), hands it
//! back to its device's [`TransientPool`] (no allocation once warm).

use std::alloc::Layout;
use std::ptr::NonNull;

use super::hold::{Access, Hold, Life};
use crate::error::{Error, ErrorKind};
use crate::pool::{BlockPool, BlockPoolConfig, RawBlock};
use crate::sync::atomic::AtomicUsize;
use crate::sync::counted::{Counted, Counts};

/// Alignment of a CPU-device buffer's first byte: a cache line, enough
/// for every primitive type and SIMD vectors up to 512 bits.
pub const BUFFER_ALIGN: usize = 64;

/// A CPU-device buffer's bytes and hold word, and where they go back.
pub(crate) struct HostMem {
    /// Handles (`HostRef`s); the last one's drop frees or recycles
    /// (`last_drop`).
    refs: AtomicUsize,
    ptr: NonNull<u8>,
    len: usize,
    hold: Hold,
    /// The identity of the device that made it: command buffers and
    /// queues of other devices refuse it.
    device: u64,
    home: Home,
}

/// Where a buffer's memory goes when its last handle drops.
enum Home {
    /// Its own allocations (`Device::buffer`, or an `alloca` past the
    /// largest size class, `transient`): freed.
    Heap { transient: bool },
    /// A block of a transient pool (`Queue::alloca`), header and bytes:
    /// handed back.
    Pool {
        pool: std::sync::Arc<TransientPool>,
        class: usize,
        index: u32,
    },
    /// Memory a device backend mapped for the host (a Vulkan buffer's):
    /// `owner` unmaps and frees it when dropped; `handle` names it to the
    /// backend (its driver object). Host copies of it hold it for writing,
    /// whether they read or write: the device's own users hold it shared
    /// (ordered among themselves on the device), so a host copy meets
    /// none of them.
    Mapped(Mapped),
}

/// What [`Home::Mapped`] keeps.
pub(crate) struct Mapped {
    pub(crate) handle: u64,
    /// Bytes mapped (at least the buffer's length).
    pub(crate) capacity: usize,
    /// From `Queue::alloca`.
    pub(crate) transient: bool,
    /// Held for its drop alone.
    #[allow(dead_code)]
    pub(crate) owner: Box<dyn Send + Sync>,
    /// Takes the header (and the mapping) back when the last handle
    /// drops, to hand it out again; `None`, or gone: freed.
    pub(crate) recycle: Option<std::sync::Weak<dyn Recycle>>,
}

/// A device's pool of mapped memory for `Queue::alloca`, which takes a
/// buffer back when its last handle drops (no allocation once warm).
pub(crate) trait Recycle: Send + Sync {
    /// Takes `mem` back.
    ///
    /// # Safety
    /// `mem` is a [`Home::Mapped`] header whose last handle just dropped:
    /// the callee owns it (to hand out again with
    /// [`HostRef::reuse_mapped`], or free with [`HostMem::free_mapped`]).
    unsafe fn recycle(&self, mem: NonNull<HostMem>);
}

// SAFETY: the bytes are reached only through the hold protocol (`hold`
// module): a writer alone, readers together; the word's acquire/release
// orders each user's accesses after the previous holders'. The rest is
// atomic or written once before the first handle is shared.
unsafe impl Send for HostMem {}
// SAFETY: as above.
unsafe impl Sync for HostMem {}

impl HostMem {
    /// The hold word.
    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    /// The device that made it.
    pub(crate) fn device(&self) -> u64 {
        self.device
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The driver object of memory a device mapped (`None` for host
    /// memory).
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) fn mapped_handle(&self) -> Option<u64> {
        match &self.home {
            Home::Mapped(m) => Some(m.handle),
            _ => None,
        }
    }

    /// Bytes mapped, for memory a device mapped.
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) fn mapped_capacity(&self) -> Option<usize> {
        match &self.home {
            Home::Mapped(m) => Some(m.capacity),
            _ => None,
        }
    }

    /// Frees a mapped header taken back by a [`Recycle`] (its owner unmaps
    /// and frees the memory).
    ///
    /// # Safety
    /// As for [`Recycle::recycle`]: the caller owns `mem`, made by
    /// [`HostRef::mapped`].
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) unsafe fn free_mapped(mem: NonNull<HostMem>) {
        // SAFETY: made by `Box::leak` in `mapped` (contract), freed once.
        drop(unsafe { Box::from_raw(mem.as_ptr()) });
    }

    /// Whether it came from `Queue::alloca`.
    pub(crate) fn is_transient(&self) -> bool {
        match &self.home {
            Home::Pool { .. } | Home::Heap { transient: true } => true,
            Home::Mapped(m) => m.transient,
            Home::Heap { transient: false } => false,
        }
    }

    /// The bytes `range`, for a reader.
    ///
    /// # Safety
    /// The caller holds the buffer (any access) for the slice's life, and
    /// `range` is in bounds.
    pub(crate) unsafe fn bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        debug_assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: `range.start` is in bounds (contract).
        let first = unsafe { self.ptr.as_ptr().add(range.start) };
        // SAFETY: in bounds (contract); no writer while the caller holds.
        unsafe { std::slice::from_raw_parts(first, range.len()) }
    }

    /// The bytes `range`, for a writer.
    ///
    /// # Safety
    /// The caller holds the buffer for writing and no other reference to
    /// these bytes lives while the slice does (within an action: the
    /// command's stage touches them through no other command, and a
    /// dispatch hands each tile a disjoint chunk), and `range` is in
    /// bounds.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, range: std::ops::Range<usize>) -> &mut [u8] {
        debug_assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: `range.start` is in bounds (contract).
        let first = unsafe { self.ptr.as_ptr().add(range.start) };
        // SAFETY: in bounds and unaliased (contract).
        unsafe { std::slice::from_raw_parts_mut(first, range.len()) }
    }

    /// The first byte (for copies within one buffer, which may overlap,
    /// and a bound dispatch's tiles).
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Runs `f` holding the buffer for `access`, or fails naming it.
    pub(crate) fn held<R>(&self, access: Access, f: impl FnOnce() -> R) -> Result<R, Error> {
        // Mapped memory: see `Home::Mapped`.
        let access = match self.home {
            Home::Mapped(_) => Access::Write,
            _ => access,
        };
        if !self.hold.try_take(access) {
            return Err(conflict(self, access, "the host"));
        }
        let r = f();
        self.hold.give_back(access)?;
        Ok(r)
    }
}

/// The error of a hold that could not be had: names the buffer (its
/// address and length), who wanted it, and why.
#[cold]
pub(crate) fn conflict(mem: &HostMem, access: Access, who: &str) -> Error {
    let what = match access {
        Access::Read => "read",
        Access::Write => "write",
    };
    let why = match mem.hold.life() {
        Life::Pending => "before its alloca ran (wait for the alloca's signals)",
        Life::Gone => "after its dealloca ran",
        Life::Live => match access {
            Access::Read => "while a running action writes it (order the two with a semaphore)",
            Access::Write => "while a running action uses it (order the two with a semaphore)",
        },
    };
    Error::new(
        ErrorKind::FailedPrecondition,
        format!(
            "buffer {:p} ({} bytes): {who} would {what} it {why}",
            mem.ptr, mem.len
        ),
    )
}

fn too_large(len: usize) -> Error {
    Error::new(
        ErrorKind::ResourceExhausted,
        format!("buffer of {len} bytes: out of host memory"),
    )
}

/// A counted handle to a [`HostMem`] (what a CPU [`Buffer`](super::buffer::Buffer)
/// holds). Cloning counts one more; the last drop frees the memory, or
/// hands a transient buffer's block back to its pool.
pub(crate) type HostRef = Counted<HostMem>;

impl Counted<HostMem> {
    /// `len > 0` zeroed bytes of their own (`Device::buffer`).
    pub(crate) fn zeroed(len: usize, device: u64) -> Result<HostRef, Error> {
        Self::zeroed_in(len, device, false)
    }

    /// `len > 0` bytes at `ptr` that a device mapped for the host
    /// (`mapped.capacity >= len` of them), zeroed here, freed by dropping
    /// `mapped.owner` with the last handle, or taken back by
    /// `mapped.recycle`. Pending (unusable until its alloca runs) if
    /// `mapped.transient`.
    ///
    /// # Safety
    /// `ptr..ptr + mapped.capacity` is memory nothing else reaches but
    /// through this handle (and the device's work, which holds it), valid
    /// and aligned to [`BUFFER_ALIGN`] until `mapped.owner` is dropped.
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) unsafe fn mapped(
        ptr: NonNull<u8>,
        len: usize,
        device: u64,
        mapped: Mapped,
    ) -> HostRef {
        debug_assert!(len > 0 && len <= mapped.capacity);
        debug_assert!(ptr.as_ptr() as usize % BUFFER_ALIGN == 0);
        // SAFETY: valid for `len` bytes, reached by no one else (contract).
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        let hold = if mapped.transient {
            Hold::new_pending()
        } else {
            Hold::new()
        };
        let mem = Box::new(HostMem {
            refs: AtomicUsize::new(1),
            ptr,
            len,
            hold,
            device,
            home: Home::Mapped(mapped),
        });
        // SAFETY: a new value, counted 1 (this handle), freed only by its
        // `last_drop` (or its recycler).
        unsafe { Counted::from_raw(NonNull::from(Box::leak(mem))) }
    }

    /// A recycled transient header handed out again: `len` bytes zeroed,
    /// pending, counted 1.
    ///
    /// # Safety
    /// The caller owns `mem` (taken back by its [`Recycle`]), a transient
    /// mapped header with `len <= capacity`, `len > 0`.
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) unsafe fn reuse_mapped(mem: NonNull<HostMem>, len: usize) -> HostRef {
        let m = mem.as_ptr();
        // SAFETY: owned by the caller (contract): no other reference.
        unsafe { (*m).len = len };
        // SAFETY: as above.
        unsafe { (*m).refs = AtomicUsize::new(1) };
        // SAFETY: as above.
        unsafe { (*m).hold = Hold::new_pending() };
        // SAFETY: as above.
        let bytes = unsafe { (*m).ptr.as_ptr() };
        // SAFETY: `len` bytes of the mapping (`len <= capacity`), reached
        // by no one else (contract).
        unsafe { bytes.write_bytes(0, len) };
        // SAFETY: counted 1 (this handle); freed or recycled only by its
        // `last_drop`.
        unsafe { Counted::from_raw(mem) }
    }

    /// `zeroed`, as `Home::Heap { transient }`.
    fn zeroed_in(len: usize, device: u64, transient: bool) -> Result<HostRef, Error> {
        let layout = Layout::from_size_align(len, BUFFER_ALIGN).map_err(|_| too_large(len))?;
        // SAFETY: `len > 0` (the caller's check).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| too_large(len))?;
        let mem = Box::new(HostMem {
            refs: AtomicUsize::new(1),
            ptr,
            len,
            hold: Hold::new(),
            device,
            home: Home::Heap { transient },
        });
        // SAFETY: a new value, counted 1 (this handle), freed only by
        // its `last_drop`.
        Ok(unsafe { Counted::from_raw(NonNull::from(Box::leak(mem))) })
    }
}

// SAFETY: `refs` is the handles' count alone.
unsafe impl Counts for HostMem {
    fn count(&self) -> &AtomicUsize {
        &self.refs
    }

    unsafe fn last_drop(this: NonNull<HostMem>) {
        let mem = this.as_ptr();
        // SAFETY: the last handle: nothing else reaches the memory, which
        // is valid until freed below.
        let heap = matches!(unsafe { &(*mem).home }, Home::Heap { .. });
        if heap {
            // SAFETY: as above.
            let bytes = unsafe { (*mem).ptr.as_ptr() };
            // SAFETY: as above.
            let len = unsafe { (*mem).len };
            // SAFETY: `len` and `BUFFER_ALIGN` made a valid layout when
            // the bytes were allocated (`zeroed_in`).
            let layout = unsafe { Layout::from_size_align_unchecked(len, BUFFER_ALIGN) };
            // SAFETY: allocated by `alloc_zeroed` with this layout, freed
            // once (the last handle).
            unsafe { std::alloc::dealloc(bytes, layout) };
            // SAFETY: made by `Box::leak` in `zeroed_in`, freed once.
            drop(unsafe { Box::from_raw(mem) });
            return;
        }
        // SAFETY: as above.
        if let Home::Mapped(m) = unsafe { &(*mem).home } {
            if let Some(pool) = m.recycle.as_ref().and_then(std::sync::Weak::upgrade) {
                // SAFETY: the last handle is gone: the recycler owns it now.
                unsafe { pool.recycle(this) };
            } else {
                // SAFETY: made by `Box::leak` in `mapped`, freed once; its
                // owner unmaps and frees the bytes as it drops.
                unsafe { HostMem::free_mapped(this) };
            }
            return;
        }
        // SAFETY: the header is valid until its block goes back below.
        let home = unsafe { std::ptr::addr_of!((*mem).home) };
        // SAFETY: a pooled header: its `home` is moved out here, once; its
        // other fields own nothing, and the header goes with the block.
        let Home::Pool { pool, class, index } = (unsafe { home.read() }) else {
            unreachable!("matched above");
        };
        // SAFETY: the header starts block `index` of class `class`'s pool
        // (`TransientPool::alloca`).
        let block = unsafe { RawBlock::from_parts(this.cast::<u8>(), index) };
        // SAFETY: that pool's block, given back once.
        unsafe { pool.classes[class].release_raw(block) };
        drop(pool);
    }
}

/// The smallest transient size class, in bytes.
const SMALLEST: usize = 64;
/// Size classes: `SMALLEST << c` bytes for `c` below this (up to 1 GiB);
/// a larger `alloca` gets memory of its own.
const CLASSES: usize = 25;
/// Bytes before a transient block's data: its header, rounded to the
/// alignment of the data.
const HEADER: usize = std::mem::size_of::<HostMem>().next_multiple_of(BUFFER_ALIGN);

/// A device's memory for `Queue::alloca`: one block pool per power-of-two
/// size class, each block a buffer's header and its bytes. Lock-free; a
/// class takes memory only when more of its buffers are alive at once
/// than ever before, and keeps it until the device (and every buffer it
/// handed out) is gone.
pub(crate) struct TransientPool {
    /// On the heap, made one at a time: a pool's chunk table is large (and
    /// larger under the model checker, whose threads' stacks are small).
    classes: Box<[BlockPool]>,
}

impl TransientPool {
    pub(crate) fn new() -> TransientPool {
        TransientPool {
            classes: (0..CLASSES)
                .map(|c| {
                    BlockPool::with_config(BlockPoolConfig {
                        block_size: HEADER + (SMALLEST << c),
                        align: BUFFER_ALIGN,
                        first_chunk_blocks: 1,
                        max_blocks: None,
                    })
                    .expect("a valid pool shape")
                })
                .collect(),
        }
    }

    /// A buffer of `len > 0` zeroed bytes, pending (unusable until its
    /// alloca runs: [`Hold::make_live`]).
    pub(crate) fn alloca(
        this: &std::sync::Arc<TransientPool>,
        len: usize,
        device: u64,
    ) -> Result<HostRef, Error> {
        let class = (0..CLASSES).find(|&c| SMALLEST << c >= len);
        let Some(class) = class else {
            // Past the largest class: memory of its own, pending as well,
            // given back by `dealloca` like a pooled one (freed, not
            // pooled, when its last handle drops).
            let r = HostRef::zeroed_in(len, device, true)?;
            r.hold.set_pending();
            return Ok(r);
        };
        let block = this.classes[class].acquire_raw()?;
        let base = block.as_ptr().as_ptr();
        let index = block.index();
        // The block is ours (just acquired): `HEADER + (SMALLEST <<
        // class)` bytes at `base`, aligned to `BUFFER_ALIGN`, which fits a
        // `HostMem` (`HEADER`) and `len` bytes after it.
        // SAFETY: `HEADER` is within the block.
        let data = unsafe { base.add(HEADER) };
        // Zeroed: safe code may read the bytes as any `Pod` type.
        // SAFETY: `len` bytes from `data` are the block's (above).
        unsafe { std::ptr::write_bytes(data, 0, len) };
        let header = block.as_ptr().cast::<HostMem>();
        // SAFETY: the block's start, aligned and sized for a `HostMem`.
        unsafe {
            header.write(HostMem {
                refs: AtomicUsize::new(1),
                ptr: NonNull::new(data).expect("an address inside a block"),
                len,
                hold: Hold::new_pending(),
                device,
                home: Home::Pool {
                    pool: this.clone(),
                    class,
                    index,
                },
            })
        };
        // SAFETY: written above, counted 1 (this handle); its block goes
        // back only in its `last_drop`.
        Ok(unsafe { Counted::from_raw(header) })
    }
}
