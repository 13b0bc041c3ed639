//! What generic device code calls on the Vulkan backend: the device's
//! [`DeviceBackend`] (`device/no_vulkan.rs` has the same on types with no
//! values).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::driver::MappedBuffer;
use super::transient::{mapping, TransientPool};
use super::{VulkanDevice, VulkanPayload};
use crate::device::data::buffer::HostRef;
use crate::device::data::host_mem::Mapped;
use crate::device::recording::Target;
use crate::device::stats::DeviceStats;
use crate::device::teardown::tear_down_threaded;
use crate::device::work::Work;
use crate::device::{Buffer, DeviceBackend};
use crate::error::{Error, ErrorKind};
use crate::semaphore::Semaphore;
use crate::task::Priority;

impl DeviceBackend for VulkanDevice {
    fn name(&self) -> &str {
        &self.shared.gpu.name
    }

    fn queue_count(&self) -> usize {
        self.queues.len()
    }

    fn queue_priority(&self, index: usize) -> Priority {
        self.queues[index].backend().priority()
    }

    /// `len` zeroed bytes of host-visible memory, mapped for their life.
    fn buffer(&self, len: usize) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer length 0: must be at least 1",
            ));
        }
        let mem = MappedBuffer::new(&self.shared.gpu, len)?;
        let ptr = mapping(&mem)?;
        let mapped = Mapped {
            handle: ash::vk::Handle::as_raw(mem.raw),
            capacity: len,
            transient: false,
            owner: Box::new(mem),
            recycle: None,
        };
        // SAFETY: the mapping of `len` bytes, reached only through this
        // handle and the device's work, alive until its owner drops;
        // aligned (`mapping`).
        let host = unsafe { HostRef::mapped(ptr, len, self.shared.id, mapped) };
        Ok(Buffer::mapped(host))
    }

    /// A buffer from the device's pool, pending until the alloca's action
    /// is issued (from then on the GPU work ordered after it may use it),
    /// closed when the dealloca's action completes; its memory goes back
    /// to the pool with its last handle. Any queue of the device may use
    /// it and give it back (its memory is not tied to a queue).
    fn alloca(&self, len: usize, _queue: usize) -> Result<Buffer, Error> {
        Ok(Buffer::mapped(TransientPool::alloca(
            &self.shared.transient,
            len,
        )?))
    }

    fn owns_transient(&self, buffer: &Buffer, _queue: usize) -> Result<bool, Error> {
        Ok(buffer
            .host()
            .is_some_and(|m| m.is_transient() && m.device() == self.shared.id))
    }

    fn check_execute(&self, work: &Work) -> Result<(), Error> {
        // Issue checks again (the holds); refusing at the call reports it
        // where the mistake was made.
        crate::device::work::check_not_gone(work)
    }

    fn made(&self, target: &Target) -> bool {
        matches!(target, Target::Vulkan(shared) if Arc::ptr_eq(shared, &self.shared))
    }

    fn submit(
        &self,
        queue: usize,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        work: Work,
    ) -> Result<(), Error> {
        self.queues[queue].submit(waits, signals, VulkanPayload::new(work))
    }

    fn add_stats(&self, stats: &mut DeviceStats) {
        for q in &self.queues {
            stats.add_queue(q);
        }
        stats.events_created += self.shared.points.created() as u64;
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
