//! The primary context a device retains, and the thread's current one.

use std::cell::Cell;
use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};

use super::{check, unavailable};
use crate::error::Error;

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
        let r = unsafe { sys::cuDeviceGetCount(&mut count) };
        check(r, "cuDeviceGetCount").map_err(|e| unavailable(e.message().to_string()))?;
        if ordinal >= count.max(0) as usize {
            return Err(unavailable(format!(
                "CUDA device ordinal {ordinal}: the driver reports {count} device(s)"
            )));
        }
        let mut device = 0;
        // SAFETY: out-pointer to a local; the ordinal is in range.
        let r = unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) };
        check(r, "cuDeviceGet").map_err(|e| unavailable(e.message().to_string()))?;
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
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, device) };
        check(r, "cuDevicePrimaryCtxRetain").map_err(|e| unavailable(e.message().to_string()))?;
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
        let r = unsafe { sys::cuCtxGetCurrent(&mut current) };
        check(r, "cuCtxGetCurrent")?;
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
        let r = unsafe { sys::cuCtxPushCurrent_v2(self.raw) };
        check(r, "cuCtxPushCurrent")?;
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
