//! A loaded module.

use std::sync::Arc;

use cudarc::driver::sys::{self};

use super::Context;

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
