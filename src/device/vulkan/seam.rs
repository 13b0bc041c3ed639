//! What generic device code calls on the Vulkan backend: the device's
//! [`DeviceBackend`] (`device/no_vulkan.rs` has the same on types with no
//! values).

use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::driver::MappedBuffer;
use super::{VulkanDevice, VulkanPayload};
use crate::device::data::buffer::HostRef;
use crate::device::recording::Target;
use crate::device::stats::DeviceStats;
use crate::device::work::Work;
use crate::device::{Buffer, DeviceBackend, BUFFER_ALIGN};
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
        let ptr = NonNull::new(mem.ptr()).ok_or_else(|| {
            Error::new(ErrorKind::Internal, "vkMapMemory returned a null mapping")
        })?;
        if ptr.as_ptr() as usize % BUFFER_ALIGN != 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                "the driver mapped a buffer below BUFFER_ALIGN",
            ));
        }
        let handle = ash::vk::Handle::as_raw(mem.raw);
        // SAFETY: the mapping of `len` bytes (at least: the buffer was
        // made that long), reached only through this handle and the
        // device's work, alive until `mem` (the owner) drops; aligned
        // (checked above).
        let host = unsafe { HostRef::mapped(ptr, len, self.shared.id, handle, Box::new(mem)) }?;
        Ok(Buffer::mapped(host))
    }

    fn alloca(&self, _len: usize, _queue: usize) -> Result<Buffer, Error> {
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            "Queue::alloca is not supported on a Vulkan device yet: use Device::buffer",
        ))
    }

    fn owns_transient(&self, _buffer: &Buffer, _queue: usize) -> Result<bool, Error> {
        Ok(false)
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

    fn tear_down(&mut self) {
        let inside = crate::queue::in_issue_pass() || self.on_completion_thread();
        self.queues.clear();
        let issuer = self.issuer.take();
        if inside {
            if let Some(t) = issuer {
                t.detach();
            }
        } else {
            self.teardown.wait_drained();
            drop(issuer);
        }
    }
}
