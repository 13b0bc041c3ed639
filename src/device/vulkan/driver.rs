//! Thin wrappers over the Vulkan API (through `ash`, the loader loaded at
//! run time): the loader and instance ([`Instance`]), the validation
//! messenger ([`validation_messages`]), the logical device on a compute
//! queue family ([`Gpu`]) and timeline semaphores ([`Timeline`]). Every
//! failure to load or to find what fenceline needs is `Unavailable` with
//! the reason, never a panic.

use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use ash::vk;

use crate::error::{Error, ErrorKind};

/// The Khronos validation layer.
const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How an instance is made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InstanceConfig {
    /// Enable the Khronos validation layer, with synchronization
    /// validation, and record its messages (`Unavailable` if the layer is
    /// not installed).
    pub(crate) validation: bool,
    /// The loader library to load (`None`: the system's, `libvulkan.so.1`).
    pub(crate) loader: Option<std::path::PathBuf>,
}

/// Every message the validation layer reported so far, in this process.
static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The validation messages reported so far (warnings and errors), and
/// forgets them. Tests fail on any.
pub(crate) fn validation_messages() -> Vec<String> {
    std::mem::take(&mut *MESSAGES.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The messenger's callback: records the message. Runs on whatever thread
/// made the call the layer checks; never unwinds (it only formats and
/// pushes under a lock no other code holds across a Vulkan call).
unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    let text = if data.is_null() {
        "(no message)".to_string()
    } else {
        // SAFETY: the layer passes a valid callback data struct for the
        // call's duration.
        let data = unsafe { &*data };
        if data.p_message.is_null() {
            "(no message)".to_string()
        } else {
            // SAFETY: a NUL-terminated string the layer owns for the call.
            unsafe { CStr::from_ptr(data.p_message) }
                .to_string_lossy()
                .into_owned()
        }
    };
    let _ = std::panic::catch_unwind(|| {
        MESSAGES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{severity:?}: {text}"));
    });
    // VK_FALSE: the call goes on (the layer's message is the report).
    vk::FALSE
}

fn unavailable(reason: String) -> Error {
    Error::new(ErrorKind::Unavailable, reason)
}

fn internal(call: &str, r: vk::Result) -> Error {
    Error::new(ErrorKind::Internal, format!("{call} failed: {r:?}"))
}

/// The loader, an instance and, with validation, its messenger. Destroyed
/// on drop, after every device made from it.
pub(crate) struct Instance {
    /// The loaded loader library: unloaded (dropped) after `drop`
    /// destroyed the instance.
    entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Instance {
    /// Loads the Vulkan loader and makes a Vulkan 1.3 instance.
    ///
    /// # Errors
    /// `Unavailable`, with the reason: no loader, no instance, or (with
    /// validation) no validation layer.
    pub(crate) fn new(config: &InstanceConfig) -> Result<Instance, Error> {
        let loaded = match &config.loader {
            // SAFETY: loading a Vulkan loader library runs its
            // initialization code, which the loader documents as safe to
            // run from any thread.
            Some(path) => unsafe { ash::Entry::load_from(path) },
            // SAFETY: as above, for the system's loader.
            None => unsafe { ash::Entry::load() },
        };
        let entry = loaded.map_err(|e| unavailable(format!("no Vulkan loader: {e}")))?;
        let mut layers = Vec::new();
        let mut extensions = Vec::new();
        if config.validation {
            // SAFETY: a plain query of the loaded entry.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(|r| unavailable(format!("vkEnumerateInstanceLayerProperties: {r:?}")))?;
            let found = available
                .iter()
                .any(|l| l.layer_name_as_c_str().ok() == Some(VALIDATION_LAYER));
            if !found {
                return Err(unavailable(
                    "the Khronos validation layer is not installed (Debian: vulkan-validationlayers)"
                        .to_string(),
                ));
            }
            layers.push(VALIDATION_LAYER.as_ptr());
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
            extensions.push(ash::ext::validation_features::NAME.as_ptr());
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"fenceline")
            .api_version(vk::API_VERSION_1_3);
        let enabled = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if config.validation {
            info = info.push_next(&mut features);
        }
        // SAFETY: every pointer in `info` lives until the call returns.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|r| unavailable(format!("vkCreateInstance: {r:?}")))?;
        let mut this = Instance {
            entry,
            instance,
            debug: None,
        };
        if config.validation {
            let utils = ash::ext::debug_utils::Instance::new(&this.entry, &this.instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                        | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(on_message));
            // SAFETY: a live instance with the extension enabled; the
            // messenger is destroyed before it (`Drop`).
            let messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }
                .map_err(|r| unavailable(format!("vkCreateDebugUtilsMessengerEXT: {r:?}")))?;
            this.debug = Some((utils, messenger));
        }
        Ok(this)
    }

    /// The physical devices, in the loader's order.
    pub(crate) fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>, Error> {
        // SAFETY: a live instance.
        unsafe { self.instance.enumerate_physical_devices() }
            .map_err(|r| unavailable(format!("vkEnumeratePhysicalDevices: {r:?}")))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some((utils, messenger)) = self.debug.take() {
            // SAFETY: made by this instance, destroyed once, before it.
            unsafe { utils.destroy_debug_utils_messenger(messenger, None) };
        }
        // SAFETY: every device made from it is gone (they hold the
        // instance through `Gpu`'s `Arc` and are dropped first).
        unsafe { self.instance.destroy_instance(None) };
    }
}

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
    // Last: the device is destroyed (in `Drop`) before the instance.
    pub(crate) instance: std::sync::Arc<Instance>,
}

