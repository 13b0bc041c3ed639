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
mod command_buffer;
mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
/// The buffers' hold word (public for the crate's loom models).
#[cfg(feature = "testing")]
pub mod hold;
#[cfg(not(feature = "testing"))]
pub(crate) mod hold;
pub(crate) mod host_fn;
mod host_mem;
mod recording;
mod stats;
mod table;
pub(crate) mod teardown;

use std::fmt;
use std::sync::Arc;

pub use binding::{Binding, TileIo, MAX_BINDINGS, MAX_SLOTS};
pub use buffer::{Buffer, BUFFER_ALIGN};
pub use cpu::EXECUTE_INLINE_COMMAND_BUFFERS;
#[cfg(feature = "cuda")]
pub use cuda::{forget_current_cuda_context, CompletionMode, CudaConfig, Kernel, KernelArg};
pub use host_fn::HOST_CALL_INLINE_BYTES;
pub use recording::RECORDING_INITIAL_BYTES;
pub use stats::DeviceStats;

use crate::error::{Error, ErrorKind};
use crate::queue::PendingQueue;
use crate::semaphore::Semaphore;
use crate::task::{Executor, ExecutorConfig};
pub use command_buffer::CommandBuffer;
use cpu::CpuBackend;
use recording::{RecordingPool, RecordingRef, Target};
use teardown::Teardown;

/// What one queue action runs, on any device.
pub(crate) enum Work {
    Barrier,
    HostCall(host_fn::HostFn),
    /// Makes a pending buffer from `Queue::alloca` usable.
    Alloca(Buffer),
    /// Closes a buffer from `Queue::alloca` for good.
    Dealloca(Buffer),
    Execute {
        inline: [Option<RecordingRef>; EXECUTE_INLINE_COMMAND_BUFFERS],
        more: Option<Box<[RecordingRef]>>,
        /// The action holds the buffers its recordings touch (CPU device,
        /// from its issue: [`take_holds`]).
        held: bool,
        /// The binding table of an `execute_with`.
        table: Option<table::SlotTable>,
    },
}

impl Work {
    /// The resolved binding table of an `execute_with` (null: none).
    pub(crate) fn slot_views(&self) -> *const binding::SlotViews {
        match self {
            Work::Execute { table: Some(t), .. } => t.views(),
            _ => std::ptr::null(),
        }
    }

    /// The recordings of an execute, in order.
    fn recordings(&self) -> impl Iterator<Item = &RecordingRef> + Clone {
        let (inline, more) = match self {
            Work::Execute { inline, more, .. } => (&inline[..], more.as_deref()),
            _ => (&[][..], None),
        };
        inline.iter().flatten().chain(more.into_iter().flatten())
    }
}

/// Calls `f` once for each distinct CPU-device buffer the execute's
/// recordings touch, with the strongest access any of them makes, in a
/// fixed order, until `f` returns `false`; returns whether it never did.
fn each_hold(work: &Work, mut f: impl FnMut(&buffer::HostMem, hold::Access) -> bool) -> bool {
    let recordings = work.recordings();
    let entries = recordings.clone().flat_map(|r| r.holds());
    // One recording's entries are distinct already (the usual case: no
    // quadratic look-around).
    let single = recordings.clone().nth(1).is_none();
    for (i, e) in entries.clone().enumerate() {
        let mut access = e.access;
        if !single {
            if entries.clone().take(i).any(|p| p.buffer.same(&e.buffer)) {
                continue;
            }
            if entries
                .clone()
                .skip(i + 1)
                .any(|p| p.buffer.same(&e.buffer) && p.access == hold::Access::Write)
            {
                access = hold::Access::Write;
            }
        }
        let Some(mem) = e.buffer.host() else { continue };
        if !f(mem, access) {
            return false;
        }
    }
    // The table's buffers (checked at `execute_with` against the direct
    // ones: a buffer in both is only ever read, and is taken twice).
    match work {
        Work::Execute { table: Some(t), .. } => t.each_hold(f),
        _ => true,
    }
}

