//! An instantiated graph.

use std::sync::Arc;

use cudarc::driver::sys::{self};

use super::Context;

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
