//! What generic device code calls on the CUDA backend: the device's
//! [`DeviceBackend`], and the shared state's, memory's and buffers'
//! methods (`device/no_cuda.rs` has the same on types with no values).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::driver::DeviceMem;
use super::graph::CudaGraph;
use super::issue;
use super::memory::{CudaRef, HandlePool};
use super::{CudaDevice, CudaPayload, CudaShared};
use crate::device::data::hold::Life;
use crate::device::recording::Recording;
use crate::device::recording::Target;
use crate::device::stats::DeviceStats;
use crate::device::teardown::tear_down_threaded;
use crate::device::work::Work;
use crate::device::{Buffer, DeviceBackend};
use crate::error::{Error, ErrorKind};
use crate::semaphore::Semaphore;
use crate::task::Priority;

impl DeviceBackend for CudaDevice {
    fn name(&self) -> &str {
        &self.shared.ctx.name
    }

    fn queue_count(&self) -> usize {
        self.queues.len()
    }

    fn queue_priority(&self, index: usize) -> Priority {
        self.queues[index].backend().priority()
    }

    /// A buffer of `len` zeroed bytes of device memory.
    fn buffer(&self, len: usize) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer length 0: must be at least 1",
            ));
        }
        Ok(Buffer::cuda_mem(CudaRef::boxed(DeviceMem::zeroed(
            &self.shared.ctx,
            len,
        )?)))
    }

    /// The buffer of an alloca on queue `queue`: no memory until the
    /// alloca's action is issued; its handle from the device's pool.
    fn alloca(&self, len: usize, queue: usize) -> Result<Buffer, Error> {
        let mem = DeviceMem::transient(&self.shared.ctx, len, queue);
        Ok(Buffer::cuda_mem(HandlePool::handle(
            &self.shared.handles,
            mem,
        )?))
    }

    /// Submits `work` to queue `queue`.
    fn submit(
        &self,
        queue: usize,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        work: Work,
    ) -> Result<(), Error> {
        self.queues[queue].submit(waits, signals, CudaPayload::new(work))
    }

    fn made(&self, target: &Target) -> bool {
        matches!(target, Target::Cuda(shared) if Arc::ptr_eq(&shared.ctx, &self.shared.ctx))
    }

    fn checks_uses(&self) -> bool {
        true
    }

    /// Checks a buffer a submission to queue `queue` uses: a buffer from
    /// `Queue::alloca` must be that queue's (its stream orders every use)
    /// and its dealloca must not have run; one a recording names
    /// (`recorded`) has had its alloca run. Checked again at issue.
    fn check_use(&self, buffer: &Buffer, queue: usize, recorded: bool) -> Result<(), Error> {
        let Some(t) = buffer.cuda().and_then(|m| m.transient.as_ref()) else {
            return Ok(());
        };
        if t.queue != queue {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a buffer from queue {}'s alloca used on queue {queue}: on a CUDA device \
                     such a buffer is used only on the queue that allocated it",
                    t.queue
                ),
            ));
        }
        if recorded {
            return buffer.device_ptr().map(drop);
        }
        if t.life.life() == Life::Gone {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "a binding table holds a buffer from Queue::alloca ({} bytes) whose \
                     dealloca ran",
                    buffer.len()
                ),
            ));
        }
        Ok(())
    }

    /// Whether `buffer` came from this device's alloca, for a dealloca on
    /// queue `queue` (`InvalidArgument` if it came from another queue's).
    fn owns_transient(&self, buffer: &Buffer, queue: usize) -> Result<bool, Error> {
        let Some(q) = buffer.cuda_transient_queue() else {
            return Ok(false);
        };
        if !self.shared.owns(buffer) {
            return Ok(false);
        }
        if q != queue {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "dealloca on queue {queue} of a buffer from queue {q}'s alloca: on a CUDA \
                     device it goes back on the queue that allocated it"
                ),
            ));
        }
        Ok(true)
    }

    fn add_stats(&self, stats: &mut DeviceStats) {
        for q in &self.queues {
            stats.add_queue(q);
        }
        stats.events_created += self.shared.events.created() as u64;
        stats.device_waits += self.shared.device_waits.load(Ordering::Relaxed);
    }

    fn trace_threads(&self) -> usize {
        // An issuing and a completing thread a queue, at most.
        2 * self.queues.len()
    }

    /// The device's drop (`teardown::tear_down_threaded`).
    fn tear_down(&mut self) {
        let inside = crate::queue::in_issue_pass() || self.on_completion_thread();
        let issuer = self.issuer.take();
        tear_down_threaded(&mut self.queues, issuer, &self.teardown, inside);
    }
}

impl CudaShared {
    /// Whether `buffer` is memory of this device.
    pub(crate) fn owns(&self, buffer: &Buffer) -> bool {
        buffer.on_context(&self.ctx)
    }

    /// The graph of an ending recording: instantiated for a reusable one,
    /// `None` for a one-shot one (launched command by command).
    pub(crate) fn graph(&self, recording: &Recording) -> Result<Option<CudaGraph>, Error> {
        if recording.is_one_shot() {
            return Ok(None);
        }
        issue::build(&self.ctx, &self.pinned, recording)
    }
}

impl Buffer {
    /// Whether this is device memory of context `ctx`.
    pub(crate) fn on_context(&self, ctx: &Arc<super::driver::Context>) -> bool {
        self.cuda().is_some_and(|m| Arc::ptr_eq(&m.ctx, ctx))
    }
}

impl DeviceMem {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The queue of memory from `Queue::alloca` (`None` for any other).
    pub(crate) fn transient_queue(&self) -> Option<usize> {
        self.transient.as_ref().map(|t| t.queue)
    }
}
