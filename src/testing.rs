//! fenceline's internals, for its own tests, benches, fuzz targets and
//! loom models (feature `testing`; no stability promise, hidden from the
//! docs). The one gate: nothing off the public surface is reached any
//! other way. Internal modules are private to the crate; their items that
//! these users need are re-exported here, and what they need of public
//! types (cost counters, the raw registration under waits) comes as
//! extension traits, so the public types carry no hidden methods.
#![doc(hidden)]

use std::ptr::NonNull;

use crate::semaphore::state::Registration;
use crate::semaphore::timepoint::Timepoint;
use crate::semaphore::{AnyEvent, Semaphore};

/// Intrusive lists, the transfer stack and the injector (`link!` declares
/// a link type for a node's links field).
pub mod list {
    pub use crate::link;
    pub use crate::list::*;
}

/// The lock-free block pool and the per-owner block cache.
pub mod pool {
    pub use crate::pool::*;
}

/// A CPU buffer's hold word (its loom models).
pub mod hold {
    pub use crate::device::data::hold::*;
}

/// The issuer thread (its loom model).
pub mod issuer {
    pub use crate::queue::issuer::*;
}

/// Timepoints: the raw registration under waits, queues and devices.
pub mod timepoint {
    pub use super::SemaphoreInternals;
    pub use crate::semaphore::state::{Registration, DEVICE_SIGNALS};
    pub use crate::semaphore::timepoint::*;
}

/// The executor's lock-free counters and its issuer-turn cells (their
/// loom models).
pub mod executor {
    pub use super::ExecutorInternals;
    pub use crate::task::join_count::JoinCount;
    pub use crate::task::sleep::SleepState;
    pub use crate::task::tile_counter::TileCounter;
    use crate::task::{Executor, ExecutorConfig};

    /// [`Executor::new`], with `turns` issuer-turn cells whose turns
    /// `run_turn` runs.
    ///
    /// # Errors
    /// As [`Executor::new`].
    pub fn with_turn_cells(
        config: ExecutorConfig,
        turns: usize,
        run_turn: unsafe fn(std::ptr::NonNull<()>),
    ) -> Result<Executor, crate::Error> {
        Executor::with_turn_cells(config, turns, run_turn)
    }
}

/// A pending-queue backend that completes what the test says.
pub use crate::queue::testing::*;

/// The completion stack backends finish through, and its batches.
pub use crate::queue::completion_stack::{CompletionStack, Completions};

/// Issue passes one submit may run before it hands the turn off, and the
/// passes the calling thread ran.
pub use crate::queue::pending::{issue_passes_on_this_thread, ISSUE_PASSES_BEFORE_HAND_OFF};

/// Makes the next CPU execute of several stages fail to join its finish.
pub use crate::device::cpu::fail_next_execute_join;

/// The counted handle (its loom model; not with the counting atomics,
/// whose counter type is the crate's own).
#[cfg(not(fenceline_count_rmw))]
pub use crate::sync::counted::{Counted, Counts};

/// Read-modify-writes (and `SeqCst` fences) the calling thread made
/// through fenceline's atomics, and links walked in its lists
/// (`--cfg fenceline_count_rmw`: the crate's atomics count every call).
#[cfg(all(not(fenceline_loom), fenceline_count_rmw))]
pub use crate::sync::rmw_count::{
    counts as rmw_counts, link_reads, trace as rmw_trace, trace_all as rmw_trace_all,
};

/// What the crate's tests read and do on a [`Semaphore`] beyond its public
/// surface.
pub trait SemaphoreInternals {
    /// Registers `tp` (see the timepoint contract in
    /// [`timepoint`](crate::semaphore::timepoint)).
    ///
    /// # Safety
    /// As `Semaphore::register`'s: `tp` is valid, not registered anywhere,
    /// and stays valid and unmoved until its callback runs or `cancel`
    /// returns `true`.
    unsafe fn register(&self, tp: NonNull<Timepoint>) -> Registration;
    /// Unlinks `tp` if it is still registered.
    ///
    /// # Safety
    /// As `Semaphore::cancel`'s: `tp` was registered on this semaphore, or
    /// never registered.
    unsafe fn cancel(&self, tp: NonNull<Timepoint>) -> bool;
    /// Gives up an abandonable registered timepoint without waiting.
    ///
    /// # Safety
    /// As `Semaphore::abandon`'s.
    unsafe fn abandon(&self, tp: NonNull<Timepoint>) -> bool;
    /// Records a device event that brings the semaphore to `value`.
    fn record_device_signal(&self, value: u64, event: AnyEvent) -> bool;
    /// The recorded device event with the smallest value `>= value`.
    fn device_signal_reaching(&self, value: u64) -> Option<(u64, AnyEvent)>;
    /// Timepoints compared or unlinked so far.
    fn timepoints_examined(&self) -> u64;
    /// Timepoints registered and not yet unlinked.
    fn timepoints_registered(&self) -> usize;
}

