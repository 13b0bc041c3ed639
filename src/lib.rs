//! fenceline: a lock-free scheduler that runs work on queues (a CPU task
//! executor, CUDA streams) gated by timeline semaphores, with zero heap
//! allocations per submission in steady state.
//!
//! Start with [`Device::cpu`]: its [`Queue`]s run [`CommandBuffer`]s and
//! host calls once their wait [`Semaphore`]s reach their values, then
//! signal. A queue orders nothing by itself: only semaphores order work.
//! Two layers below the devices are public, for embedders:
//!
//! - [`task`]: the CPU task system, a work-stealing
//!   [`Executor`](task::Executor) running pool-allocated task DAGs;
//! - [`queue`]: the lock-free [`PendingQueue`](queue::PendingQueue) every
//!   device queue is built on (submit, drain-protocol issue, completion),
//!   for custom backends;
//! - [`semaphore`]: timeline [`Semaphore`]s with host waits
//!   ([`wait_all`], [`wait_any`], [`Timeout`]) and the device `EventPool`;
//! - [`Error`] and [`ErrorKind`].
//!
//! Every concurrent piece is written against one synchronization shim
//! (std, or loom under `--cfg fenceline_loom`) and model-checked in
//! `loom-tests/`.
//!
//! # Features
//!
//! - `cuda`: the CUDA device (cudarc, loaded at run time: no CUDA toolkit
//!   needed to build).
//! - `testing`: the internal layers, for fenceline's own tests, benches,
//!   fuzz targets and loom models, with no stability promise: `pool`
//!   (block pool, per-owner cache), `list` (intrusive lists and the
//!   transfer stack), `queue::testing` (a test backend),
//!   `task::__model` (the executor's counters), and the raw plumbing under
//!   the public types: `semaphore::timepoint` (registering, cancelling and
//!   abandoning timepoints on a semaphore), device-signal records and
//!   cost counters.

#![deny(unsafe_op_in_unsafe_fn)]
// Every unsafe block states the invariant it relies on, one operation at
// a time.
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block
)]
#![warn(missing_docs)]
// No public item hands out a type users cannot name.
#![warn(unnameable_types)]

/// An item `pub` with the `testing` feature (fenceline's own tests,
/// benches, fuzz targets and loom models reach it) and `pub(crate)`
/// without: the raw plumbing under the public types (timepoint
/// registration, device-signal records, cost counters), kept off the
/// users' surface.
macro_rules! testing_pub {
    ($(#[$m:meta])* unsafe fn $($rest:tt)*) => {
        #[cfg(feature = "testing")]
        $(#[$m])* pub unsafe fn $($rest)*
        #[cfg(not(feature = "testing"))]
        $(#[$m])* pub(crate) unsafe fn $($rest)*
    };
    ($(#[$m:meta])* fn $($rest:tt)*) => {
        #[cfg(feature = "testing")]
        $(#[$m])* pub fn $($rest)*
        #[cfg(not(feature = "testing"))]
        $(#[$m])* pub(crate) fn $($rest)*
    };
}

// First, with its `link!` macro: in scope for every module after it.
#[cfg(feature = "testing")]
#[macro_use]
pub mod list;
#[cfg(not(feature = "testing"))]
#[macro_use]
pub(crate) mod list;
pub mod device;
mod error;
#[cfg(feature = "testing")]
pub mod pool;
#[cfg(not(feature = "testing"))]
pub(crate) mod pool;
mod prefetch;
/// Bytes per cache line on the targets fenceline tunes for: the alignment
/// of task and action blocks, so each block's header starts a line of its
/// own and no two blocks share one (`#[repr(align)]` cannot name a
/// constant: `Task` spells it and asserts it equals this).
pub(crate) const CACHE_LINE: usize = 64;
pub mod queue;
pub mod semaphore;
mod small_box;
mod sync;
pub mod task;
#[cfg(all(test, not(fenceline_loom)))]
mod test_alloc;
mod trace;
mod unwind;

/// The crate `TileIo::read` / `chunk` take their element types' `Pod`
/// bound from, re-exported so a user needs no version of their own.
pub use bytemuck;
#[cfg(feature = "cuda")]
pub use device::{forget_current_cuda_context, CompletionMode, CudaConfig, Kernel, KernelArg};
pub use device::{
    Binding, Buffer, CommandBuffer, CpuConfig, Device, DeviceStats, Queue, TileIo, BUFFER_ALIGN,
};
pub use error::{Error, ErrorKind};
#[cfg(feature = "trace")]
pub use trace::Trace;

/// Read-modify-writes (and `SeqCst` fences) the calling thread made
/// through fenceline's atomics so far (`--cfg fenceline_count_rmw`, for the
/// crate's own tests: its atomics count on every call).
#[cfg(all(not(fenceline_loom), fenceline_count_rmw))]
#[doc(hidden)]
pub use sync::rmw_count::{
    counts as rmw_counts, link_reads, trace as rmw_trace, trace_all as rmw_trace_all,
};

/// fenceline's internals for its own tests and loom models (feature
/// `testing`; no stability promise).
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    /// The counted handle, for its loom model.
    #[cfg(fenceline_loom)]
    pub use crate::sync::counted::{Counted, Counts};
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use semaphore::{set_wait_yield, wait_all, wait_any, wait_yield, Semaphore, Timeout};
pub use task::{Priority, Tile};
