//! Thin wrappers over the CUDA driver API (through `cudarc::driver::sys`,
//! dynamically loaded): error mapping, the symbol probe, the primary
//! context and the handles fenceline owns (streams, events, memory,
//! modules, graph execs). Every other CUDA file calls the driver through
//! these.

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};

use crate::device::hold::{Access, Hold, Life};
use crate::error::{Error, ErrorKind};

/// Every driver symbol fenceline calls: probed when a device opens, so a
/// driver missing one is `Unavailable` instead of a panic later.
pub(crate) const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxGetStreamPriorityRange",
    "cuStreamCreateWithPriority",
    "cuStreamGetPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuLaunchHostFunc",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemsetD8_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphAddEmptyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddMemcpyNode",
    "cuGraphAddKernelNode_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphExecDestroy",
    "cuGraphLaunch",
    "cuLaunchKernel",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuGraphExecKernelNodeSetParams_v2",
];

/// `Ok` for `CUDA_SUCCESS`, else an `Internal` error naming the call.
/// Allocates only on the error path.
pub(crate) fn check(result: CUresult, call: &'static str) -> Result<(), Error> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Internal,
            format!("{call} failed: {result:?}"),
        ))
    }
}

fn unavailable(reason: String) -> Error {
    Error::new(ErrorKind::Unavailable, reason)
}

/// Loads the driver, checks every symbol fenceline uses, and runs
/// `cuInit`. Never panics: no library, a missing symbol, or a failing
/// `cuInit` is `Unavailable` with the reason.
pub(crate) fn load() -> Result<(), Error> {
    // SAFETY: only tries to dlopen the candidate library names.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable(
            "no CUDA driver library (libcuda.so) could be loaded".into(),
        ));
    }
    // cudarc panics inside if loading fails after all; contain that.
    let probe = std::panic::catch_unwind(|| {
        // SAFETY: the library is present (checked above); `get` only
        // resolves a symbol.
        let lib = unsafe { sys::culib() };
        SYMBOLS
            .iter()
            // SAFETY: resolving a symbol address does not call it.
            .find(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
            .copied()
    });
    match probe {
        Ok(None) => {}
        Ok(Some(missing)) => {
            return Err(unavailable(format!(
                "the CUDA driver library has no symbol {missing}"
            )))
        }
        Err(_) => {
            return Err(unavailable(
                "loading the CUDA driver library panicked".into(),
            ))
        }
    }
    // SAFETY: every symbol is present; cuInit(0) is always valid to call.
    let r = unsafe { sys::cuInit(0) };
    if r != CUresult::CUDA_SUCCESS {
        return Err(unavailable(format!("cuInit failed: {r:?}")));
    }
    Ok(())
}

/// A device's primary context, retained while any holder lives.
pub(crate) struct Context {
    pub(crate) raw: sys::CUcontext,
    device: sys::CUdevice,
    pub(crate) name: String,
}

// SAFETY: a CUDA context handle may be used from any thread (it is made
// current per call with push/pop).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("name", &self.name).finish()
    }
}