impl Gpu {
    /// Device `index` of `instance`, with up to `queues` hardware queues
    /// of its first compute-capable family.
    ///
    /// # Errors
    /// `Unavailable` with the reason: no such device, no compute queue,
    /// a device older than Vulkan 1.2 or without timeline semaphores or
    /// synchronization2, or a device that cannot be made.
    pub(crate) fn new(
        instance: &std::sync::Arc<Instance>,
        index: usize,
        queues: u32,
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
        if f12.timeline_semaphore == vk::FALSE || f13.synchronization2 == vk::FALSE {
            return Err(unavailable(format!(
                "Vulkan device {index} ({name}) lacks timeline semaphores or synchronization2"
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
        let count = queues.clamp(1, props.queue_count);
        let priorities = vec![1.0f32; count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut want12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut want13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
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
        Ok(Gpu {
            device,
            physical,
            family,
            queues,
            name,
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

/// A timeline semaphore of a [`Gpu`]: a `u64` that only grows, signalled
/// and waited for by queue submissions and by the host.
pub(crate) struct Timeline<'g> {
    gpu: &'g Gpu,
    pub(crate) raw: vk::Semaphore,
}

impl<'g> Timeline<'g> {
    /// A timeline semaphore at `initial`.
    pub(crate) fn new(gpu: &'g Gpu, initial: u64) -> Result<Timeline<'g>, Error> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(initial);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a live device; `info` lives for the call.
        let raw = unsafe { gpu.device.create_semaphore(&info, None) }
            .map_err(|r| internal("vkCreateSemaphore", r))?;
        Ok(Timeline { gpu, raw })
    }

    /// Its value.
    pub(crate) fn value(&self) -> Result<u64, Error> {
        // SAFETY: a live semaphore of this device.
        unsafe { self.gpu.device.get_semaphore_counter_value(self.raw) }
            .map_err(|r| internal("vkGetSemaphoreCounterValue", r))
    }

    /// Signals `value` from the host.
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

impl Drop for Timeline<'_> {
    fn drop(&mut self) {
        // SAFETY: made on this device, destroyed once; its users wait for
        // the submissions that use it before dropping it.
        unsafe { self.gpu.device.destroy_semaphore(self.raw, None) };
    }
}

/// Submits an empty batch to `queue` that waits on the GPU for `wait`
/// to reach its value and then signals `signal` to its value: the mapping
/// of a fenceline action that waits on one queue's work and signals
/// another's, with no host round trip.
pub(crate) fn submit_wait_signal(
    gpu: &Gpu,
    queue: vk::Queue,
    wait: (&Timeline<'_>, u64),
    signal: (&Timeline<'_>, u64),
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

#[cfg(test)]
mod tests;
