//! What a Vulkan device's queues, buffers and recordings share.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use super::driver::{Gpu, Timeline};
use super::transient::TransientPool;
use crate::semaphore::EventPool;

/// A timeline point another Vulkan queue of the device may wait for on
/// the GPU: a queue's timeline semaphore and the value its submission
/// signals. Published on a fenceline semaphore as a device signal (the
/// pool's handle, counted), written by the producing queue's issuer before
/// it is published (the semaphore's device-signal lock orders the writes
/// before any reader's loads, hence `Relaxed`).
///
/// It also holds the timeline (a counted reference, `keep`): every action
/// that waits for the point holds the point until it completes, so the
/// producing queue's semaphore outlives every submission that waits on it
/// (Vulkan forbids destroying a semaphore a pending batch refers to), even
/// when that queue is freed first.
#[derive(Default)]
pub(crate) struct Point {
    semaphore: AtomicU64,
    value: AtomicU64,
    /// `Arc::into_raw` of the timeline, or null.
    keep: AtomicPtr<Timeline>,
}

impl Point {
    /// Sets the point: done by the issuer that acquired it (the pool's
    /// only handle to it), before it is published.
    pub(crate) fn set(&self, timeline: &Arc<Timeline>, value: u64) {
        use ash::vk::Handle;
        self.semaphore
            .store(timeline.raw.as_raw(), Ordering::Relaxed);
        self.value.store(value, Ordering::Relaxed);
        // Relaxed: the point is its acquirer's alone here (see above).
        if self.keep.load(Ordering::Relaxed).cast_const() == Arc::as_ptr(timeline) {
            // Kept already (a pooled point goes back to the queues that
            // used it): no reference to move.
            return;
        }
        let new = Arc::into_raw(timeline.clone()).cast_mut();
        // Relaxed: as above; the swap only moves the reference.
        let old = self.keep.swap(new, Ordering::Relaxed);
        release(old);
    }

    /// The wait a submission makes for it.
    pub(crate) fn wait_info(&self) -> vk::SemaphoreSubmitInfo<'static> {
        use ash::vk::Handle;
        vk::SemaphoreSubmitInfo::default()
            .semaphore(vk::Semaphore::from_raw(
                self.semaphore.load(Ordering::Relaxed),
            ))
            .value(self.value.load(Ordering::Relaxed))
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
    }
}

impl Drop for Point {
    fn drop(&mut self) {
        release(*self.keep.get_mut());
    }
}

/// Drops a reference `Point::set` kept (null: none).
fn release(kept: *mut Timeline) {
    if !kept.is_null() {
        // SAFETY: made by `Arc::into_raw` in `set`, taken back once (it
        // was swapped out of, or dropped with, its point).
        drop(unsafe { Arc::from_raw(kept.cast_const()) });
    }
}

/// The Vulkan side shared by a device's queues, buffers and recordings.
pub(crate) struct VulkanShared {
    /// The device's identity: its buffers carry it (`HostMem::device`),
    /// never reused (the same numbering as CPU devices').
    pub(crate) id: u64,
    pub(crate) gpu: Arc<Gpu>,
    /// The hardware queues, each behind its external synchronization:
    /// the only lock on the submission path (fenceline queue `i` submits
    /// to hardware queue `i % len`).
    hardware: Vec<Mutex<vk::Queue>>,
    /// Timeline points published as device signals.
    pub(crate) points: EventPool<Point>,
    /// Waits met on the GPU (a submission waiting for another's point).
    pub(crate) device_waits: AtomicU64,
    /// Memory for `Queue::alloca`.
    pub(crate) transient: Arc<TransientPool>,
}

impl VulkanShared {
    pub(crate) fn new(gpu: Arc<Gpu>, points: u32) -> Result<VulkanShared, crate::Error> {
        let hardware = gpu.queues.iter().map(|&q| Mutex::new(q)).collect();
        let id = crate::sync::unique_number();
        Ok(VulkanShared {
            id,
            transient: Arc::new(TransientPool::new(gpu.clone(), id)),
            gpu,
            hardware,
            points: EventPool::new(
                || Ok(Point::default()),
                drop,
                points.min(64) as usize,
                points,
            )?,
            device_waits: AtomicU64::new(0),
        })
    }

    /// Whether `buffer` is memory of this device.
    pub(crate) fn owns(&self, buffer: &crate::device::Buffer) -> bool {
        buffer.host_device() == Some(self.id)
    }

    /// How many hardware queues the fenceline queues share.
    pub(crate) fn hardware_queues(&self) -> usize {
        self.hardware.len()
    }

    /// Hardware queue `index`, locked for a submission.
    pub(crate) fn lock_queue(&self, index: usize) -> MutexGuard<'_, vk::Queue> {
        // Nothing panics while it is held (one driver call).
        self.hardware[index]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
