//! The public surface that exists only with the `vulkan` feature: opening
//! a Vulkan device, loading SPIR-V kernels, recording their dispatches.

use std::ffi::CString;
use std::sync::Arc;

use super::driver::{Pipeline, MAX_DISPATCH_BUFFERS};
use super::kernel::{Bound, SpirvBinding, SpirvDispatch};
use super::{SpirvKernel, VulkanConfig, VulkanDevice};
use crate::device::data::binding::MAX_SLOTS;
use crate::device::recording::command::Command;
use crate::device::recording::{RecordingPool, Target};
use crate::device::{CommandBuffer, Device, DeviceInner};
use crate::error::{Error, ErrorKind};
use crate::task::Priority;

impl Device {
    /// Vulkan device `index` (in the loader's order) with default settings
    /// (feature `vulkan`).
    ///
    /// Never panics: a missing loader or device is an error.
    ///
    /// # Errors
    ///
    /// - [`Unavailable`](ErrorKind::Unavailable), with the reason, when no
    ///   Vulkan loader can be loaded, there is no device `index`, or it
    ///   lacks what fenceline needs (Vulkan 1.2, timeline semaphores,
    ///   synchronization2, `VK_KHR_push_descriptor`, `robustBufferAccess`,
    ///   a compute queue).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a thread
    ///   cannot be spawned.
    /// - [`Internal`](ErrorKind::Internal) if the driver fails to make a
    ///   queue's timeline semaphore.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// match Device::vulkan(0) {
    ///     Ok(device) => assert_eq!(device.buffer(256)?.len(), 256),
    ///     // No loader or no device: an error, not a panic.
    ///     Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable),
    /// }
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn vulkan(index: usize) -> Result<Device, Error> {
        Device::vulkan_with(index, VulkanConfig::default())
    }

    /// Vulkan device `index` shaped by `config` (feature `vulkan`).
    ///
    /// Errors: as [`vulkan`](Self::vulkan); `InvalidArgument` for 0 queues
    /// or 0 points; `Unavailable` with `validation` and no validation layer.
    pub fn vulkan_with(index: usize, config: VulkanConfig) -> Result<Device, Error> {
        Self::vulkan_with_priorities(index, config, &[])
    }

    /// [`vulkan_with`](Self::vulkan_with), with queue `i`'s [`Priority`]
    /// `priorities[i]` (`Normal` past the slice's end), as the CPU and
    /// CUDA devices take them. The hardware queues are made with Vulkan
    /// queue priorities (`High` 1.0, `Normal` 0.5, `Low` 0.0), which the
    /// driver may use to favour one queue's work over another's; fenceline
    /// queues sharing a hardware queue (the device has fewer: lavapipe has
    /// one) share the highest of their priorities.
    ///
    /// Errors: as [`vulkan_with`](Self::vulkan_with); `InvalidArgument`
    /// for more priorities than queues.
    pub fn vulkan_with_priorities(
        index: usize,
        config: VulkanConfig,
        priorities: &[Priority],
    ) -> Result<Device, Error> {
        let device = VulkanDevice::open(index, &config, priorities)?;
        let target = Target::Vulkan(device.shared.clone());
        Ok(Device {
            inner: Arc::new(DeviceInner::Vulkan(device)),
            recordings: crate::sync::Arc::new(RecordingPool::new(target)),
        })
    }

