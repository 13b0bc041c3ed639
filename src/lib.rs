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
//! - `testing`: `fenceline::testing`, fenceline's internals for its own tests,
//!   benches, fuzz targets and loom models (no stability promise): the one
//!   gate through which anything off the public surface is reached.

#![deny(unsafe_op_in_unsafe_fn)]
// Every unsafe block states the invariant it relies on, one operation at
// a time.
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block
)]
#![warn(missing_docs)]
// Nothing is `pub` off the public surface but what `testing` re-exports.
// The modules that gate reads from are marked `allow(unreachable_pub)`
// without the feature alone: there the gate does not exist and their
// `pub` items are crate-private by construction (visibility cannot depend
// on a feature without a macro on every item); with it, every item is
// checked.
#![deny(unreachable_pub)]
// No public item hands out a type users cannot name.
#![warn(unnameable_types)]

// First, with its `link!` macro: in scope for every module after it.
#[macro_use]
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod list;
pub mod device;
mod error;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod pool;
mod prefetch;
pub mod queue;
pub mod semaphore;
mod small_box;
pub(crate) mod sync;
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
#[cfg(feature = "vulkan")]
pub use device::{SpirvBinding, SpirvKernel, VulkanConfig};
pub use error::{Error, ErrorKind};
#[cfg(feature = "trace")]
pub use trace::Trace;

#[cfg(feature = "testing")]
pub mod testing;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use semaphore::{wait_all, wait_any, Semaphore, Timeout};
pub use task::{Priority, Tile};
