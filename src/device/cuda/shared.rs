//! What every queue, buffer and recording of one CUDA device shares
//! ([`CudaShared`]): what a recording's `Target` holds.

use std::sync::Arc;

use super::driver::{Context, Event};
use super::memory::HandlePool;
use super::pinned::PinnedPool;
use crate::semaphore::EventPool;

/// What every queue, buffer and recording of one CUDA device shares.
pub(crate) struct CudaShared {
    pub(crate) ctx: Arc<Context>,
    pub(crate) events: EventPool<Event>,
    pub(crate) pinned: Arc<PinnedPool>,
    /// Waits met on the GPU so far (`cuStreamWaitEvent` calls).
    pub(crate) device_waits: std::sync::atomic::AtomicU64,
    /// Handles of `Queue::alloca`'s buffers, reused.
    pub(crate) handles: Arc<HandlePool>,
}
