//! The public surface that exists only with the `cuda` feature: opening a
//! CUDA device, loading kernels, recording launches. (Generic device code
//! reaches the backend through `device::cuda_seam` instead.)

use std::sync::Arc;

use super::kernel::Launch;
use super::{CudaConfig, CudaDevice, Kernel, KernelArg};
use crate::device::recording::command::Command;
use crate::device::recording::{RecordingPool, Target};
#[cfg(feature = "testing")]
use crate::device::Queue;
use crate::device::{CommandBuffer, Device, DeviceInner};
use crate::error::{Error, ErrorKind};
use crate::task::Priority;

impl Device {
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
    /// - [`Internal`](ErrorKind::Internal) if the driver fails to report
    ///   its stream priority range or to create a queue's stream or an
    ///   event.
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
    pub fn cuda(ordinal: usize) -> Result<Device, Error> {
        Device::cuda_with(ordinal, CudaConfig::default())
    }

    /// CUDA device `ordinal` shaped by `config` (feature `cuda`).
    ///
    /// Errors: as [`cuda`](Self::cuda); `InvalidArgument` for 0 queues or
    /// 0 events.
    pub fn cuda_with(ordinal: usize, config: CudaConfig) -> Result<Device, Error> {
        Self::cuda_with_priorities(ordinal, config, &[])
    }

    /// [`cuda_with`](Self::cuda_with), with queue `i`'s [`Priority`]
    /// `priorities[i]` (`Normal` past the slice's end). A `High` queue's
    /// stream is created with the context's greatest CUDA stream priority,
    /// so the GPU prefers its pending blocks; `Normal` and `Low` queues'
    /// streams get the default (least) one, as CUDA has no priority below
    /// the default.
    ///
    /// Errors: as [`cuda_with`](Self::cuda_with); `InvalidArgument` for
    /// more priorities than queues.
    pub fn cuda_with_priorities(
        ordinal: usize,
        config: CudaConfig,
        priorities: &[Priority],
    ) -> Result<Device, Error> {
        let device = CudaDevice::open(ordinal, config, priorities)?;
        let target = Target::Cuda(device.shared.clone());
        Ok(Device {
            inner: Arc::new(DeviceInner::Cuda(device)),
            recordings: crate::sync::Arc::new(RecordingPool::new(target)),
        })
    }

    /// Loads `ptx` (PTX text) and returns its entry point `name` (feature
    /// `cuda`).
    ///
    /// Errors: `FailedPrecondition` on the CPU device (it runs
    /// [`dispatch`](crate::CommandBuffer::dispatch) closures instead);
    /// `InvalidArgument` if the PTX does not load or has no such entry.
    pub fn load_kernel(&self, ptx: &str, name: &str) -> Result<Kernel, Error> {
        match &*self.inner {
            DeviceInner::Cpu { .. } => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "the CPU device has no kernels: record a dispatch closure",
            )),
            DeviceInner::Vulkan { .. } => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "a Vulkan device loads SPIR-V kernels (Device::load_spirv), not PTX",
            )),
            DeviceInner::Cuda(d) => Kernel::load(&d.shared.ctx, ptx, name),
        }
    }
}

/// What tests check the CUDA stream priorities with (feature `testing`).
#[cfg(feature = "testing")]
impl Device {
    /// The context's CUDA stream priority range, `(least, greatest)`, as
    /// `cuCtxGetStreamPriorityRange` reports it.
    ///
    /// Errors: `FailedPrecondition` on the CPU device; `Internal` if the
    /// driver call fails.
    pub(crate) fn cuda_stream_priority_range(&self) -> Result<(i32, i32), Error> {
        match &*self.inner {
            DeviceInner::Cpu { .. } | DeviceInner::Vulkan { .. } => Err(not_cuda()),
            DeviceInner::Cuda(d) => super::stream_priority::StreamPriorities::of(&d.shared.ctx)
                .map(|r| (r.least, r.greatest)),
        }
    }
}

#[cfg(feature = "testing")]
impl Queue {
    /// The CUDA stream priority the driver reports for the queue's stream
    /// (`cuStreamGetPriority`).
    ///
    /// Errors: `FailedPrecondition` on the CPU device; `Internal` if the
    /// driver call fails.
    pub(crate) fn cuda_stream_priority(&self) -> Result<i32, Error> {
        match &*self.device {
            DeviceInner::Cpu { .. } | DeviceInner::Vulkan { .. } => Err(not_cuda()),
            DeviceInner::Cuda(d) => d.queues[self.index].backend().stream_priority(),
        }
    }
}

#[cfg(feature = "testing")]
fn not_cuda() -> Error {
    Error::new(
        ErrorKind::FailedPrecondition,
        "only a CUDA device has CUDA streams",
    )
}

impl CommandBuffer {
    /// Launches `kernel` over `grid` blocks of `block` threads with
    /// `shared_mem` bytes of dynamic shared memory and `args` as its
    /// parameters (feature `cuda`).
    ///
    /// A [`KernelArg::Slot`](crate::KernelArg::Slot) argument is resolved
    /// per submission from the binding table of
    /// [`Queue::execute_with`](crate::Queue::execute_with) (a command
    /// buffer with one cannot be submitted with `execute`).
    ///
    /// Errors: `FailedPrecondition` on a CPU device's command buffer, or
    /// for a buffer from `Queue::alloca` before its alloca ran or after its
    /// dealloca ran; `InvalidArgument` for a zero dimension, a kernel or
    /// buffer of another device, a slot of `MAX_SLOTS` or more, or more
    /// than 64 parameters in a launch with a slot argument.
    pub fn launch(
        &mut self,
        kernel: &Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        args: &[KernelArg<'_>],
    ) -> Result<(), Error> {
        let Target::Cuda(shared) = &self.recording.pool().target else {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "kernel launch recorded for the CPU device: record a dispatch",
            ));
        };
        if !Arc::ptr_eq(kernel.context(), &shared.ctx) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "kernel belongs to another device than the command buffer",
            ));
        }
        let recording = self.recording_mut()?;
        let launch = Launch::new(recording, kernel, grid, block, shared_mem, args)?;
        self.record(Command::Launch(launch))
    }
}
