//! Devices: the CPU device (embedded default) and, with feature `cuda`,
//! the CUDA device.
//!
//! A [`Device`] owns one [`PendingQueue`] per queue. On the CPU device
//! each submission runs as a task DAG built in pool memory on the device's
//! executor; on the CUDA device it is issued to the queue's stream (see
//! the `cuda` module, feature `cuda`). [`Queue::execute`] submits command buffers gated by
//! semaphores the same way on both.

mod binding;
mod buffer;
mod command;
mod command_buffer;
mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod cuda_seam;
/// The buffers' hold word (public for the crate's loom models).
#[cfg(feature = "testing")]
pub mod hold;
#[cfg(not(feature = "testing"))]
pub(crate) mod hold;
pub(crate) mod host_fn;
mod host_mem;
mod queue;
mod recording;
mod recording_pool;
mod stats;
mod table;
pub(crate) mod teardown;
mod work;

use std::fmt;
use std::sync::Arc;

pub use binding::{Binding, TileIo, MAX_BINDINGS, MAX_SLOTS};
pub use buffer::{Buffer, BUFFER_ALIGN};
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use cpu::fail_next_execute_join;
pub use cpu::EXECUTE_INLINE_COMMAND_BUFFERS;
#[cfg(feature = "cuda")]
pub use cuda::{forget_current_cuda_context, CompletionMode, CudaConfig, Kernel, KernelArg};
pub use host_fn::HOST_CALL_INLINE_BYTES;
pub use queue::Queue;
pub use recording::RECORDING_INITIAL_BYTES;
pub use stats::DeviceStats;

use crate::error::{Error, ErrorKind};
use crate::queue::issuer::IssuerThread;
use crate::queue::PendingQueue;
use crate::task::priority as priorities;
use crate::task::{Executor, ExecutorConfig, Priority};
pub use command_buffer::CommandBuffer;
use cpu::CpuBackend;
use recording::{RecordingPool, Target};
use teardown::Teardown;
pub(crate) use work::{release_recordings, take_holds, Work};

/// How the CPU device is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads; 0 means the available parallelism.
    pub workers: usize,
    /// Queues (at least 1).
    pub queues: usize,
    /// Idle workers spin briefly before parking: about 4 us polling for
    /// work, then about 50 us of yielding (lower latency for work that
    /// comes back soon, more CPU while idle). See [`ExecutorConfig::spin`](crate::task::ExecutorConfig::spin).
    pub spin: bool,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            workers: 0,
            queues: 1,
            spin: true,
        }
    }
}

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

enum DeviceInner {
    Cpu {
        queues: Vec<PendingQueue<CpuBackend>>,
        /// Shut down once every queue state is freed (see `Drop`).
        executor: Option<Executor>,
        /// Runs the issuer turns handed off while every worker is busy
        /// (joined, or left to exit on its own, in `Drop`).
        issuer: Option<IssuerThread>,
        teardown: crate::sync::Arc<Teardown>,
        /// Memory for `Queue::alloca`.
        transient: Arc<host_mem::TransientPool>,
        /// The device's identity for its buffers and recordings (never
        /// another device's, also after this one is dropped).
        id: u64,
    },
    Cuda(cuda_seam::CudaDevice),
}

impl DeviceInner {
    fn queue_count(&self) -> usize {
        match self {
            DeviceInner::Cpu { queues, .. } => queues.len(),
            DeviceInner::Cuda(d) => d.queue_count(),
        }
    }

