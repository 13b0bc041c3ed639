//! Devices: the CPU device (embedded default) and, with feature `cuda`,
//! the CUDA device (a later issue).
//!
//! A [`Device`] owns a task executor and one [`PendingQueue`] per queue.
//! [`Queue::execute`] submits command buffers gated by semaphores; each
//! submission runs as a task DAG built in pool memory.

mod buffer;
mod cpu;
mod host_fn;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use buffer::Buffer;
pub use cpu::EXECUTE_INLINE_COMMAND_BUFFERS;
pub use host_fn::HOST_CALL_INLINE_BYTES;

use crate::command_buffer::CommandBuffer;
use crate::error::{Error, ErrorKind};
use crate::queue::PendingQueue;
use crate::semaphore::Semaphore;
use crate::task::{Executor, ExecutorConfig};
use cpu::{CpuBackend, CpuPayload};

/// How the CPU device is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads; 0 means the available parallelism.
    pub workers: usize,
    /// Queues (at least 1).
    pub queues: usize,
    /// Idle workers spin briefly before parking (lower latency).
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
/// Dropping it cancels work still waiting on semaphores (its signals fail
/// with `Cancelled`), lets issued work finish, and joins every thread.
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    queues: Vec<PendingQueue<CpuBackend>>,
    /// Boxed so its address is stable for the backends' pointers; dropped
    /// after the queues (see `Drop`).
    executor: Option<Box<Executor>>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("kind", &"cpu")
            .field("queues", &self.inner.queues.len())
            .finish()
    }
}

impl Device {
    /// The CPU device with default settings (one worker per core, one queue).
    pub fn cpu() -> Result<Device, Error> {
        Device::cpu_with(CpuConfig::default())
    }

    /// The CPU device shaped by `config`.
    ///
    /// Errors: `InvalidArgument` for 0 queues; `ResourceExhausted` if
    /// threads or memory cannot be had.
    pub fn cpu_with(config: CpuConfig) -> Result<Device, Error> {
        if config.queues == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "CpuConfig::queues 0: need at least one queue",
            ));
        }
        let executor = Box::new(Executor::new(ExecutorConfig {
            workers: config.workers,
            spin: config.spin,
        })?);
        let exec: *const Executor = &*executor;
        let queues = (0..config.queues)
            .map(|_| PendingQueue::new(CpuBackend::new(exec)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                queues,
                executor: Some(executor),
            }),
        })
    }

    /// Queue `index` (a cheap handle).
    ///
    /// Errors: `InvalidArgument` if `index` is not below the queue count.
    pub fn queue(&self, index: usize) -> Result<Queue, Error> {
        if index >= self.inner.queues.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "queue index {index}: the device has {} queue(s)",
                    self.inner.queues.len()
                ),
            ));
        }
        Ok(Queue {
            device: self.inner.clone(),
            index,
        })
    }

    /// A zeroed buffer of `len` bytes.
    ///
    /// Errors: `InvalidArgument` for 0 bytes.
    pub fn buffer(&self, len: usize) -> Result<Buffer, Error> {
        Buffer::new(len)
    }

    /// An empty command buffer, recording.
    pub fn command_buffer(&self) -> Result<CommandBuffer, Error> {
        Ok(CommandBuffer::new())
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        for q in &self.queues {
            q.shutdown();
        }
        // Issued work finishes on the executor; wait for it, then drop the
        // queues before the executor their backends point to.
        while self.queues.iter().any(|q| q.in_flight() > 0) {
            std::thread::sleep(Duration::from_micros(50));
        }
        self.queues.clear();
        self.executor.take();
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

impl Queue {
    fn pending(&self) -> &PendingQueue<CpuBackend> {
        &self.device.queues[self.index]
    }

    /// Runs `command_buffers` in order once every wait is reached, then
    /// signals every signal (or fails them with the first error: a failed
    /// wait, a failing command or tile, a panic). Up to
    /// [`EXECUTE_INLINE_COMMAND_BUFFERS`] command buffers are kept without
    /// allocating; more take one allocation.
    ///
    /// Errors (nothing is submitted then): `FailedPrecondition` for a
    /// command buffer not ended; `Cancelled` once the device is dropping.
    pub fn execute(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
    ) -> Result<(), Error> {
        let mut inline: [Option<Arc<crate::command_buffer::Recording>>;
            EXECUTE_INLINE_COMMAND_BUFFERS] = Default::default();
        let mut more = Vec::new();
        for (i, cb) in command_buffers.iter().enumerate() {
            let r = cb.recording_for_submit()?.clone();
            if i < EXECUTE_INLINE_COMMAND_BUFFERS {
                inline[i] = Some(r);
            } else {
                more.push(r);
            }
        }
        let payload = if command_buffers.is_empty() {
            CpuPayload::Barrier
        } else {
            CpuPayload::Execute {
                inline,
                more: (!more.is_empty()).then(|| more.into_boxed_slice()),
            }
        };
        self.pending().submit(waits, signals, payload)
    }

    /// `execute` with no command buffers: signals once the waits are reached.
    pub fn barrier(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
    ) -> Result<(), Error> {
        self.pending().submit(waits, signals, CpuPayload::Barrier)
    }

    /// Runs `f` on a worker once every wait is reached; its result (or a
    /// panic, as an error) signals or fails the signals. A closure capturing
    /// up to [`HOST_CALL_INLINE_BYTES`] bytes is stored in pool memory; a
    /// larger one takes one allocation.
    pub fn host_call<F>(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        f: F,
    ) -> Result<(), Error>
    where
        F: FnOnce() -> Result<(), Error> + Send + 'static,
    {
        self.pending().submit(
            waits,
            signals,
            CpuPayload::HostCall(host_fn::HostFn::new(f)),
        )
    }
}

static_assertions::assert_impl_all!(Device: Send, Sync);
static_assertions::assert_impl_all!(Queue: Send, Sync, Clone);
