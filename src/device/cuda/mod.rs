//! The CUDA device (feature `cuda`): the same pending queues as the CPU
//! device, issuing to one CUDA stream per queue through `cudarc`'s driver
//! API, dynamically loaded (builds and runs with no CUDA toolkit; without
//! a driver, [`Device::cuda`](crate::Device::cuda) is `Unavailable`).
//!
//! - A ready action waits on the GPU for its device-met waits
//!   (`cuStreamWaitEvent`), launches each command buffer's instantiated
//!   graph (`cuGraphLaunch`), and records one pooled event after its work
//!   for its signals. A later action waiting on one of those values is
//!   issued at once and waits on the GPU (the device-wait shortcut), with
//!   no host round trip.
//! - Events come from an [`EventPool`]: created once, reused; an event is
//!   published on a semaphore only after its record was issued, and held
//!   (counted) by every action waiting on it, so it is never re-recorded
//!   under a pending wait.
//! - Completion runs on a per-queue thread, never inside a CUDA callback
//!   (see [`CompletionMode`]).

mod api;
mod backend;
mod completer;
pub(crate) mod driver;
pub(crate) mod graph;
mod issue;
pub(crate) mod kernel;
mod launch;
pub(crate) mod memory;
mod pinned;
mod seam;
pub(crate) mod shared;
mod stream_priority;

use std::sync::Arc;

pub use completer::CompletionMode;
pub use driver::forget_current_context as forget_current_cuda_context;
pub use kernel::{Kernel, KernelArg};

pub(crate) use backend::{CudaBackend, CudaPayload};

use super::teardown::{start_threaded, Teardown};
use crate::error::{Error, ErrorKind};
use crate::queue::issuer::IssuerThread;
use crate::queue::PendingQueue;
use crate::semaphore::EventPool;
use crate::task::priority as priorities;
use crate::task::Priority;
use driver::{Context, Event};
use memory::HandlePool;
use shared::CudaShared;
use stream_priority::StreamPriorities;

/// How the CUDA device is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// Queues (streams), at least 1.
    pub queues: usize,
    /// How queues learn their work finished (default: an event-waiting
    /// completion thread).
    pub completion: CompletionMode,
    /// Use the device-wait shortcut (`false` forces every cross-action
    /// wait through the host: for comparison).
    pub device_waits: bool,
    /// Most CUDA events the device keeps (each created once, reused).
    pub events: u32,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            queues: 1,
            completion: CompletionMode::EventThread,
            device_waits: true,
            events: 1024,
        }
    }
}

/// The CUDA side of a `Device`.
pub(crate) struct CudaDevice {
    pub(crate) queues: Vec<PendingQueue<CudaBackend>>,
    pub(crate) shared: Arc<CudaShared>,
    pub(crate) teardown: crate::sync::Arc<Teardown>,
    /// Runs the turns the queues hand off (`tear_down` joins it, or
    /// leaves it to exit on its own).
    pub(crate) issuer: Option<IssuerThread>,
}

impl CudaDevice {
    /// Opens device `ordinal`. Never panics: any failure to load or
    /// initialize the driver is `Unavailable` with the reason.
    pub(crate) fn open(
        ordinal: usize,
        config: CudaConfig,
        priorities: &[Priority],
    ) -> Result<CudaDevice, Error> {
        if config.queues == 0 || config.events == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "CudaConfig queues {} events {}: need at least one of each",
                    config.queues, config.events
                ),
            ));
        }
        priorities::check(priorities, config.queues)?;
        match std::panic::catch_unwind(|| Self::open_inner(ordinal, config, priorities)) {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                "the CUDA driver binding panicked while opening the device",
            )),
        }
    }

    fn open_inner(
        ordinal: usize,
        config: CudaConfig,
        priorities: &[Priority],
    ) -> Result<CudaDevice, Error> {
        driver::load()?;
        let ctx = Context::primary(ordinal)?;
        let (c1, c2) = (ctx.clone(), ctx.clone());
        let events = EventPool::new(
            move || Event::new(&c1),
            move |e: Event| e.destroy(&c2),
            config.events.min(64) as usize,
            config.events,
        )?;
        let shared = Arc::new(CudaShared {
            ctx,
            events,
            pinned: Arc::default(),
            device_waits: Default::default(),
            handles: Arc::new(HandlePool::new()?),
        });
        let range = StreamPriorities::of(&shared.ctx)?;
        let (queues, teardown, thread) = start_threaded(
            "fenceline-cuda-issuer",
            config.queues,
            |i, issuer, token| {
                let priority = priorities::of_queue(priorities, i);
                CudaBackend::new(&shared, &config, i, priority, range, issuer, token)
            },
        )?;
        Ok(CudaDevice {
            queues,
            shared,
            teardown,
            issuer: Some(thread),
        })
    }

    /// Whether the calling thread is one of the queues' completion threads
    /// (where host calls run).
    pub(crate) fn on_completion_thread(&self) -> bool {
        let me = std::thread::current().id();
        self.queues
            .iter()
            .any(|q| q.backend().completion_thread() == me)
    }
}