/// Takes the holds of an issued execute (CPU device): every buffer its
/// command buffers touch, shared where they only read it. On a conflict
/// with a running action (or a host copy) nothing stays held and the error
/// names the buffer: the action then fails instead of running.
pub(crate) fn take_holds(work: &mut Work) -> Result<(), Error> {
    let mut failed = None;
    let mut taken = 0usize;
    let all = each_hold(work, |mem, access| {
        if mem.hold().try_take(access) {
            taken += 1;
            true
        } else {
            failed = Some(buffer::conflict(mem, access, "an action"));
            false
        }
    });
    if !all {
        // Give back what was taken before the conflict (same order).
        let mut left = taken;
        each_hold(work, |mem, access| {
            if left == 0 {
                return false;
            }
            mem.hold().give_back(access);
            left -= 1;
            true
        });
        return Err(failed.unwrap_or_else(|| Error::new(ErrorKind::Internal, "hold conflict")));
    }
    if let Work::Execute { held, .. } = work {
        *held = true;
    }
    Ok(())
}

/// An alloca's action: its buffer is usable from now on (before the
/// action signals).
fn alloca_ran(buffer: &Buffer) -> Result<(), Error> {
    let Some(mem) = buffer.host() else {
        return Ok(());
    };
    if mem.hold().make_live() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "alloca of buffer {:p} ({} bytes): its dealloca ran first",
                buffer.id(),
                buffer.len()
            ),
        ))
    }
}

/// A dealloca's action: nothing may use the buffer from now on; its
/// memory goes back with its last handle.
fn dealloca_ran(buffer: &Buffer) -> Result<(), Error> {
    let Some(mem) = buffer.host() else {
        return Ok(());
    };
    mem.hold().close().map_err(|life| {
        Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "dealloca of buffer {:p} ({} bytes): {}",
                buffer.id(),
                buffer.len(),
                match life {
                    hold::Life::Gone => "its dealloca ran already",
                    _ => "a running action still uses it (the buffer stays usable)",
                }
            ),
        )
    })
}

/// Gives back a finished submission's command buffers before it signals,
/// so that whoever sees the signal finds the recordings released (a frame
/// loop then needs no more recordings than frames in flight).
///
/// If this releases the last reference to a recording, its captures are
/// dropped here; a capture whose `Drop` panics is caught and the panic
/// dropped: the submission's outcome was decided by its work, and no
/// other submission may be failed for it.
pub(crate) fn release_recordings(work: &mut Work) {
    if let Work::Execute { held: true, .. } = work {
        // The holds first: whoever sees the signal finds the buffers free.
        each_hold(work, |mem, access| {
            mem.hold().give_back(access);
            true
        });
    }
    if let Work::Execute { .. } = work {
        let recordings = std::mem::replace(work, Work::Barrier);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(recordings)));
    }
}

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
        teardown: crate::sync::Arc<Teardown>,
        /// Memory for `Queue::alloca`.
        transient: Arc<host_mem::TransientPool>,
        /// The device's identity for its buffers (`Device::cpu_id`).
        id: usize,
    },
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaDevice),
}

