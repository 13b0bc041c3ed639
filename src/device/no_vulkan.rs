//! The Vulkan backend when the `vulkan` feature is off: `device::vulkan`
//! is this file then (as `no_cuda.rs` is for CUDA). It has the types
//! generic device code names (the device, its shared state, a recording's
//! staged bytes, a SPIR-V dispatch), with no values, and the methods
//! generic code calls, which cannot be reached: every Vulkan arm of a
//! generic `match` is compiled in both builds, and no generic file
//! carries a `cfg` for the feature.

use crate::device::recording::command::Command;
use crate::device::recording::{Recording, Target};
use crate::device::work::Work;
use crate::device::{Buffer, DeviceBackend, DeviceStats};
use crate::error::Error;
use crate::semaphore::Semaphore;
use crate::task::Priority;

/// A Vulkan device (none exists without the feature).
pub(crate) enum VulkanDevice {}
/// What a Vulkan device's queues, buffers and recordings share.
pub(crate) enum VulkanShared {}
/// A recording's staged bytes.
pub(crate) enum VulkanStaging {}
/// A recorded SPIR-V dispatch.
pub(crate) enum SpirvDispatch {}

/// The paths generic code names them by, as in the real backend.
pub(crate) mod shared {
    pub(crate) use super::VulkanShared;
}
/// As above.
pub(crate) mod staged {
    pub(crate) use super::VulkanStaging;
}
/// As above.
pub(crate) mod kernel {
    pub(crate) use super::SpirvDispatch;
}

impl VulkanShared {
    pub(crate) fn stage_bytes(&self, _recording: &mut Recording) -> Result<(), Error> {
        match *self {}
    }
}

impl VulkanShared {
    pub(crate) fn owns(&self, _buffer: &Buffer) -> bool {
        match *self {}
    }
}

impl SpirvDispatch {
    pub(crate) fn buffers(&self) -> std::iter::Empty<&Buffer> {
        match *self {}
    }
    pub(crate) fn slots(&self) -> std::iter::Empty<usize> {
        match *self {}
    }
}

impl DeviceBackend for VulkanDevice {
    fn name(&self) -> &str {
        match *self {}
    }
    fn queue_count(&self) -> usize {
        match *self {}
    }
    fn queue_priority(&self, _index: usize) -> Priority {
        match *self {}
    }
    fn buffer(&self, _len: usize) -> Result<Buffer, Error> {
        match *self {}
    }
    fn alloca(&self, _len: usize, _queue: usize) -> Result<Buffer, Error> {
        match *self {}
    }
    fn owns_transient(&self, _buffer: &Buffer, _queue: usize) -> Result<bool, Error> {
        match *self {}
    }
    fn made(&self, _target: &Target) -> bool {
        match *self {}
    }
    fn submit(
        &self,
        _queue: usize,
        _waits: &[(&Semaphore, u64)],
        _signals: &[(&Semaphore, u64)],
        _work: Work,
    ) -> Result<(), Error> {
        match *self {}
    }
    fn add_stats(&self, _stats: &mut DeviceStats) {
        match *self {}
    }
    fn trace_threads(&self) -> usize {
        match *self {}
    }
    fn tear_down(&mut self) {
        match *self {}
    }
}

/// The Vulkan variants of the generic enums, made here for the dead-code
/// lint alone (only the backend makes them; without it nothing can).
#[allow(dead_code, unreachable_code)]
fn variants(
    device: VulkanDevice,
    shared: std::sync::Arc<VulkanShared>,
    dispatch: SpirvDispatch,
) -> (crate::device::DeviceInner, Target, Command) {
    (
        crate::device::DeviceInner::Vulkan(device),
        Target::Vulkan(shared),
        Command::Spirv(dispatch),
    )
}