impl SemaphoreInternals for Semaphore {
    unsafe fn register(&self, tp: NonNull<Timepoint>) -> Registration {
        // SAFETY: forwarded contract.
        unsafe { Semaphore::register(self, tp) }
    }
    unsafe fn cancel(&self, tp: NonNull<Timepoint>) -> bool {
        // SAFETY: forwarded contract.
        unsafe { Semaphore::cancel(self, tp) }
    }
    unsafe fn abandon(&self, tp: NonNull<Timepoint>) -> bool {
        // SAFETY: forwarded contract.
        unsafe { Semaphore::abandon(self, tp) }
    }
    fn record_device_signal(&self, value: u64, event: AnyEvent) -> bool {
        Semaphore::record_device_signal(self, value, event)
    }
    fn device_signal_reaching(&self, value: u64) -> Option<(u64, AnyEvent)> {
        Semaphore::device_signal_reaching(self, value)
    }
    fn timepoints_examined(&self) -> u64 {
        Semaphore::timepoints_examined(self)
    }
    fn timepoints_registered(&self) -> usize {
        Semaphore::timepoints_registered(self)
    }
}

/// What the crate's tests read on a [`PendingQueue`](crate::queue::PendingQueue).
pub trait PendingQueueInternals {
    /// Blocks of the queue's action pool.
    fn pool_capacity(&self) -> usize;
    /// Actions examined by issue passes so far.
    fn actions_examined(&self) -> u64;
}

impl<B: crate::queue::Backend> PendingQueueInternals for crate::queue::PendingQueue<B> {
    fn pool_capacity(&self) -> usize {
        crate::queue::PendingQueue::pool_capacity(self)
    }
    fn actions_examined(&self) -> u64 {
        crate::queue::PendingQueue::actions_examined(self)
    }
}

/// An executor's issuer-turn cells (see [`executor::with_turn_cells`]).
pub trait ExecutorInternals {
    /// Offers a turn through cell `cell` (empty; not from a worker): `Ok`
    /// if a worker will run it, `Err(turn)` if every worker is busy and the
    /// caller keeps it.
    fn offer_turn(&self, cell: usize, turn: NonNull<()>) -> Result<(), NonNull<()>>;
}

impl ExecutorInternals for crate::task::Executor {
    fn offer_turn(&self, cell: usize, turn: NonNull<()>) -> Result<(), NonNull<()>> {
        crate::task::Executor::offer_turn(self, cell, turn)
    }
}

/// What the crate's tests read on a [`Buffer`](crate::Buffer).
pub trait BufferInternals {
    /// Whether an action or a host copy holds the buffer right now.
    fn is_held(&self) -> bool;
}

impl BufferInternals for crate::Buffer {
    fn is_held(&self) -> bool {
        crate::Buffer::is_held(self)
    }
}

/// The Vulkan validation layer's messages reported so far in this
/// process (warnings and errors), taken: tests fail on any (feature
/// `vulkan`, devices made with `VulkanConfig::validation`).
#[cfg(feature = "vulkan")]
pub fn vulkan_validation_messages() -> Vec<String> {
    crate::device::vulkan::driver::validation_messages()
}

/// A probe of a Vulkan device's timeline semaphores not destroyed yet,
/// which outlives the device (feature `vulkan`; `None` on other devices).
#[cfg(feature = "vulkan")]
pub trait VulkanInternals {
    /// Counts the device's live timeline semaphores when called.
    fn vulkan_live_timelines(&self) -> Option<Box<dyn Fn() -> usize + Send>>;
}

#[cfg(feature = "vulkan")]
impl VulkanInternals for crate::Device {
    fn vulkan_live_timelines(&self) -> Option<Box<dyn Fn() -> usize + Send>> {
        self.vulkan_gpu().map(|gpu| {
            let probe = move || {
                gpu.live_timelines
                    .load(std::sync::atomic::Ordering::Relaxed)
            };
            Box::new(probe) as Box<dyn Fn() -> usize + Send>
        })
    }
}

/// The CUDA stream priorities the driver reports (feature `cuda`).
#[cfg(feature = "cuda")]
pub trait CudaInternals {
    /// The context's stream priority range, `(least, greatest)`.
    fn cuda_stream_priority_range(&self) -> Result<(i32, i32), crate::Error>;
}

#[cfg(feature = "cuda")]
impl CudaInternals for crate::Device {
    fn cuda_stream_priority_range(&self) -> Result<(i32, i32), crate::Error> {
        crate::Device::cuda_stream_priority_range(self)
    }
}

/// The CUDA stream priority of a queue's stream (feature `cuda`).
#[cfg(feature = "cuda")]
pub trait CudaQueueInternals {
    /// What `cuStreamGetPriority` reports for the queue's stream.
    fn cuda_stream_priority(&self) -> Result<i32, crate::Error>;
}

#[cfg(feature = "cuda")]
impl CudaQueueInternals for crate::Queue {
    fn cuda_stream_priority(&self) -> Result<i32, crate::Error> {
        crate::Queue::cuda_stream_priority(self)
    }
}