impl DeviceInner {
    fn queue_count(&self) -> usize {
        match self {
            DeviceInner::Cpu { queues, .. } => queues.len(),
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => d.queues.len(),
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
        if config.queues == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "CpuConfig::queues 0: need at least one queue",
            ));
        }
        let executor = Executor::with_turns(
            ExecutorConfig {
                workers: config.workers,
                spin: config.spin,
            },
            config.queues,
            cpu::run_turn,
        )?;
        let teardown = Teardown::new(config.queues);
        let queues = (0..config.queues)
            .map(|index| {
                PendingQueue::new(CpuBackend::new(
                    executor.state(),
                    index,
                    Teardown::token(&teardown),
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let recordings = crate::sync::Arc::new(RecordingPool::new(Target::Cpu));
        let pool: *const RecordingPool = &*recordings;
        Ok(Device {
            inner: Arc::new(DeviceInner::Cpu {
                queues,
                executor: Some(executor),
                teardown,
                transient: Arc::new(host_mem::TransientPool::new()),
                id: pool as usize,
            }),
            recordings,
        })
    }

    /// CUDA device `ordinal` with default settings (feature `cuda`).
    ///
    /// Never panics: a missing driver or GPU is an error.
    ///
    /// # Errors
    ///
    /// - [`Unavailable`](ErrorKind::Unavailable), with the reason, when no
    ///   driver library can be loaded, a driver symbol fenceline needs is
    ///   missing, `cuInit` fails, the ordinal does not exist (or the driver
    ///   cannot retain its context), or the driver binding panics.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a queue's
    ///   completion thread cannot be spawned or the event pool's memory
    ///   cannot be had.
    /// - [`Internal`](ErrorKind::Internal) if the driver fails to create a
    ///   queue's stream or an event.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// match Device::cuda(0) {
    ///     Ok(device) => {
    ///         let buf = device.buffer(256)?;
    ///         assert_eq!(buf.len(), 256);
    ///     }
    ///     // No driver or no GPU (as on CI): an error, not a panic.
    ///     Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable),
    /// }
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    #[cfg(feature = "cuda")]
    pub fn cuda(ordinal: usize) -> Result<Device, Error> {
        Device::cuda_with(ordinal, CudaConfig::default())
    }

    /// CUDA device `ordinal` shaped by `config` (feature `cuda`).
    ///
    /// Errors: as [`cuda`](Self::cuda); `InvalidArgument` for 0 queues or
    /// 0 events.
    #[cfg(feature = "cuda")]
    pub fn cuda_with(ordinal: usize, config: CudaConfig) -> Result<Device, Error> {
        let device = cuda::CudaDevice::open(ordinal, config)?;
        let target = Target::Cuda(device.shared.clone());
        Ok(Device {
            inner: Arc::new(DeviceInner::Cuda(device)),
            recordings: crate::sync::Arc::new(RecordingPool::new(target)),
        })
    }

    /// `"cpu"`, or the CUDA device's name.
    pub fn kind_name(&self) -> &str {
        match &*self.inner {
            DeviceInner::Cpu { .. } => "cpu",
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => d.name(),
        }
    }

    /// Events the CUDA device has created so far (each created once and
    /// reused); 0 for the CPU device.
    pub fn events_created(&self) -> usize {
        match &*self.inner {
            DeviceInner::Cpu { .. } => 0,
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => d.shared.events.created(),
        }
    }

    /// Waits the CUDA device met on the GPU (device-wait shortcut) so far;
    /// 0 for the CPU device.
    pub fn device_waits_issued(&self) -> u64 {
        match &*self.inner {
            DeviceInner::Cpu { .. } => 0,
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => d
                .shared
                .device_waits
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Loads `ptx` (PTX text) and returns its entry point `name` (feature
    /// `cuda`).
    ///
    /// Errors: `FailedPrecondition` on the CPU device (it runs
    /// [`dispatch`](CommandBuffer::dispatch) closures instead);
    /// `InvalidArgument` if the PTX does not load or has no such entry.
    #[cfg(feature = "cuda")]
    pub fn load_kernel(&self, ptx: &str, name: &str) -> Result<Kernel, Error> {
        match &*self.inner {
            DeviceInner::Cpu { .. } => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "the CPU device has no kernels: record a dispatch closure",
            )),
            DeviceInner::Cuda(d) => Kernel::load(&d.shared.ctx, ptx, name),
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

    /// This device's identity for its CPU buffers: its recording pool's
    /// address, which its command buffers' recordings share.
    fn cpu_id(&self) -> usize {
        let pool: *const RecordingPool = &*self.recordings;
        pool as usize
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
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => Buffer::new_cuda(&d.shared.ctx, len),
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
                teardown,
                ..
            } => {
                // Inside its own work: on one of its workers, or inside an
                // issue pass (the drop of a cancelled or finished action's
                // captures, on whatever thread ran the pass).
                let inside = crate::queue::in_issue_pass()
                    || executor.as_ref().is_some_and(|e| e.on_worker_thread());
                queues.clear();
                let Some(executor) = executor.take() else {
                    return;
                };
                if inside {
                    teardown.defer(executor);
                } else {
                    teardown.wait_drained();
                    drop(executor); // joins the workers
                }
            }
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => {
                let inside = crate::queue::in_issue_pass() || d.on_completion_thread();
                d.queues.clear();
                if !inside {
                    d.teardown.wait_drained();
                }
            }
        }
    }
}

/// A device queue: a cheap `Clone + Send + Sync` handle.
#[derive(Clone)]
pub struct Queue {
    device: Arc<DeviceInner>,
    index: usize,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").field("index", &self.index).finish()
    }
}

/// Checks that every recording was made for the device it is submitted to.
fn check_recordings(device: &DeviceInner, recordings: &[&RecordingRef]) -> Result<(), Error> {
    let ok = recordings.iter().all(|r| match (device, &r.pool().target) {
        (DeviceInner::Cpu { .. }, Target::Cpu) => true,
        #[cfg(feature = "cuda")]
        (DeviceInner::Cuda(d), Target::Cuda(shared)) => Arc::ptr_eq(&shared.ctx, &d.shared.ctx),
        #[cfg(feature = "cuda")]
        _ => false,
    });
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            "command buffer was recorded for another device",
        ))
    }
}

