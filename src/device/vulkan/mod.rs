//! The Vulkan device (feature `vulkan`): the same pending queues as the
//! CPU and CUDA devices, issuing to Vulkan queues through `ash`, the loader
//! loaded at run time (no Vulkan SDK to build; without a loader or a
//! device, [`Device::vulkan`](crate::Device::vulkan) is `Unavailable`).
//!
//! - Each fenceline queue has a timeline semaphore; an action's submission
//!   signals the queue's next value, and its completion thread waits for
//!   that value on the host and completes the action.
//! - An action's signals are published as device signals (a pooled
//!   [`Point`](shared::Point): the timeline and the value): a later action
//!   of any queue of the device that waits for them is issued at once and
//!   waits on the GPU, with no host round trip. Other waits (the host, the
//!   CPU device, CUDA) are met before issue, as on every device.
//! - Several fenceline queues share a hardware queue when the device has
//!   fewer (lavapipe has one): queue `i` submits to hardware queue
//!   `i % count`, under that queue's lock, held for one `vkQueueSubmit2`.
//! - Buffers are host-visible, coherent memory, mapped for their life:
//!   `Buffer::read`/`write` copy through the mapping, holding the buffer
//!   for writing (see `HostMem::held`), while every action holds the
//!   buffers it uses, shared, from its issue to its completion.
//! - Kernels are SPIR-V compute shaders (`driver/pipeline.rs`), their
//!   buffers pushed as descriptors with each dispatch, with push
//!   constants; the device runs with `robustBufferAccess`.
//!
//! The driver layer (`driver/`) is checked against a real driver, Mesa's
//! lavapipe, with the Khronos validation layer and synchronization
//! validation; any validation message fails a test.

mod api;
mod backend;
mod completer;
pub(crate) mod driver;
pub(crate) mod kernel;
mod seam;
pub(crate) mod shared;
pub(crate) mod staged;
mod staging;
mod transient;

use std::sync::Arc;

pub use kernel::{SpirvBinding, SpirvKernel};

pub(crate) use backend::{VulkanBackend, VulkanPayload};

use super::teardown::{start_threaded, Teardown};
use crate::error::{Error, ErrorKind};
use crate::queue::issuer::IssuerThread;
use crate::queue::PendingQueue;
use crate::task::priority as priorities;
use crate::task::Priority;
use driver::{Gpu, Instance, InstanceConfig};
use shared::VulkanShared;

/// How the Vulkan device is shaped (feature `vulkan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VulkanConfig {
    /// Queues, at least 1 (they share the device's hardware queues when
    /// it has fewer).
    pub queues: usize,
    /// Turn on the Khronos validation layer with synchronization
    /// validation (`Unavailable` if it is not installed); its messages are
    /// collected for tests.
    pub validation: bool,
    /// Wait on the GPU for values another queue of the device signals
    /// (`false` meets every wait on the host: for comparison).
    pub device_waits: bool,
    /// Most timeline points the device publishes at once (pooled, made
    /// once).
    pub points: u32,
}

impl Default for VulkanConfig {
    fn default() -> Self {
        VulkanConfig {
            queues: 1,
            validation: false,
            device_waits: true,
            points: 1024,
        }
    }
}

/// The Vulkan side of a `Device`.
pub(crate) struct VulkanDevice {
    pub(crate) queues: Vec<PendingQueue<VulkanBackend>>,
    pub(crate) shared: Arc<VulkanShared>,
    pub(crate) teardown: crate::sync::Arc<Teardown>,
    pub(crate) issuer: Option<IssuerThread>,
}

impl VulkanDevice {
    /// Opens Vulkan device `index`. Never panics: any failure to load or
    /// initialize the driver is `Unavailable` with the reason.
    pub(crate) fn open(
        index: usize,
        config: &VulkanConfig,
        priorities: &[Priority],
    ) -> Result<VulkanDevice, Error> {
        if config.queues == 0 || config.points == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "VulkanConfig queues {} points {}: need at least one of each",
                    config.queues, config.points
                ),
            ));
        }
        priorities::check(priorities, config.queues)?;
        match std::panic::catch_unwind(|| Self::open_inner(index, config, priorities)) {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                "the Vulkan binding panicked while opening the device",
            )),
        }
    }

    fn open_inner(
        index: usize,
        config: &VulkanConfig,
        priorities: &[Priority],
    ) -> Result<VulkanDevice, Error> {
        let instance = Arc::new(Instance::new(&InstanceConfig {
            validation: config.validation,
            loader: None,
        })?);
        // Vulkan's queue priorities: `High` 1.0, `Normal` 0.5, `Low` 0.0.
        let levels: Vec<f32> = (0..config.queues)
            .map(|i| match priorities::of_queue(priorities, i) {
                Priority::High => 1.0,
                Priority::Normal => 0.5,
                Priority::Low => 0.0,
            })
            .collect();
        let gpu = Arc::new(Gpu::new(&instance, index, &levels)?);
        let shared = Arc::new(VulkanShared::new(gpu, config.points)?);
        let (queues, teardown, thread) =
            start_threaded("fenceline-vk-issuer", config.queues, |i, issuer, token| {
                let priority = priorities::of_queue(priorities, i);
                VulkanBackend::new(&shared, i, priority, config.device_waits, issuer, token)
            })?;
        Ok(VulkanDevice {
            queues,
            shared,
            teardown,
            issuer: Some(thread),
        })
    }

    /// Whether the calling thread is one of the queues' completion threads.
    pub(crate) fn on_completion_thread(&self) -> bool {
        let me = std::thread::current().id();
        self.queues
            .iter()
            .any(|q| q.backend().completion_thread() == me)
    }
}
