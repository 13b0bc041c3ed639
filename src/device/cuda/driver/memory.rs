//! Device memory (a buffer's, or a queue-ordered alloca's) and page-locked
//! host memory.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self};

use super::{check, Context};
use crate::device::data::hold::{Access, Hold, Life};
use crate::error::{Error, ErrorKind};

/// Device memory, freed on drop: a buffer's (`cuMemAlloc`), or a
/// `Queue::alloca`'s (stream-ordered: see [`Transient`]).
pub(crate) struct DeviceMem {
    /// The address; 0 until a transient's alloca was issued. Written once
    /// by the queue's issuer (Release), read by whoever records or issues
    /// work with it (Acquire: sees it complete).
    ptr: AtomicU64,
    pub(crate) len: usize,
    pub(crate) ctx: Arc<Context>,
    /// `Some` for memory from `Queue::alloca`.
    pub(crate) transient: Option<Transient>,
}

/// The queue-ordered life of memory from `Queue::alloca` on a CUDA device.
///
/// "Ran" means *issued to the queue's stream*: the alloca's action
/// enqueues `cuMemAllocAsync` (and a zeroing memset), the dealloca's
/// `cuMemFreeAsync`. Every stream-ordered use is confined to the
/// allocating queue (checked at submission), so a use issued after the
/// alloca and before the dealloca runs between them on the stream, and a
/// dealloca issued while earlier work still runs frees the memory only
/// after it (stream order). Host copies are not stream-ordered: they need
/// the stream to have *reached* the allocation (the alloca's action
/// completed), and hold the life word while they copy, so a dealloca
/// cannot be issued under one.
///
/// The life word is a [`Hold`]: `PENDING` until the alloca's action
/// completed (host copies fail), host copies hold it shared, `GONE` once
/// the dealloca was issued (every use fails from then on).
pub(crate) struct Transient {
    pub(crate) life: Hold,
    /// The queue whose stream orders every use.
    pub(crate) queue: usize,
    /// The stream-ordered free was enqueued: nothing to free on drop.
    /// Issuer only (one thread at a time per queue), read by the last
    /// handle's drop after every action holding a handle completed.
    freed: AtomicBool,
}

impl fmt::Debug for DeviceMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMem").field("len", &self.len).finish()
    }
}

fn gone_error(len: usize, what: &str) -> Error {
    Error::new(
        ErrorKind::FailedPrecondition,
        format!("{what} a buffer from Queue::alloca ({len} bytes) after its dealloca ran"),
    )
}

