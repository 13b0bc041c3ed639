//! A CUDA stream owned by fenceline.

use std::sync::Arc;

use cudarc::driver::sys::{self};

use super::{check, Context};
use crate::error::Error;

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
        let r = unsafe {
            sys::cuStreamCreateWithPriority(
                &mut raw,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                priority,
            )
        };
        check(r, "cuStreamCreateWithPriority")?;
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
        let r = unsafe { sys::cuStreamGetPriority(self.raw, &mut priority) };
        check(r, "cuStreamGetPriority")?;
        Ok(priority)
    }

    /// Waits on the host until everything issued to the stream is done.
    pub(crate) fn synchronize(&self) -> Result<(), Error> {
        let _cur = self.ctx.enter()?;
        // SAFETY: a live stream; the context is current.
        let r = unsafe { sys::cuStreamSynchronize(self.raw) };
        check(r, "cuStreamSynchronize")
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
