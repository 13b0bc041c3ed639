//! A pooled CUDA event.

use cudarc::driver::sys::{self};

use super::{check, Context};
use crate::error::Error;

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
        let r = unsafe {
            sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        };
        check(r, "cuEventCreate")?;
        Ok(Event { raw })
    }

    pub(crate) fn destroy(self, ctx: &Context) {
        if let Ok(_cur) = ctx.enter() {
            // SAFETY: created by `new`, destroyed once (the pool's destroy).
            let _ = unsafe { sys::cuEventDestroy_v2(self.raw) };
        }
    }
}