impl DeviceMem {
    /// `len` zeroed bytes of device memory.
    pub(crate) fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<DeviceMem, Error> {
        let _cur = ctx.enter()?;
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; the context is current.
        check(unsafe { sys::cuMemAlloc_v2(&mut ptr, len) }, "cuMemAlloc").map_err(|e| {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!("device buffer of {len} bytes: {}", e.message()),
            )
        })?;
        let mem = DeviceMem {
            ptr: AtomicU64::new(ptr),
            len,
            ctx: ctx.clone(),
            transient: None,
        };
        // SAFETY: `len` bytes at `ptr` were just allocated.
        check(unsafe { sys::cuMemsetD8_v2(ptr, 0, len) }, "cuMemsetD8")?;
        // The memset may still run on the legacy stream, which fenceline's
        // non-blocking streams do not wait for: finish it here.
        // SAFETY: the null stream is always valid; the context is current.
        let r = unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) };
        check(r, "cuStreamSynchronize")?;
        Ok(mem)
    }

    /// Memory for `Queue::alloca` on queue `queue`: no address until its
    /// alloca is issued ([`alloc_on`](Self::alloc_on)).
    pub(crate) fn transient(ctx: &Arc<Context>, len: usize, queue: usize) -> DeviceMem {
        DeviceMem {
            ptr: AtomicU64::new(0),
            len,
            ctx: ctx.clone(),
            transient: Some(Transient {
                life: Hold::new_pending(),
                queue,
                freed: AtomicBool::new(false),
            }),
        }
    }

    /// The address, for recording or issuing stream work: a transient's
    /// only between its alloca's and its dealloca's issue.
    pub(crate) fn ptr(&self) -> Result<u64, Error> {
        // Acquire: pairs with the Release store in `alloc_on`.
        let ptr = self.ptr.load(Ordering::Acquire);
        if let Some(t) = &self.transient {
            if t.life.life() == Life::Gone {
                return Err(gone_error(self.len, "using"));
            }
            if ptr == 0 {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "using a buffer from Queue::alloca ({} bytes) before its alloca ran",
                        self.len
                    ),
                ));
            }
        }
        Ok(ptr)
    }

    /// The alloca's action, issued: enqueues `cuMemAllocAsync` and a
    /// zeroing memset on `stream`. `FailedPrecondition` if its dealloca
    /// was issued first (nothing is allocated).
    ///
    /// # Safety
    /// `stream` is the live stream of the buffer's queue, the context is
    /// current, and the caller is that queue's issuer.
    pub(crate) unsafe fn alloc_on(&self, stream: sys::CUstream) -> Result<(), Error> {
        let Some(t) = &self.transient else {
            return Err(Error::new(ErrorKind::Internal, "alloca of a plain buffer"));
        };
        if t.life.life() == Life::Gone {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "alloca of a buffer ({} bytes): its dealloca ran first",
                    self.len
                ),
            ));
        }
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; live stream, context current.
        let r = unsafe { sys::cuMemAllocAsync(&mut ptr, self.len, stream) };
        check(r, "cuMemAllocAsync").map_err(|e| {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!("alloca of {} bytes: {}", self.len, e.message()),
            )
        })?;
        // SAFETY: `len` bytes at `ptr`, allocated earlier on this stream.
        let r = unsafe { sys::cuMemsetD8Async(ptr, 0, self.len, stream) };
        let zero = check(r, "cuMemsetD8Async");
        if let Err(e) = zero {
            // SAFETY: allocated just above on this stream, used by nothing.
            let _ = unsafe { sys::cuMemFreeAsync(ptr, stream) };
            return Err(e);
        }
        // Release: pairs with the Acquire loads in `ptr`, `free_on` and
        // `host_copy`; publishes the address to whoever reads it.
        self.ptr.store(ptr, Ordering::Release);
        Ok(())
    }

    /// The alloca's action completed (its stream reached the allocation):
    /// host copies may use the memory from now on.
    pub(crate) fn reached(&self) {
        if let Some(t) = &self.transient {
            // `false` if the dealloca was issued first: then it stays gone.
            let _ = t.life.make_live();
        }
    }

    /// The dealloca's action, issued: nothing may use the memory from now
    /// on; enqueues `cuMemFreeAsync` on `stream` (after every use issued
    /// before, which is stream-ordered before it). `FailedPrecondition`
    /// (and the memory stays usable) if a host copy holds it, or if a
    /// dealloca was issued already.
    ///
    /// # Safety
    /// As for [`alloc_on`](Self::alloc_on).
    pub(crate) unsafe fn free_on(&self, stream: sys::CUstream) -> Result<(), Error> {
        let Some(t) = &self.transient else {
            return Err(Error::new(
                ErrorKind::Internal,
                "dealloca of a plain buffer",
            ));
        };
        t.life.close().map_err(|life| {
            Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "dealloca of a buffer ({} bytes): {}",
                    self.len,
                    match life {
                        Life::Gone => "its dealloca ran already",
                        _ => "a host copy still uses it (the buffer stays usable)",
                    }
                ),
            )
        })?;
        // Acquire: pairs with the Release store in `alloc_on`; sees the
        // address its alloca stored, if it ran.
        let ptr = self.ptr.load(Ordering::Acquire);
        if ptr == 0 {
            // Its alloca never ran (and now never will): nothing to free.
            return Ok(());
        }
        // SAFETY: allocated on this stream by `alloc_on`; every use was
        // enqueued on this stream before (a use is only ever issued to the
        // allocating queue) or fails from now on (`GONE`).
        let r = unsafe { sys::cuMemFreeAsync(ptr, stream) };
        check(r, "cuMemFreeAsync")?;
        t.freed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Runs a host copy of the memory: a transient's only once its alloca
    /// completed and not after its dealloca was issued, holding its life
    /// word meanwhile.
    fn host_copy(&self, f: impl FnOnce(u64) -> Result<(), Error>) -> Result<(), Error> {
        let Some(t) = &self.transient else {
            // Acquire: pairs with nothing; a plain buffer's address is set
            // in `zeroed` and published with the buffer itself.
            return f(self.ptr.load(Ordering::Acquire));
        };
        if !t.life.try_take(Access::Read) {
            return Err(match t.life.life() {
                Life::Gone => gone_error(self.len, "copying from the host"),
                _ => Error::new(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "copying from the host a buffer from Queue::alloca ({} bytes) before \
                         its alloca ran",
                        self.len
                    ),
                ),
            });
        }
        // Acquire: pairs with the Release store in `alloc_on`; the alloca
        // completed (the live hold just taken), so its address is stored.
        let r = f(self.ptr.load(Ordering::Acquire));
        t.life.give_back(Access::Read)?;
        r
    }

    /// Copies device bytes `offset..offset + out.len()` to `out`
    /// (synchronous; the caller checked the range).
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        if out.is_empty() {
            return Ok(());
        }
        self.host_copy(|ptr| {
            let _cur = self.ctx.enter()?;
            // SAFETY: the range is inside the live allocation (checked by
            // the caller; `host_copy` keeps it allocated) and `out` holds
            // `out.len()` writable bytes.
            let r = unsafe {
                sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptr + offset as u64, out.len())
            };
            check(r, "cuMemcpyDtoH")
        })
    }
}