impl Context {
    /// Retains the primary context of device `ordinal`.
    pub(crate) fn primary(ordinal: usize) -> Result<Arc<Context>, Error> {
        let mut count = 0;
        // SAFETY: out-pointer to a local.
        check(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "cuDeviceGetCount",
        )
        .map_err(|e| unavailable(e.message().to_string()))?;
        if ordinal >= count.max(0) as usize {
            return Err(unavailable(format!(
                "CUDA device ordinal {ordinal}: the driver reports {count} device(s)"
            )));
        }
        let mut device = 0;
        // SAFETY: out-pointer to a local; the ordinal is in range.
        check(
            unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) },
            "cuDeviceGet",
        )
        .map_err(|e| unavailable(e.message().to_string()))?;
        let mut name = [0 as std::ffi::c_char; 128];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates.
        let r = unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) };
        let name = if r == CUresult::CUDA_SUCCESS {
            // SAFETY: NUL-terminated by the driver within the buffer.
            unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("CUDA device {ordinal}")
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `device` is valid.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, device) },
            "cuDevicePrimaryCtxRetain",
        )
        .map_err(|e| unavailable(e.message().to_string()))?;
        Ok(Arc::new(Context { raw, device, name }))
    }

    /// Makes the context current on this thread until the guard drops.
    ///
    /// No driver call when fenceline already found or made this context
    /// current on this thread (a thread-local cache). Otherwise it asks the
    /// driver: a thread with no current context gets this one for good
    /// (as the CUDA runtime binds the primary context on a thread's first
    /// call), and from then on costs nothing; a thread with another context
    /// current gets a push now and a pop when the guard drops, so its own
    /// context is restored.
    pub(crate) fn enter(&self) -> Result<Entered<'_>, Error> {
        if CURRENT.with(Cell::get) == self.raw {
            return Ok(Entered {
                _ctx: self,
                restore: None,
            });
        }
        let mut current = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(
            unsafe { sys::cuCtxGetCurrent(&mut current) },
            "cuCtxGetCurrent",
        )?;
        if current.is_null() {
            return self.set_current().map(|()| Entered {
                _ctx: self,
                restore: None,
            });
        }
        if current == self.raw {
            CURRENT.with(|c| c.set(self.raw));
            return Ok(Entered {
                _ctx: self,
                restore: None,
            });
        }
        // SAFETY: the context is retained while `self` lives.
        check(
            unsafe { sys::cuCtxPushCurrent_v2(self.raw) },
            "cuCtxPushCurrent",
        )?;
        // The cache follows the driver: an `enter` nested in this one
        // (an event the pool creates during an issue) finds this context
        // current without a call, and the pop puts back what the driver
        // had, so the cache never outlives the push (a cache of this
        // context past the pop would let the thread's next issue skip the
        // push and run under the thread's own context).
        CURRENT.with(|c| c.set(self.raw));
        Ok(Entered {
            _ctx: self,
            restore: Some(current),
        })
    }

    /// Makes the context current on this thread for good (threads
    /// fenceline owns, and threads that had none).
    pub(crate) fn set_current(&self) -> Result<(), Error> {
        // SAFETY: the context is retained while `self` lives.
        check(unsafe { sys::cuCtxSetCurrent(self.raw) }, "cuCtxSetCurrent")?;
        CURRENT.with(|c| c.set(self.raw));
        Ok(())
    }
}

thread_local! {
    /// The context fenceline last found or made current on this thread
    /// (null: none known). fenceline never makes another context current
    /// without restoring it; a thread whose own code later makes a
    /// different context current, after it issued fenceline work, calls
    /// [`forget_current_context`].
    static CURRENT: Cell<sys::CUcontext> = const { Cell::new(std::ptr::null_mut()) };
}

/// Tells fenceline that the calling thread's current CUDA context may have
/// changed (the thread made another context current with its own driver
/// or runtime calls). fenceline then asks the driver again before its next
/// CUDA call on this thread. Threads that never change their current
/// context never need it.
pub fn forget_current_context() {
    CURRENT.with(|c| c.set(std::ptr::null_mut()));
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained once in `primary`, released once here.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// The context is current on this thread while this lives.
pub(crate) struct Entered<'a> {
    _ctx: &'a Context,
    /// `Some(previous)` when `enter` pushed the context over `previous`:
    /// popped on drop, and the thread's cache set back to `previous`.
    restore: Option<sys::CUcontext>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let Some(cached) = self.restore else {
            return;
        };
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context pushed by `enter` on this thread.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        CURRENT.with(|c| c.set(cached));
    }
}

/// A CUDA stream owned by fenceline.
pub(crate) struct Stream {
    pub(crate) raw: sys::CUstream,
    ctx: Arc<Context>,
}

