//! fenceline: a lock-free scheduler that runs work on queues (a CPU task
//! executor, CUDA streams) gated by timeline semaphores, with zero heap
//! allocations per submission in steady state.
//!
//! Start with [`Device::cpu`]: its [`Queue`]s run [`CommandBuffer`]s and
//! host calls once their wait [`Semaphore`]s reach their values, then
//! signal. The layers below are public too:
//!
//! - [`queue`]: the lock-free [`PendingQueue`](queue::PendingQueue) every
//!   device queue is built on (submit, drain-protocol issue, completion);
//! - [`task`]: the CPU task system, a work-stealing
//!   [`Executor`](task::Executor) running pool-allocated task DAGs;
//! - [`semaphore`]: timeline [`Semaphore`]s with host waits
//!   ([`wait_all`], [`wait_any`], [`Timeout`]), timepoints and the device
//!   [`EventPool`](semaphore::EventPool);
//! - [`pool`]: a lock-free, ABA-safe [`BlockPool`](pool::BlockPool), a
//!   per-owner [`BlockCache`](pool::BlockCache) and a bump
//!   [`Arena`](pool::Arena);
//! - [`list`]: intrusive lists on raw pointers, including the
//!   [`TransferStack`](list::TransferStack) that replaces a queue mutex;
//! - [`Error`] and [`ErrorKind`].
//!
//! Every concurrent piece is written against `sync` (std or loom by
//! `cfg(fenceline_loom)`) and model-checked in `loom-tests/`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod command_buffer;
pub mod device;
mod error;
pub mod list;
pub mod pool;
pub mod queue;
pub mod semaphore;
mod sync;
pub mod task;
mod unwind;

pub use command_buffer::CommandBuffer;
pub use device::{Buffer, CpuConfig, Device, Queue};
#[cfg(feature = "cuda")]
pub use device::{CompletionMode, CudaConfig, Kernel, KernelArg};
pub use error::{Error, ErrorKind};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use semaphore::{wait_all, wait_any, Semaphore, Timeout};
pub use task::Tile;