    /// A compute kernel from the SPIR-V module `words`, entry point
    /// `entry` (feature `vulkan`): its storage buffers are descriptor set
    /// 0's bindings `0..buffers` (at most 16), and it takes
    /// `push_constant_bytes` of push constants (a multiple of 4).
    ///
    /// # Errors
    ///
    /// `FailedPrecondition` on a CPU or CUDA device; `InvalidArgument` for
    /// a module that does not start with the SPIR-V magic number, an entry
    /// name with a NUL byte, more than 16 buffers, a push-constant size
    /// not a multiple of 4 or over 128 bytes, or a module the driver
    /// refuses.
    ///
    /// # Safety
    ///
    /// `words` is valid SPIR-V for Vulkan (as `spirv-val --target-env
    /// vulkan1.2` accepts it), with a compute entry point `entry` that uses
    /// only those bindings and push constants: drivers do not check
    /// modules (the validation layer does), and an invalid one is
    /// undefined behaviour in the driver. (What a valid kernel does at run
    /// time cannot reach memory outside its buffers: the device runs with
    /// `robustBufferAccess`.)
    pub unsafe fn load_spirv(
        &self,
        words: &[u32],
        entry: &str,
        buffers: usize,
        push_constant_bytes: usize,
    ) -> Result<SpirvKernel, Error> {
        let DeviceInner::Vulkan(d) = &*self.inner else {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "SPIR-V kernels run on a Vulkan device only",
            ));
        };
        if words.first() != Some(&0x0723_0203) {
            return Err(invalid("not a SPIR-V module (no magic number)".into()));
        }
        if buffers > MAX_DISPATCH_BUFFERS {
            return Err(invalid(format!(
                "a kernel of {buffers} buffers: at most {MAX_DISPATCH_BUFFERS}"
            )));
        }
        if push_constant_bytes % 4 != 0 || push_constant_bytes > 128 {
            return Err(invalid(format!(
                "{push_constant_bytes} bytes of push constants: a multiple of 4, at most 128"
            )));
        }
        let entry =
            CString::new(entry).map_err(|_| invalid("entry name with a NUL byte".into()))?;
        let pipeline = Pipeline::new(
            &d.shared.gpu,
            words,
            &entry,
            buffers as u32,
            push_constant_bytes as u32,
        )?;
        Ok(SpirvKernel {
            pipeline: Arc::new(pipeline),
            device: d.shared.id,
        })
    }
}

#[cfg(feature = "testing")]
impl Device {
    /// The Vulkan device's logical device (for the testing gate).
    pub(crate) fn vulkan_gpu(&self) -> Option<Arc<super::driver::Gpu>> {
        match &*self.inner {
            DeviceInner::Vulkan(d) => Some(d.shared.gpu.clone()),
            _ => None,
        }
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

impl CommandBuffer {
    /// Dispatches `groups` workgroups of `kernel` (feature `vulkan`), its
    /// binding `i` set to `bindings[i]` (a buffer, or a slot of each
    /// submission's binding table) and its push constants to
    /// `push_constants`. What a kernel does with a buffer is not known:
    /// each counts as written for the stage rules (another command of the
    /// stage may not use it: record a barrier between them) and for the
    /// binding table's (a buffer in two slots the kernel binds is refused).
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    /// `FailedPrecondition` on a CPU or CUDA device's command buffer, or
    /// one that has ended; `InvalidArgument` for a kernel or buffer of
    /// another device, a binding count or push-constant size other than the
    /// kernel's, a slot of [`MAX_SLOTS`](crate::device::MAX_SLOTS) or more, a zero
    /// workgroup count, or a buffer bound with a conflicting use in the
    /// same stage.
    pub fn dispatch_spirv(
        &mut self,
        kernel: &SpirvKernel,
        groups: [u32; 3],
        bindings: &[SpirvBinding<'_>],
        push_constants: &[u8],
    ) -> Result<(), Error> {
        let Target::Vulkan(shared) = &self.recording.pool().target else {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "SPIR-V dispatch recorded for a CPU or CUDA device",
            ));
        };
        if kernel.device != shared.id {
            return Err(invalid(
                "kernel belongs to another device than the command buffer".into(),
            ));
        }
        if bindings.len() != kernel.buffers()
            || push_constants.len() != kernel.push_constant_bytes()
        {
            return Err(invalid(format!(
                "a dispatch of {} buffers and {} bytes of push constants: the kernel takes {} and {}",
                bindings.len(),
                push_constants.len(),
                kernel.buffers(),
                kernel.push_constant_bytes()
            )));
        }
        if groups.contains(&0) {
            return Err(invalid(format!(
                "workgroup count {groups:?}: no dimension may be 0"
            )));
        }
        for b in bindings {
            match b {
                SpirvBinding::Buffer(b) => self.check_buffer(b)?,
                SpirvBinding::Slot(s) if *s as usize >= MAX_SLOTS => {
                    return Err(invalid(format!("slot {s}: at most {}", MAX_SLOTS - 1)))
                }
                SpirvBinding::Slot(_) => {}
            }
        }
        let recording = self.recording_mut()?;
        let push = recording.alloc_bytes(push_constants)?;
        let held = recording.alloc_slice(bindings.len(), |i| {
            Ok(match bindings[i] {
                SpirvBinding::Buffer(b) => Bound::Buffer(b.clone()),
                SpirvBinding::Slot(s) => Bound::Slot(s as usize),
            })
        })?;
        // SAFETY: both in this recording's arena; `held` is the command's.
        let dispatch = unsafe { SpirvDispatch::new(kernel, groups, held, push) };
        self.record(Command::Spirv(dispatch))
    }
}