    fn queue_priority(&self, index: usize) -> Priority {
        match self {
            DeviceInner::Cpu { queues, .. } => queues[index].backend().priority(),
            DeviceInner::Cuda(d) => d.queue_priority(index),
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("kind", &self.kind_name())
            .field("queues", &self.inner.queue_count())
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
        if config.queues == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "CpuConfig::queues 0: need at least one queue",
            ));
        }
        priorities::check(priorities, config.queues)?;
        let executor = Executor::with_turns(
            ExecutorConfig {
                workers: config.workers,
                spin: config.spin,
            },
            config.queues,
            cpu::run_turn,
            priorities::several(priorities, config.queues),
        )?;
        let teardown = Teardown::new(config.queues);
        // The thread that takes a queue's issuer turn when every worker is
        // busy (not under the model checker: see `CpuBackend::issuer`).
        let (issuer_thread, issuer) = if cfg!(fenceline_loom) {
            (None, None)
        } else {
            let (t, i) = IssuerThread::start("fenceline-cpu-issuer", config.queues, cpu::run_turn)?;
            (Some(t), Some(i))
        };
        let queues = (0..config.queues)
            .map(|index| {
                PendingQueue::new(CpuBackend::new(
                    executor.state(),
                    index,
                    priorities::of_queue(priorities, index),
                    issuer.clone(),
                    Teardown::token(&teardown),
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The queues hold the only handles now: the thread exits once they
        // are all freed.
        drop(issuer);
        // An identity no other device of the process ever has (an address
        // could be a dropped device's again).
        let id = crate::sync::unique_number();
        let recordings = crate::sync::Arc::new(RecordingPool::new(Target::Cpu(id)));
        Ok(Device {
            inner: Arc::new(DeviceInner::Cpu {
                queues,
                executor: Some(executor),
                issuer: issuer_thread,
                teardown,
                transient: Arc::new(host_mem::TransientPool::new()),
                id,
            }),
            recordings,
        })
    }

    /// `"cpu"`, or the CUDA device's name.
    pub fn kind_name(&self) -> &str {
        match &*self.inner {
            DeviceInner::Cpu { .. } => "cpu",
            DeviceInner::Cuda(d) => d.name(),
        }
    }

    /// Events the CUDA device has created so far (each created once and
    /// reused); 0 for the CPU device.
    pub fn events_created(&self) -> usize {
        match &*self.inner {
            DeviceInner::Cpu { .. } => 0,
            DeviceInner::Cuda(d) => d.events_created(),
        }
    }

    /// Waits the CUDA device met on the GPU (device-wait shortcut) so far;
    /// 0 for the CPU device.
    pub fn device_waits_issued(&self) -> u64 {
        match &*self.inner {
            DeviceInner::Cpu { .. } => 0,
            DeviceInner::Cuda(d) => d.device_waits_issued(),
        }
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
        let count = self.inner.queue_count();
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

    /// This CPU device's identity (0 on CUDA, which names its buffers
    /// otherwise).
    fn cpu_id(&self) -> u64 {
        match &*self.inner {
            DeviceInner::Cpu { id, .. } => *id,
            DeviceInner::Cuda(_) => 0,
        }
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
        match &*self.inner {
            DeviceInner::Cpu { .. } => Buffer::new(len, self.cpu_id()),
            DeviceInner::Cuda(d) => d.buffer(len),
        }
    }

    /// An empty command buffer, recording, for this device, in a recording
    /// the device recycles (see [`CommandBuffer`]'s memory section). Its
    /// submissions launch one prebuilt CUDA graph on a CUDA device (built
    /// by [`end`](CommandBuffer::end)): made for command buffers submitted
    /// many times.
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
    /// command again. On the CPU device it is the same as
    /// [`command_buffer`](Self::command_buffer) (nothing is instantiated
    /// there).
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
        // Dropping a queue handle cancels its pending actions; its state
        // is freed once its issued actions finished (see `teardown`).
        match self {
            DeviceInner::Cpu {
                queues,
                executor,
                issuer,
                teardown,
                ..
            } => {
                // Inside its own work: on one of its workers, or inside an
                // issue pass (the drop of a cancelled or finished action's
                // captures, on whatever thread ran the pass, the issuer
                // thread included).
                let inside = crate::queue::in_issue_pass()
                    || executor.as_ref().is_some_and(|e| e.on_worker_thread());
                queues.clear();
                let issuer = issuer.take();
                let Some(executor) = executor.take() else {
                    return;
                };
                if inside {
                    // The issuer thread exits once the last queue state
                    // is freed.
                    if let Some(t) = issuer {
                        t.detach();
                    }
                    teardown.defer(executor);
                } else {
                    teardown.wait_drained();
                    drop(issuer); // every queue freed: it exits; joined
                    drop(executor); // joins the workers
                }
            }
            DeviceInner::Cuda(d) => d.tear_down(),
        }
    }
}

static_assertions::assert_impl_all!(Device: Send, Sync);
static_assertions::assert_impl_all!(Queue: Send, Sync, Clone);
