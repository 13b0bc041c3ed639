//! Devices: the CPU device (embedded default), with feature `cuda` the
//! CUDA device, with feature `vulkan` the Vulkan device.
//!
//! A [`Device`] owns one [`PendingQueue`](crate::queue::PendingQueue) per
//! queue. On the CPU device each submission runs as a task DAG built in
//! pool memory on the device's executor; on the CUDA device it is issued
//! to the queue's stream, on the Vulkan device submitted to a Vulkan queue
//! (see the `cuda` and `vulkan` modules). [`Queue::execute`] submits
//! command buffers gated by semaphores the same way on all three.
//!
//! The layout: this file, `queue.rs`, `command_buffer.rs`, `work.rs` and
//! `validate.rs` are the front end every backend shares; `recording/` and
//! `data/` what it records and touches; each backend has a folder
//! (`cpu/`, `cuda/`, `vulkan/`) whose device implements `DeviceBackend`.

/// Marks an item of a generic device file that only the CUDA backend
/// uses (an arena helper, a table lookup): without the feature nothing
/// calls it, and it is not reported as dead code.
macro_rules! used_by_cuda {
    ($item:item) => {
        #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
        $item
    };
}

mod command_buffer;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
// Without the feature, `device::cuda` is the stand-ins: the same names,
// with no values (see the file).
#[cfg(not(feature = "cuda"))]
#[path = "no_cuda.rs"]
mod cuda;
pub(crate) mod data;
pub(crate) mod host_fn;
mod queue;
mod recording;
mod stats;
pub(crate) mod teardown;
mod validate;
#[cfg(feature = "vulkan")]
pub(crate) mod vulkan;
// Without the feature, `device::vulkan` is the stand-ins (as `no_cuda.rs`).
#[cfg(not(feature = "vulkan"))]
#[path = "no_vulkan.rs"]
mod vulkan;
mod work;

use std::fmt;
use std::sync::Arc;

pub use cpu::{CpuConfig, EXECUTE_INLINE_COMMAND_BUFFERS};
#[cfg(feature = "cuda")]
pub use cuda::{forget_current_cuda_context, CompletionMode, CudaConfig, Kernel, KernelArg};
pub use data::binding::{Binding, TileIo, MAX_BINDINGS, MAX_SLOTS};
pub use data::buffer::{Buffer, BUFFER_ALIGN};
pub use host_fn::HOST_CALL_INLINE_BYTES;
pub use queue::Queue;
pub use recording::RECORDING_INITIAL_BYTES;
pub use stats::DeviceStats;
#[cfg(feature = "vulkan")]
pub use vulkan::{SpirvBinding, SpirvKernel, VulkanConfig};

use crate::error::{Error, ErrorKind};
use crate::semaphore::Semaphore;
use crate::task::Priority;
pub use command_buffer::CommandBuffer;
use cpu::CpuDevice;
use cuda::CudaDevice;
use recording::{RecordingPool, Target};
use vulkan::VulkanDevice;
pub(crate) use work::Work;

/// What a backend's device gives the generic front end ([`Device`],
/// [`Queue`]): the CPU device (`cpu/`) and the CUDA device (`cuda/`)
/// implement it. Its queues implement [`queue::Backend`](crate::queue::Backend)
/// (how an action is issued and completes); this is the rest: identity,
/// memory, submission, statistics, teardown. ARCHITECTURE.md lists the
/// steps to add a backend.
pub(crate) trait DeviceBackend {
    /// `"cpu"`, or the name the driver reports.
    fn name(&self) -> &str;
    /// Queues of the device (at least 1).
    fn queue_count(&self) -> usize;
    /// Queue `index`'s priority, as configured.
    fn queue_priority(&self, index: usize) -> Priority;
    /// A zeroed buffer of `len` (> 0) bytes.
    fn buffer(&self, len: usize) -> Result<Buffer, Error>;
    /// The buffer of an alloca of `len` (> 0) bytes on queue `queue`, not
    /// usable until the alloca's action runs.
    fn alloca(&self, len: usize, queue: usize) -> Result<Buffer, Error>;
    /// Whether `buffer` came from this device's alloca, for a dealloca on
    /// queue `queue` (an error where it can never be given back there).
    fn owns_transient(&self, buffer: &Buffer, queue: usize) -> Result<bool, Error>;
    /// Whether a recording for `target` is this device's.
    fn made(&self, target: &Target) -> bool;
    /// Whether an execute's buffers are checked at the call
    /// ([`check_use`](Self::check_use)).
    fn checks_uses(&self) -> bool {
        false
    }
    /// Checks, at the call, a buffer an execute on `queue` uses: through a
    /// binding table (`recorded` false) or named by a recording (true).
    fn check_use(&self, _buffer: &Buffer, _queue: usize, _recorded: bool) -> Result<(), Error> {
        Ok(())
    }
    /// Checks an execute's work at the call, before it is submitted.
    fn check_execute(&self, _work: &Work) -> Result<(), Error> {
        Ok(())
    }
    /// Submits `work` to queue `queue`.
    fn submit(
        &self,
        queue: usize,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        work: Work,
    ) -> Result<(), Error>;
    /// Adds the device's counts to `stats`.
    fn add_stats(&self, stats: &mut DeviceStats);
    /// Threads that work for the device, for a trace's rings.
    #[cfg_attr(not(feature = "trace"), allow(dead_code))]
    fn trace_threads(&self) -> usize;
    /// The device's drop: frees the queues, and waits for their work to
    /// drain unless called from inside it, where the last queue state to
    /// go finishes the teardown.
    fn tear_down(&mut self);
}