impl DeviceMem {
    /// Copies `data` to device bytes `offset..offset + data.len()`
    /// (synchronous; the caller checked the range).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        if data.is_empty() {
            return Ok(());
        }
        self.host_copy(|ptr| {
            let _cur = self.ctx.enter()?;
            // SAFETY: the range is inside the live allocation (checked by
            // the caller; `host_copy` keeps it allocated) and `data` holds
            // `data.len()` readable bytes.
            let r = unsafe {
                sys::cuMemcpyHtoD_v2(ptr + offset as u64, data.as_ptr().cast(), data.len())
            };
            check(r, "cuMemcpyHtoD")
        })
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        let ptr = *self.ptr.get_mut();
        let freed = self.transient.as_mut().is_some_and(|t| *t.freed.get_mut());
        if ptr == 0 || freed {
            return;
        }
        if let Ok(_cur) = self.ctx.enter() {
            // SAFETY: allocated once (`zeroed`, or `alloc_on` whose action
            // completed: every submission holding a handle has completed,
            // so no stream work uses it), freed once.
            let _ = unsafe { sys::cuMemFree_v2(ptr) };
        }
    }
}

/// Page-locked host memory (`cuMemAllocHost`): staging for `update`.
pub(crate) struct PinnedMem {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    ctx: Arc<Context>,
}

// SAFETY: plain memory owned by this handle.
unsafe impl Send for PinnedMem {}
// SAFETY: only read through shared references.
unsafe impl Sync for PinnedMem {}

impl PinnedMem {
    pub(crate) fn new(ctx: &Arc<Context>, len: usize) -> Result<PinnedMem, Error> {
        let _cur = ctx.enter()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context is current.
        let r = unsafe { sys::cuMemAllocHost_v2(&mut ptr, len) };
        check(r, "cuMemAllocHost")?;
        Ok(PinnedMem {
            ptr: ptr.cast(),
            len,
            ctx: ctx.clone(),
        })
    }
}

impl Drop for PinnedMem {
    fn drop(&mut self) {
        if let Ok(_cur) = self.ctx.enter() {
            // SAFETY: allocated in `new`, freed once.
            let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
        }
    }
}