impl Queue {
    fn submit(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        payload: Work,
    ) -> Result<(), Error> {
        match &*self.device {
            DeviceInner::Cpu { queues, .. } => queues[self.index].submit(waits, signals, payload),
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(d) => {
                d.queues[self.index].submit(waits, signals, cuda::CudaPayload::new(payload))
            }
        }
    }

    /// Runs `command_buffers` in order once every wait is reached, then
    /// signals every signal (or fails them with the first error: a failed
    /// wait, a failing command or tile, a panic). Up to
    /// [`EXECUTE_INLINE_COMMAND_BUFFERS`] command buffers are kept without
    /// allocating; more take one allocation.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if a command
    ///   buffer was not [ended](CommandBuffer::end) or was recorded for
    ///   another device.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// Errors of the work itself are not returned here: they fail the
    /// signal semaphores.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(4)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.update(&[1, 2, 3, 4], &buf, 0)?;
    /// cb.end()?;
    /// let (start, done) = (Semaphore::new(0), Semaphore::new(0));
    /// device.queue(0)?.execute(&[(&start, 1)], &[(&done, 1)], &[&cb])?;
    /// start.signal(1)?; // the command buffer may run from now on
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn execute(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
    ) -> Result<(), Error> {
        self.execute_table(waits, signals, command_buffers, None)
    }

