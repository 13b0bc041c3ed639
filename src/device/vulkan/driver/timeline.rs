//! Timeline semaphores, waited for and signalled on the GPU and the host.

use std::sync::Arc;

use ash::vk;

use super::{internal, Gpu};
use crate::error::Error;

/// A timeline semaphore of a [`Gpu`]: a `u64` that only grows, signalled
/// and waited for by queue submissions and by the host.
pub(crate) struct Timeline {
    gpu: Arc<Gpu>,
    pub(crate) raw: vk::Semaphore,
}

impl Timeline {
    /// A timeline semaphore at `initial`.
    pub(crate) fn new(gpu: &Arc<Gpu>, initial: u64) -> Result<Timeline, Error> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(initial);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a live device; `info` lives for the call.
        let raw = unsafe { gpu.device.create_semaphore(&info, None) }
            .map_err(|r| internal("vkCreateSemaphore", r))?;
        #[cfg(any(test, feature = "testing"))]
        gpu.live_timelines
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Timeline {
            gpu: gpu.clone(),
            raw,
        })
    }

    /// Its value.
    pub(crate) fn value(&self) -> Result<u64, Error> {
        // SAFETY: a live semaphore of this device.
        unsafe { self.gpu.device.get_semaphore_counter_value(self.raw) }
            .map_err(|r| internal("vkGetSemaphoreCounterValue", r))
    }

    /// Signals `value` from the host.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn signal(&self, value: u64) -> Result<(), Error> {
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.raw)
            .value(value);
        // SAFETY: a live semaphore of this device; `info` lives for the call.
        unsafe { self.gpu.device.signal_semaphore(&info) }
            .map_err(|r| internal("vkSignalSemaphore", r))
    }

    /// Waits on the host until the value reaches `value`; `false` if
    /// `timeout_ns` passed first.
    pub(crate) fn wait(&self, value: u64, timeout_ns: u64) -> Result<bool, Error> {
        let semaphores = [self.raw];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: a live semaphore of this device; `info` lives for the call.
        match unsafe { self.gpu.device.wait_semaphores(&info, timeout_ns) } {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(r) => Err(internal("vkWaitSemaphores", r)),
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: made on this device, destroyed once; its users wait for
        // the submissions that use it before dropping it.
        unsafe { self.gpu.device.destroy_semaphore(self.raw, None) };
        #[cfg(any(test, feature = "testing"))]
        self.gpu
            .live_timelines
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Submits an empty batch to `queue` that waits on the GPU for `wait`
/// to reach its value and then signals `signal` to its value: the mapping
/// of a fenceline action that waits on one queue's work and signals
/// another's, with no host round trip.
#[cfg(test)]
pub(crate) fn submit_wait_signal(
    gpu: &Gpu,
    queue: vk::Queue,
    wait: (&Timeline, u64),
    signal: (&Timeline, u64),
) -> Result<(), Error> {
    let waits = [vk::SemaphoreSubmitInfo::default()
        .semaphore(wait.0.raw)
        .value(wait.1)
        .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
    let signals = [vk::SemaphoreSubmitInfo::default()
        .semaphore(signal.0.raw)
        .value(signal.1)
        .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
    let submit = [vk::SubmitInfo2::default()
        .wait_semaphore_infos(&waits)
        .signal_semaphore_infos(&signals)];
    // SAFETY: a queue of this device, used by one thread at a time here
    // (the caller's); every pointer lives for the call.
    unsafe { gpu.device.queue_submit2(queue, &submit, vk::Fence::null()) }
        .map_err(|r| internal("vkQueueSubmit2", r))
}
