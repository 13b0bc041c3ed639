//! A logical device on a compute-capable queue family.

use std::sync::Arc;

use ash::vk;

use super::{unavailable, Instance};
use crate::error::Error;

/// A logical device on one compute-capable queue family of a physical
/// device, with timeline semaphores and synchronization2 enabled.
pub(crate) struct Gpu {
    pub(crate) device: ash::Device,
    pub(crate) physical: vk::PhysicalDevice,
    /// The queue family every queue of the device is made from.
    pub(crate) family: u32,
    /// Hardware queues made (at most the family's count).
    pub(crate) queues: Vec<vk::Queue>,
    /// The device's name, as the driver reports it.
    pub(crate) name: String,
    /// `VK_KHR_push_descriptor`: a dispatch's buffers are pushed into its
    /// command buffer, with no descriptor set to allocate.
    pub(crate) push: ash::khr::push_descriptor::Device,
    /// Timeline semaphores of this device not destroyed yet (tests).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) live_timelines: std::sync::atomic::AtomicUsize,
    // Last: the device is destroyed (in `Drop`) before the instance.
    pub(crate) instance: Arc<Instance>,
}

impl Gpu {
    /// Device `index` of `instance`, with up to `priorities.len()` (at
    /// least 1) hardware queues of its first compute-capable family: when
    /// the family has fewer, queue `i` stands for every `j` with
    /// `j % count == i`, and is made with the highest of their priorities
    /// (`0.0..=1.0`).
    ///
    /// # Errors
    /// `Unavailable` with the reason: no such device, no compute queue,
    /// a device older than Vulkan 1.2 or without timeline semaphores or
    /// synchronization2, or a device that cannot be made.
    pub(crate) fn new(
        instance: &Arc<Instance>,
        index: usize,
        priorities: &[f32],
    ) -> Result<Gpu, Error> {
        let devices = instance.physical_devices()?;
        let Some(&physical) = devices.get(index) else {
            return Err(unavailable(format!(
                "Vulkan device {index}: the loader reports {} device(s)",
                devices.len()
            )));
        };
        let vi = &instance.instance;
        // SAFETY: a device of this instance.
        let props = unsafe { vi.get_physical_device_properties(physical) };
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if props.api_version < vk::API_VERSION_1_2 {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) supports Vulkan {}.{}: fenceline needs 1.2",
                vk::api_version_major(props.api_version),
                vk::api_version_minor(props.api_version)
            )));
        }
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut all = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f12)
            .push_next(&mut f13);
        // SAFETY: a device of this instance; the chain lives for the call.
        unsafe { vi.get_physical_device_features2(physical, &mut all) };
        let robust = all.features.robust_buffer_access;
        if f12.timeline_semaphore == vk::FALSE || f13.synchronization2 == vk::FALSE {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) lacks timeline semaphores or synchronization2"
            )));
        }
        // A kernel's out-of-bounds access stays inside its buffers (reads
        // get zeros or bytes of the buffer, writes are dropped or land in
        // it): a dispatch recorded from safe code cannot reach other memory.
        if robust == vk::FALSE {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) lacks robustBufferAccess"
            )));
        }
        // SAFETY: a device of this instance.
        let extensions = unsafe { vi.enumerate_device_extension_properties(physical) }
            .map_err(|r| unavailable(format!("vkEnumerateDeviceExtensionProperties: {r:?}")))?;
        let push_descriptor = ash::khr::push_descriptor::NAME;
        if !extensions
            .iter()
            .any(|e| e.extension_name_as_c_str().ok() == Some(push_descriptor))
        {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) lacks VK_KHR_push_descriptor"
            )));
        }
        // SAFETY: a device of this instance.
        let families = unsafe { vi.get_physical_device_queue_family_properties(physical) };
        let Some((family, props)) = families
            .iter()
            .enumerate()
            .find(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) has no compute-capable queue family"
            )));
        };
        let family = family as u32;
        let count = (priorities.len() as u32).clamp(1, props.queue_count);
        let priorities: Vec<f32> = (0..count as usize)
            .map(|h| {
                let mine = priorities.iter().skip(h).step_by(count as usize);
                mine.fold(0.0f32, |a, &p| a.max(p)).clamp(0.0, 1.0)
            })
            .collect();
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut want12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut want13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let device_extensions = [push_descriptor.as_ptr()];
        let robust = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
        let info = vk::DeviceCreateInfo::default()
            .enabled_features(&robust)
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&device_extensions)
            .push_next(&mut want12)
            .push_next(&mut want13);
        // SAFETY: a device of this instance; every pointer in `info` lives
        // for the call.
        let device = unsafe { vi.create_device(physical, &info, None) }
            .map_err(|r| unavailable(format!("vkCreateDevice ({name}): {r:?}")))?;
        let queues = (0..count)
            // SAFETY: queue `i < count` of `family` was requested above.
            .map(|i| unsafe { device.get_device_queue(family, i) })
            .collect();
        let push = ash::khr::push_descriptor::Device::new(vi, &device);
        Ok(Gpu {
            device,
            physical,
            family,
            queues,
            name,
            push,
            #[cfg(any(test, feature = "testing"))]
            live_timelines: Default::default(),
            instance: instance.clone(),
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: the device is idle once every queue's work completed,
        // which its owners wait for before dropping it; destroyed once.
        unsafe {
            let _ = self.device.device_wait_idle();
        }
        // SAFETY: as above: nothing made from it is alive.
        unsafe { self.device.destroy_device(None) };
    }
}