    /// As [`execute`](Self::execute), with a binding table: slot `i` of
    /// the command buffers' slot bindings
    /// ([`Binding::slot_read`](Binding::slot_read),
    /// [`Binding::slot_write_chunks`](Binding::slot_write_chunks)) is
    /// `table[i]`, for this submission only. One recording runs on new
    /// buffers every submission, and the table costs no allocation once
    /// warm. The action holds the table's buffers as it holds the ones its
    /// command buffers name.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): as for `execute`;
    ///   a table of more than [`MAX_SLOTS`] buffers, or shorter than a slot
    ///   a command buffer binds; a buffer shorter than its slot's chunks,
    ///   or of another device; one buffer in two slots where either is
    ///   written, or in a slot and bound directly by a command buffer of the
    ///   submission where either writes it.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition): as for
    ///   `execute`; a non-empty table on a CUDA device (not supported yet).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): as for
    ///   `execute`, or the table pool cannot grow.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Binding, Device, Semaphore, Tile, TileIo};
    ///
    /// let device = Device::cpu()?;
    /// let mut cb = device.command_buffer()?;
    /// cb.dispatch_with(
    ///     [2, 1, 1],
    ///     &[Binding::slot_read(0), Binding::slot_write_chunks(1, 4)],
    ///     |t: &Tile, io: &TileIo<'_>| {
    ///         let x: &[u32] = io.read(0)?;
    ///         io.chunk::<u32>(1)?[0] = x[t.linear_id() as usize] * 10;
    ///         Ok(())
    ///     },
    /// )?;
    /// cb.end()?;
    /// let q = device.queue(0)?;
    /// let done = Semaphore::new(0);
    /// for frame in 1..=3u32 {
    ///     let (x, y) = (device.buffer(8)?, device.buffer(8)?); // new buffers
    ///     x.write(0, &[frame.to_ne_bytes(), (frame + 1).to_ne_bytes()].concat())?;
    ///     q.execute_with(&[], &[(&done, u64::from(frame))], &[&cb], &[&x, &y])?;
    ///     done.wait(u64::from(frame), Duration::from_secs(5))?;
    ///     let mut out = [0u8; 8];
    ///     y.read(0, &mut out)?;
    ///     assert_eq!(out, [(10 * frame).to_ne_bytes(), (10 * frame + 10).to_ne_bytes()].concat()[..]);
    /// }
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn execute_with(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
        table: &[&Buffer],
    ) -> Result<(), Error> {
        if table.is_empty() {
            return self.execute_table(waits, signals, command_buffers, None);
        }
        if !matches!(&*self.device, DeviceInner::Cpu { .. }) {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "binding tables are not supported on a CUDA device yet",
            ));
        }
        let recs = command_buffers
            .iter()
            .filter_map(|cb| cb.recording_for_submit().ok().map(|r| &**r));
        let t = table::SlotTable::new(table, recs)?;
        self.execute_table(waits, signals, command_buffers, Some(t))
    }

    fn execute_table(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
        table: Option<table::SlotTable>,
    ) -> Result<(), Error> {
        let mut inline: [Option<RecordingRef>; EXECUTE_INLINE_COMMAND_BUFFERS] = Default::default();
        let mut more = Vec::new();
        for (i, cb) in command_buffers.iter().enumerate() {
            let r = cb.recording_for_submit()?;
            check_recordings(&self.device, &[r])?;
            if table.is_none() && r.has_slots() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "a command buffer binds slots: it needs a binding table with every slot it \
                     binds (execute_with)",
                ));
            }
            let r = r.clone();
            if i < EXECUTE_INLINE_COMMAND_BUFFERS {
                inline[i] = Some(r);
            } else {
                more.push(r);
            }
        }
        let payload = if command_buffers.is_empty() {
            Work::Barrier
        } else {
            Work::Execute {
                inline,
                more: (!more.is_empty()).then(|| more.into_boxed_slice()),
                held: false,
                table,
            }
        };
        self.submit(waits, signals, payload)
    }

    /// Queue-ordered transient memory: a buffer of `len` zeroed bytes that
    /// becomes usable once this action runs (after `waits`), and before it
    /// signals `signals`. Work ordered after those signals may use it;
    /// anything that uses it before (an action, a host `read` or `write`)
    /// fails with `FailedPrecondition` instead, never touching its bytes.
    /// Give it back with [`dealloca`](Self::dealloca).
    ///
    /// The memory comes from the device's pool of power-of-two size
    /// classes (up to 1 GiB; larger ones are allocated on their own): a
    /// frame loop of alloca, work and dealloca allocates nothing once warm.
    /// The bytes are zeroed at this call (so any `Pod` view of them is
    /// defined), which costs a `memset` of `len` bytes.
    ///
    /// # Errors
    ///
    /// Nothing is submitted when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): `len` is 0, or a
    ///   wait or signal value is `u64::MAX`.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) on a CUDA
    ///   device (not supported yet).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): the pool
    ///   cannot grow, or the queue's action pool cannot.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let q = device.queue(0)?;
    /// let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    /// let tmp = q.alloca(&[(&gate, 1)], &[(&s, 1)], 1 << 16)?;
    /// // Not usable before its alloca ran:
    /// assert_eq!(tmp.write(0, &[1]).unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// gate.signal(1)?;
    /// s.wait(1, Duration::from_secs(5))?;
    /// tmp.write(0, &[1, 2, 3])?;
    /// q.dealloca(&[(&s, 1)], &[(&s, 2)], &tmp)?;
    /// s.wait(2, Duration::from_secs(5))?;
    /// // Nor after its dealloca ran:
    /// let mut out = [0u8; 3];
    /// assert_eq!(tmp.read(0, &mut out).unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn alloca(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        len: usize,
    ) -> Result<Buffer, Error> {
        let (transient, id) = match &*self.device {
            DeviceInner::Cpu { transient, id, .. } => (transient, id),
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(_) => {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    "Queue::alloca is not supported on a CUDA device yet",
                ))
            }
        };
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "alloca of 0 bytes: must be at least 1",
            ));
        }
        let buffer = Buffer::transient(host_mem::TransientPool::alloca(transient, len, *id)?);
        self.submit(waits, signals, Work::Alloca(buffer.clone()))?;
        Ok(buffer)
    }

    /// Gives a buffer from [`alloca`](Self::alloca) back to the device's
    /// pool once `waits` are met: from then on nothing may use it (an
    /// action or host copy that tries fails with `FailedPrecondition`),
    /// and its memory is recycled when its last handle is dropped. If an
    /// action still uses the buffer when this one runs, this one fails
    /// (its signals fail with `FailedPrecondition`) and the buffer stays
    /// usable; so does a second dealloca of one buffer.
    ///
    /// # Errors
    ///
    /// Nothing is submitted when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): `buffer` did not
    ///   come from this device's `alloca`, or a wait or signal value is
    ///   `u64::MAX`.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) on a CUDA
    ///   device (not supported yet).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): the queue's
    ///   action pool cannot grow.
    pub fn dealloca(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        buffer: &Buffer,
    ) -> Result<(), Error> {
        let id = match &*self.device {
            DeviceInner::Cpu { id, .. } => id,
            #[cfg(feature = "cuda")]
            DeviceInner::Cuda(_) => {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    "Queue::dealloca is not supported on a CUDA device yet",
                ))
            }
        };
        let ours = buffer
            .host()
            .is_some_and(|m| m.is_transient() && m.device() == *id);
        if !ours {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "dealloca of a buffer that did not come from this device's alloca",
            ));
        }
        self.submit(waits, signals, Work::Dealloca(buffer.clone()))
    }

    /// `execute` with no command buffers: signals once the waits are reached.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// A failed wait is not returned here: it fails the signals.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let (a, b, joined) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    /// device.queue(0)?.barrier(&[(&a, 1), (&b, 1)], &[(&joined, 1)])?;
    /// a.signal(1)?;
    /// b.signal(1)?;
    /// joined.wait(1, Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn barrier(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
    ) -> Result<(), Error> {
        self.submit(waits, signals, Work::Barrier)
    }

    /// Runs `f` on a worker once every wait is reached (on a CUDA device:
    /// on the queue's completion thread, once the stream reached it; `f`
    /// may make CUDA calls); its result (or a panic, as an error) signals
    /// or fails the signals. A closure capturing
    /// up to [`HOST_CALL_INLINE_BYTES`] bytes is stored in pool memory; a
    /// larger one takes one allocation.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error (`f` is dropped, not run):
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// The error `f` returns is not returned here: it fails the signals.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Error, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let queue = device.queue(0)?;
    /// let (ok, failed) = (Semaphore::new(0), Semaphore::new(0));
    /// queue.host_call(&[], &[(&ok, 1)], || Ok(()))?;
    /// ok.wait(1, Duration::from_secs(5))?;
    /// queue.host_call(&[(&ok, 1)], &[(&failed, 1)], || {
    ///     Err(Error::new(ErrorKind::Aborted, "no input"))
    /// })?;
    /// let e = failed.wait(1, Duration::from_secs(5)).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Aborted);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn host_call<F>(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        f: F,
    ) -> Result<(), Error>
    where
        F: FnOnce() -> Result<(), Error> + Send + 'static,
    {
        self.submit(waits, signals, Work::HostCall(host_fn::HostFn::new(f)))
    }
}

static_assertions::assert_impl_all!(Device: Send, Sync);
static_assertions::assert_impl_all!(Queue: Send, Sync, Clone);