/// Calls `$body` with `$d` bound to the device's backend (static
/// dispatch: one `match`).
macro_rules! on_backend {
    ($inner:expr, |$d:ident| $body:expr) => {
        match $inner {
            $crate::device::DeviceInner::Cpu($d) => $body,
            $crate::device::DeviceInner::Cuda($d) => $body,
            $crate::device::DeviceInner::Vulkan($d) => $body,
        }
    };
}
pub(crate) use on_backend;

/// A device: queues, buffers and command buffers. `Send + Sync`.
///
/// The device lives while any handle to it does ([`Device`] or a
/// [`Queue`]). Dropping the last one cancels work still waiting on
/// semaphores (its signals fail with `Cancelled`), lets issued work
/// finish, and joins every thread. The last handle may be dropped inside
/// the device's own work (a host call or dispatch closure that captured
/// it, run, finished or cancelled, on whatever thread that happens): that
/// drop does not wait for the work running it; the device's threads exit
/// and its memory is freed once that work has finished.
pub struct Device {
    inner: Arc<DeviceInner>,
    /// Recordings for this device's command buffers, recycled.
    recordings: crate::sync::Arc<RecordingPool>,
}

/// The backend behind a device's handles.
enum DeviceInner {
    Cpu(CpuDevice),
    Cuda(CudaDevice),
    Vulkan(VulkanDevice),
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("kind", &self.kind_name())
            .field("queues", &on_backend!(&*self.inner, |d| d.queue_count()))
            .finish()
    }
}