// SAFETY: stream handles may be used from any thread with the context
// current; fenceline serializes issue to one stream (drain protocol).
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    /// A non-blocking stream (no implicit sync with the legacy stream) of
    /// CUDA stream priority `priority` (from
    /// [`StreamPriorities`](super::stream_priority::StreamPriorities); the
    /// driver clamps a value outside the context's range).
    pub(crate) fn new(ctx: &Arc<Context>, priority: i32) -> Result<Stream, Error> {
        let _cur = ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context is current.
        check(
            unsafe {
                sys::cuStreamCreateWithPriority(
                    &mut raw,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                    priority,
                )
            },
            "cuStreamCreateWithPriority",
        )?;
        Ok(Stream {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// The stream's priority as the driver reports it
    /// (`cuStreamGetPriority`): what tests check the mapping with.
    #[cfg(feature = "testing")]
    pub(crate) fn priority(&self) -> Result<i32, Error> {
        let _cur = self.ctx.enter()?;
        let mut priority = 0;
        // SAFETY: a live stream; out-pointer to a local.
        check(
            unsafe { sys::cuStreamGetPriority(self.raw, &mut priority) },
            "cuStreamGetPriority",
        )?;
        Ok(priority)
    }

    /// Waits on the host until everything issued to the stream is done.
    pub(crate) fn synchronize(&self) -> Result<(), Error> {
        let _cur = self.ctx.enter()?;
        // SAFETY: a live stream; the context is current.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(_cur) = self.ctx.enter() {
            // SAFETY: created in `new`, destroyed once.
            let _ = unsafe { sys::cuStreamDestroy_v2(self.raw) };
        }
    }
}

/// A pooled CUDA event (timing disabled). Destroyed by its pool.
pub(crate) struct Event {
    pub(crate) raw: sys::CUevent,
}

// SAFETY: event handles may be used from any thread with the context
// current.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    pub(crate) fn new(ctx: &Context) -> Result<Event, Error> {
        let _cur = ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context is current.
        check(
            unsafe {
                sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            },
            "cuEventCreate",
        )?;
        Ok(Event { raw })
    }

    pub(crate) fn destroy(self, ctx: &Context) {
        if let Ok(_cur) = ctx.enter() {
            // SAFETY: created by `new`, destroyed once (the pool's destroy).
            let _ = unsafe { sys::cuEventDestroy_v2(self.raw) };
        }
    }
}

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
        check(
            unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) },
            "cuStreamSynchronize",
        )?;
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
        check(
            unsafe { sys::cuMemAllocAsync(&mut ptr, self.len, stream) },
            "cuMemAllocAsync",
        )
        .map_err(|e| {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!("alloca of {} bytes: {}", self.len, e.message()),
            )
        })?;
        // SAFETY: `len` bytes at `ptr`, allocated earlier on this stream.
        let zero = check(
            unsafe { sys::cuMemsetD8Async(ptr, 0, self.len, stream) },
            "cuMemsetD8Async",
        );
        if let Err(e) = zero {
            // SAFETY: allocated just above on this stream, used by nothing.
            let _ = unsafe { sys::cuMemFreeAsync(ptr, stream) };
            return Err(e);
        }
        // Release: the address to whoever reads it (Acquire in `ptr`).
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
        let ptr = self.ptr.load(Ordering::Acquire);
        if ptr == 0 {
            // Its alloca never ran (and now never will): nothing to free.
            return Ok(());
        }
        // SAFETY: allocated on this stream by `alloc_on`; every use was
        // enqueued on this stream before (a use is only ever issued to the
        // allocating queue) or fails from now on (`GONE`).
        check(
            unsafe { sys::cuMemFreeAsync(ptr, stream) },
            "cuMemFreeAsync",
        )?;
        t.freed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Runs a host copy of the memory: a transient's only once its alloca
    /// completed and not after its dealloca was issued, holding its life
    /// word meanwhile.
    fn host_copy(&self, f: impl FnOnce(u64) -> Result<(), Error>) -> Result<(), Error> {
        let Some(t) = &self.transient else {
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
            check(
                unsafe {
                    sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptr + offset as u64, out.len())
                },
                "cuMemcpyDtoH",
            )
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
            check(
                unsafe {
                    sys::cuMemcpyHtoD_v2(ptr + offset as u64, data.as_ptr().cast(), data.len())
                },
                "cuMemcpyHtoD",
            )
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
        check(
            unsafe { sys::cuMemAllocHost_v2(&mut ptr, len) },
            "cuMemAllocHost",
        )?;
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

/// A loaded module (`cuModuleLoadData`).
pub(crate) struct Module {
    pub(crate) raw: sys::CUmodule,
    pub(crate) ctx: Arc<Context>,
}

// SAFETY: module handles may be used from any thread with the context
// current.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        if let Ok(_cur) = self.ctx.enter() {
            // SAFETY: loaded once, unloaded once (after every function of
            // it: functions hold the module).
            let _ = unsafe { sys::cuModuleUnload(self.raw) };
        }
    }
}

/// An instantiated graph (`cuGraphInstantiate`), launched per submission.
pub(crate) struct GraphExec {
    pub(crate) raw: sys::CUgraphExec,
    pub(crate) ctx: Arc<Context>,
}

// SAFETY: exec handles may be launched from any thread with the context
// current; launches of one exec are ordered by the driver.
unsafe impl Send for GraphExec {}
// SAFETY: as above.
unsafe impl Sync for GraphExec {}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if let Ok(_cur) = self.ctx.enter() {
            // SAFETY: instantiated once, destroyed once; submissions hold
            // the recording (hence this) until they complete.
            let _ = unsafe { sys::cuGraphExecDestroy(self.raw) };
        }
    }
}