impl Device {
    /// The CPU device with default settings (one worker per core, one queue).
    ///
    /// # Errors
    ///
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a worker
    ///   thread cannot be spawned.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// let device = Device::cpu()?;
    /// assert_eq!(device.kind_name(), "cpu");
    /// let _queue = device.queue(0)?; // the one queue
    /// assert_eq!(device.queue(1).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn cpu() -> Result<Device, Error> {
        Device::cpu_with(CpuConfig::default())
    }

    /// The CPU device shaped by `config`.
    ///
    /// # Errors
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if
    ///   `config.queues` is 0.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a worker
    ///   thread cannot be spawned.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{CpuConfig, Device, ErrorKind};
    ///
    /// let device = Device::cpu_with(CpuConfig { workers: 2, queues: 2, ..Default::default() })?;
    /// let (_upload, _compute) = (device.queue(0)?, device.queue(1)?);
    ///
    /// let none = Device::cpu_with(CpuConfig { queues: 0, ..Default::default() });
    /// assert_eq!(none.unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn cpu_with(config: CpuConfig) -> Result<Device, Error> {
        Self::cpu_with_priorities(config, &[])
    }

    /// [`cpu_with`](Self::cpu_with), with queue `i`'s [`Priority`]
    /// `priorities[i]` (`Normal` past the slice's end). A device whose
    /// queues have more than one priority runs higher ones' tasks first,
    /// as [`Priority`] says (the starvation bound included); one whose
    /// queues share one priority runs exactly as `cpu_with`'s.
    ///
    /// # Errors
    ///
    /// As [`cpu_with`](Self::cpu_with), and
    /// [`InvalidArgument`](ErrorKind::InvalidArgument) for more priorities
    /// than queues.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{CpuConfig, Device, Priority};
    ///
    /// // Queue 0 for latency-critical requests, queue 1 for batch work.
    /// let device = Device::cpu_with_priorities(
    ///     CpuConfig { queues: 2, ..Default::default() },
    ///     &[Priority::High, Priority::Low],
    /// )?;
    /// assert_eq!(device.queue(0)?.priority(), Priority::High);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn cpu_with_priorities(
        config: CpuConfig,
        priorities: &[Priority],
    ) -> Result<Device, Error> {
        let cpu = CpuDevice::new(config, priorities)?;
        let recordings = crate::sync::Arc::new(RecordingPool::new(cpu.target()));
        Ok(Device {
            inner: Arc::new(DeviceInner::Cpu(cpu)),
            recordings,
        })
    }

    /// `"cpu"`, or the name the CUDA or Vulkan driver reports for the
    /// device.
    pub fn kind_name(&self) -> &str {
        on_backend!(&*self.inner, |d| d.name())
    }

    /// Queue `index` (a cheap handle).
    ///
    /// # Errors
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `index` is not
    ///   below the queue count.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{CpuConfig, Device, ErrorKind};
    ///
    /// let device = Device::cpu_with(CpuConfig { queues: 2, ..Default::default() })?;
    /// let queue = device.queue(1)?;
    /// let same = queue.clone(); // another handle to queue 1
    /// assert_eq!(format!("{same:?}"), "Queue { index: 1 }");
    /// assert_eq!(device.queue(2).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn queue(&self, index: usize) -> Result<Queue, Error> {
        let count = on_backend!(&*self.inner, |d| d.queue_count());
        if index >= count {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("queue index {index}: the device has {count} queue(s)"),
            ));
        }
        Ok(Queue {
            device: self.inner.clone(),
            index,
        })
    }

    /// A zeroed buffer of `len` bytes (device memory on a CUDA device).
    ///
    /// # Errors
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `len` is 0.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) on a CUDA
    ///   device, if `cuMemAlloc` cannot allocate it. (On the CPU device, host
    ///   memory running out aborts, as any Rust allocation does.)
    /// - [`Internal`](ErrorKind::Internal) on a CUDA device, if the driver
    ///   fails to make the context current or to zero the memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(64)?;
    /// assert_eq!(buf.len(), 64);
    /// let mut out = [0xFF; 64];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0; 64]); // zeroed
    /// assert_eq!(device.buffer(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn buffer(&self, len: usize) -> Result<Buffer, Error> {
        on_backend!(&*self.inner, |d| d.buffer(len))
    }

    /// An empty command buffer, recording, for this device, in a recording
    /// the device recycles (see [`CommandBuffer`]'s memory section). Its
    /// submissions launch one prebuilt CUDA graph on a CUDA device (built
    /// by [`end`](CommandBuffer::end)): made for command buffers submitted
    /// many times. On a Vulkan device each submission records its commands
    /// into a command buffer of the queue's ring (with the submission's
    /// binding table), and `end` stages the bytes of its updates.
    ///
    /// # Errors
    ///
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a new
    ///   recording is needed and its memory cannot be had.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(8)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.fill(&buf, 0, 8, &[7])?;
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn command_buffer(&self) -> Result<CommandBuffer, Error> {
        CommandBuffer::new(&self.recordings, false)
    }

    /// A command buffer meant for one submission: on a CUDA device, `end`
    /// builds no CUDA graph (instantiating one costs tens of microseconds)
    /// and each submission issues the recorded commands on the queue's
    /// stream directly, in order (as IREE's stream command buffer does).
    /// It may still be submitted again: each submission issues every
    /// command again. On the CPU and Vulkan devices it is the same as
    /// [`command_buffer`](Self::command_buffer) (nothing is instantiated
    /// there: a Vulkan submission records its commands at issue).
    ///
    /// # Errors
    ///
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a new
    ///   recording is needed and its memory cannot be had.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(4)?;
    /// let done = Semaphore::new(0);
    /// for frame in 1..=3u8 {
    ///     let mut cb = device.command_buffer_one_shot()?; // recycled after the first frame
    ///     cb.fill(&buf, 0, 4, &[frame])?;
    ///     cb.end()?;
    ///     device.queue(0)?.execute(&[], &[(&done, u64::from(frame))], &[&cb])?;
    ///     done.wait(u64::from(frame), Duration::from_secs(5))?;
    /// }
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [3; 4]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn command_buffer_one_shot(&self) -> Result<CommandBuffer, Error> {
        CommandBuffer::new(&self.recordings, true)
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        on_backend!(self, |d| d.tear_down())
    }
}

#[cfg(feature = "trace")]
impl Device {
    /// Starts recording a timeline (feature `trace`): every thread that
    /// works for fenceline (this device's workers and completion threads,
    /// threads that submit or signal) writes its events into a ring of
    /// `events_per_thread` events allocated here, without locks or
    /// allocation while recording; a full ring drops its oldest events.
    /// One trace records at a time in a process, and it records the work
    /// of every device.
    ///
    /// # Errors
    ///
    /// - [`InvalidArgument`](crate::error::ErrorKind::InvalidArgument) if
    ///   `events_per_thread` is 0.
    /// - [`FailedPrecondition`](crate::error::ErrorKind::FailedPrecondition) if a
    ///   trace is already recording.
    pub fn start_trace(&self, events_per_thread: usize) -> Result<(), crate::error::Error> {
        let threads = on_backend!(&*self.inner, |d| d.trace_threads());
        // Room for the threads that submit, signal and wait besides.
        crate::trace::start(events_per_thread, threads + 16)
    }

    /// Stops recording and returns the timeline
    /// ([`Trace::write_chrome_json`](crate::trace::Trace::write_chrome_json)
    /// writes it for Perfetto or chrome://tracing).
    ///
    /// # Errors
    ///
    /// [`FailedPrecondition`](crate::error::ErrorKind::FailedPrecondition) if no
    /// trace is recording.
    pub fn stop_trace(&self) -> Result<crate::trace::Trace, crate::error::Error> {
        crate::trace::stop()
    }
}

static_assertions::assert_impl_all!(Device: Send, Sync);
static_assertions::assert_impl_all!(Queue: Send, Sync, Clone);
