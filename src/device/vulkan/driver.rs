//! Thin wrappers over the Vulkan API (through `ash`, the loader loaded at
//! run time): the loader and instance ([`Instance`]), the validation
//! messenger ([`validation_messages`]), the logical device on a compute
//! queue family ([`Gpu`]), timeline semaphores ([`Timeline`]), host-mapped
//! buffers ([`MappedBuffer`]) and a queue's recorder of transfers and
//! barriers ([`Recorder`]). Every
//! failure to load or to find what fenceline needs is `Unavailable` with
//! the reason, never a panic.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

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
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled);
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
    /// `VK_KHR_push_descriptor`: a dispatch's buffers are pushed into its
    /// command buffer, with no descriptor set to allocate.
    pub(crate) push: ash::khr::push_descriptor::Device,
    // Last: the device is destroyed (in `Drop`) before the instance.
    pub(crate) instance: Arc<Instance>,
}

impl Gpu {
    /// Device `index` of `instance`, with up to `queues` hardware queues
    /// of its first compute-capable family.
    ///
    /// # Errors
    /// `Unavailable` with the reason: no such device, no compute queue,
    /// a device older than Vulkan 1.2 or without timeline semaphores or
    /// synchronization2, or a device that cannot be made.
    pub(crate) fn new(instance: &Arc<Instance>, index: usize, queues: u32) -> Result<Gpu, Error> {
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
        let count = queues.clamp(1, props.queue_count);
        let priorities = vec![1.0f32; count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut want12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut want13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let device_extensions = [push_descriptor.as_ptr()];
        let info = vk::DeviceCreateInfo::default()
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
    }
}

/// Submits an empty batch to `queue` that waits on the GPU for `wait`
/// to reach its value and then signals `signal` to its value: the mapping
/// of a fenceline action that waits on one queue's work and signals
/// another's, with no host round trip.
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

/// A buffer in memory the host can map (host-visible and coherent:
/// lavapipe's, and a GPU's upload heap), mapped for its whole life.
pub(crate) struct MappedBuffer {
    gpu: Arc<Gpu>,
    pub(crate) raw: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the handles may be used from any thread (Vulkan's external
// synchronization rules cover the calls, which take `&mut` or are
// read-only); the mapping is plain memory reached only through the
// `unsafe` copies, whose callers order them with the GPU's use.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `len` (> 0) bytes usable as a transfer source and destination.
    pub(crate) fn new(gpu: &Arc<Gpu>, len: usize) -> Result<MappedBuffer, Error> {
        let d = &gpu.device;
        let info = vk::BufferCreateInfo::default()
            .size(len as u64)
            .usage(
                vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
                    | vk::BufferUsageFlags::STORAGE_BUFFER,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a live device; `info` lives for the call.
        let raw =
            unsafe { d.create_buffer(&info, None) }.map_err(|r| internal("vkCreateBuffer", r))?;
        // SAFETY: the buffer was made above on this device.
        let needs = unsafe { d.get_buffer_memory_requirements(raw) };
        let vi = &gpu.instance.instance;
        // SAFETY: a physical device of this instance.
        let kinds = unsafe { vi.get_physical_device_memory_properties(gpu.physical) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let kind = (0..kinds.memory_type_count).find(|&i| {
            needs.memory_type_bits & (1 << i) != 0
                && kinds.memory_types[i as usize]
                    .property_flags
                    .contains(wanted)
        });
        let memory = kind
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    "no host-visible, coherent memory type for a buffer",
                )
            })
            .and_then(|kind| {
                let alloc = vk::MemoryAllocateInfo::default()
                    .allocation_size(needs.size)
                    .memory_type_index(kind);
                // SAFETY: a live device; `alloc` lives for the call.
                unsafe { d.allocate_memory(&alloc, None) }.map_err(|r| {
                    Error::new(
                        ErrorKind::ResourceExhausted,
                        format!("vkAllocateMemory of {} bytes: {r:?}", needs.size),
                    )
                })
            });
        let memory = match memory {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: made above, unused.
                unsafe { d.destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        // From here on its drop frees what is made.
        let mut this = MappedBuffer {
            gpu: gpu.clone(),
            raw,
            memory,
            ptr: std::ptr::null_mut(),
            len,
        };
        // SAFETY: fresh memory of a size and type the buffer accepts.
        unsafe { d.bind_buffer_memory(raw, memory, 0) }
            .map_err(|r| internal("vkBindBufferMemory", r))?;
        // SAFETY: host-visible memory, not mapped before; unmapped when
        // freed (`Drop`).
        let ptr = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .map_err(|r| internal("vkMapMemory", r))?;
        this.ptr = ptr.cast();
        Ok(this)
    }

    /// Copies `data` into the buffer at `offset` (in bounds).
    ///
    /// # Safety
    /// No GPU work that touches these bytes is in flight (coherent memory:
    /// the write is visible to work submitted after this returns).
    pub(crate) unsafe fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset <= self.len && data.len() <= self.len - offset);
        // SAFETY: `offset` is within the mapping (asserted).
        let at = unsafe { self.ptr.add(offset) };
        // SAFETY: in bounds of the mapping (asserted); no GPU access to
        // these bytes (the contract); `data` is not in the mapping (a
        // shared borrow of it would need this same contract).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
    }

    /// Copies the buffer's bytes at `offset` into `out` (in bounds).
    ///
    /// # Safety
    /// No GPU work that writes these bytes is in flight, and the work that
    /// wrote them completed (waited for on the host).
    pub(crate) unsafe fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset <= self.len && out.len() <= self.len - offset);
        // SAFETY: `offset` is within the mapping (asserted).
        let at = unsafe { self.ptr.add(offset) };
        // SAFETY: in bounds (asserted); no GPU write in flight (the
        // contract).
        unsafe { std::ptr::copy_nonoverlapping(at, out.as_mut_ptr(), out.len()) };
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        let d = &self.gpu.device;
        if !self.ptr.is_null() {
            // SAFETY: mapped in `new`, unmapped once.
            unsafe { d.unmap_memory(self.memory) };
        }
        // SAFETY: made in `new`; no submission that uses it is in flight
        // (its users wait for them before dropping it).
        unsafe { d.destroy_buffer(self.raw, None) };
        // SAFETY: as above; freed once, after the buffer.
        unsafe { d.free_memory(self.memory, None) };
    }
}

/// Most storage buffers one dispatch binds.
pub(crate) const MAX_DISPATCH_BUFFERS: usize = 16;

/// A compute pipeline made from SPIR-V: its storage buffers are set 0's
/// bindings `0..bindings`, pushed with each dispatch, and it takes
/// `push_bytes` of push constants.
pub(crate) struct Pipeline {
    gpu: Arc<Gpu>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pub(crate) bindings: u32,
    pub(crate) push_bytes: u32,
}

impl Pipeline {
    /// A pipeline of entry point `entry` of the SPIR-V module `words`.
    ///
    /// # Errors
    /// `InvalidArgument` if the driver refuses the module or the pipeline
    /// (the validation layer says why); `Internal` for any other failure.
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        words: &[u32],
        entry: &CStr,
        bindings: u32,
        push_bytes: u32,
    ) -> Result<Pipeline, Error> {
        if bindings as usize > MAX_DISPATCH_BUFFERS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a kernel of {bindings} buffers: at most {MAX_DISPATCH_BUFFERS}"),
            ));
        }
        let d = &gpu.device;
        let refused = |call: &str, r: vk::Result| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{call} refused the kernel: {r:?}"),
            )
        };
        let info = vk::ShaderModuleCreateInfo::default().code(words);
        // SAFETY: a live device; `info` lives for the call.
        let module = unsafe { d.create_shader_module(&info, None) }
            .map_err(|r| refused("vkCreateShaderModule", r))?;
        let mut this = Pipeline {
            gpu: gpu.clone(),
            module,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            bindings,
            push_bytes,
        };
        let slots: Vec<_> = (0..bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default()
            .flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR)
            .bindings(&slots);
        // SAFETY: a live device; `info` lives for the call.
        this.set_layout = unsafe { d.create_descriptor_set_layout(&info, None) }
            .map_err(|r| internal("vkCreateDescriptorSetLayout", r))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push_bytes)];
        let sets = [this.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&sets)
            .push_constant_ranges(if push_bytes > 0 { &ranges } else { &[] });
        // SAFETY: a live device; `info` lives for the call.
        this.layout = unsafe { d.create_pipeline_layout(&info, None) }
            .map_err(|r| internal("vkCreatePipelineLayout", r))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(this.layout)];
        // SAFETY: a live device; `info` lives for the call.
        let made = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        this.pipeline = match made {
            Ok(p) => p[0],
            Err((_, r)) => return Err(refused("vkCreateComputePipelines", r)),
        };
        Ok(this)
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let d = &self.gpu.device;
        // SAFETY: each made in `new` (null ones are ignored by the
        // driver), destroyed once; no submission that uses them is in
        // flight (their users wait for them first).
        unsafe { d.destroy_pipeline(self.pipeline, None) };
        // SAFETY: as above.
        unsafe { d.destroy_pipeline_layout(self.layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_descriptor_set_layout(self.set_layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_shader_module(self.module, None) };
    }
}

/// A command pool and one primary command buffer of a queue family,
/// recorded, submitted and reset again: a queue's recorder.
pub(crate) struct Recorder {
    gpu: Arc<Gpu>,
    pool: vk::CommandPool,
    pub(crate) buffer: vk::CommandBuffer,
}

impl Recorder {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Recorder, Error> {
        let d = &gpu.device;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(gpu.family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: a live device; `info` lives for the call.
        let pool = unsafe { d.create_command_pool(&info, None) }
            .map_err(|r| internal("vkCreateCommandPool", r))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: a pool of this device; `alloc` lives for the call.
        let buffers = unsafe { d.allocate_command_buffers(&alloc) };
        let buffer = match buffers {
            Ok(b) => b[0],
            Err(r) => {
                // SAFETY: made above, unused.
                unsafe { d.destroy_command_pool(pool, None) };
                return Err(internal("vkAllocateCommandBuffers", r));
            }
        };
        Ok(Recorder {
            gpu: gpu.clone(),
            pool,
            buffer,
        })
    }

    /// Resets the pool (the work last submitted from it completed: the
    /// caller waited for it) and begins a one-time-submit recording.
    pub(crate) fn begin(&mut self) -> Result<(), Error> {
        let d = &self.gpu.device;
        // SAFETY: the pool's buffer is not pending (`&mut self`, and the
        // caller waited for its last submission).
        unsafe { d.reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty()) }
            .map_err(|r| internal("vkResetCommandPool", r))?;
        let info = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a reset buffer of this pool.
        unsafe { d.begin_command_buffer(self.buffer, &info) }
            .map_err(|r| internal("vkBeginCommandBuffer", r))
    }

    /// Fills `len` bytes at `offset` (multiples of 4) with `word`.
    pub(crate) fn fill(&mut self, buffer: &MappedBuffer, offset: usize, len: usize, word: u32) {
        // SAFETY: a recording buffer of this device (`begin`); the buffer
        // was made with TRANSFER_DST; the range's validity is the
        // validation layer's to check.
        unsafe {
            self.gpu.device.cmd_fill_buffer(
                self.buffer,
                buffer.raw,
                offset as u64,
                len as u64,
                word,
            )
        };
    }

    /// Copies `data` (at most 65536 bytes, a multiple of 4) into
    /// `buffer` at `offset` (a multiple of 4), from the command buffer.
    pub(crate) fn update(&mut self, buffer: &MappedBuffer, offset: usize, data: &[u8]) {
        // SAFETY: as in `fill`; the data is copied into the command
        // buffer by the call.
        unsafe {
            self.gpu
                .device
                .cmd_update_buffer(self.buffer, buffer.raw, offset as u64, data)
        };
    }

    /// Copies `len` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset`.
    pub(crate) fn copy(
        &mut self,
        src: &MappedBuffer,
        src_offset: usize,
        dst: &MappedBuffer,
        dst_offset: usize,
        len: usize,
    ) {
        let region = [vk::BufferCopy::default()
            .src_offset(src_offset as u64)
            .dst_offset(dst_offset as u64)
            .size(len as u64)];
        // SAFETY: as in `fill` (TRANSFER_SRC and TRANSFER_DST buffers).
        unsafe {
            self.gpu
                .device
                .cmd_copy_buffer(self.buffer, src.raw, dst.raw, &region)
        };
    }

    /// Dispatches `groups` workgroups of `pipeline`, its bindings set to
    /// `buffers` (one each) and its push constants to `push`.
    pub(crate) fn dispatch(
        &mut self,
        pipeline: &Pipeline,
        groups: [u32; 3],
        buffers: &[&MappedBuffer],
        push: &[u8],
    ) -> Result<(), Error> {
        if buffers.len() != pipeline.bindings as usize || buffers.len() > MAX_DISPATCH_BUFFERS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a dispatch of {} buffers: its pipeline binds {} (at most {MAX_DISPATCH_BUFFERS})",
                    buffers.len(),
                    pipeline.bindings
                ),
            ));
        }
        let d = &self.gpu.device;
        // On the stack: recording a dispatch allocates nothing.
        let mut infos = [[vk::DescriptorBufferInfo::default()]; MAX_DISPATCH_BUFFERS];
        for (info, b) in infos.iter_mut().zip(buffers) {
            info[0] = vk::DescriptorBufferInfo::default()
                .buffer(b.raw)
                .offset(0)
                .range(vk::WHOLE_SIZE);
        }
        let mut writes = [vk::WriteDescriptorSet::default(); MAX_DISPATCH_BUFFERS];
        for (i, (write, info)) in writes.iter_mut().zip(&infos).enumerate() {
            *write = vk::WriteDescriptorSet::default()
                .dst_binding(i as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info);
        }
        let writes = &writes[..buffers.len()];
        // SAFETY: a recording buffer of this device; a pipeline of it;
        // every pointer lives for the calls (the driver copies what it
        // keeps).
        unsafe {
            d.cmd_bind_pipeline(
                self.buffer,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.pipeline,
            )
        };
        // SAFETY: as above; a push-descriptor layout of this pipeline.
        unsafe {
            self.gpu.push.cmd_push_descriptor_set(
                self.buffer,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.layout,
                0,
                writes,
            )
        };
        if !push.is_empty() {
            // SAFETY: as above; the range was declared by the layout.
            unsafe {
                d.cmd_push_constants(
                    self.buffer,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    push,
                )
            };
        }
        // SAFETY: as above, with the pipeline and its bindings set.
        unsafe { d.cmd_dispatch(self.buffer, groups[0], groups[1], groups[2]) };
        Ok(())
    }

    /// A barrier between what was recorded before and what comes after:
    /// every transfer and compute write before is visible to every read
    /// and write after (a fenceline command buffer's `barrier`).
    pub(crate) fn barrier(&mut self) {
        let stages = vk::PipelineStageFlags2::TRANSFER | vk::PipelineStageFlags2::COMPUTE_SHADER;
        let access = vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE;
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(stages)
            .src_access_mask(access)
            .dst_stage_mask(stages)
            .dst_access_mask(access)];
        let info = vk::DependencyInfo::default().memory_barriers(&barrier);
        // SAFETY: a recording buffer of this device; `info` lives for the
        // call.
        unsafe { self.gpu.device.cmd_pipeline_barrier2(self.buffer, &info) };
    }

    /// Ends the recording and submits it to `queue`, signalling `signal`
    /// to its value when done.
    pub(crate) fn submit(
        &mut self,
        queue: vk::Queue,
        signal: (&Timeline, u64),
    ) -> Result<(), Error> {
        let d = &self.gpu.device;
        // SAFETY: a recording buffer of this device.
        unsafe { d.end_command_buffer(self.buffer) }
            .map_err(|r| internal("vkEndCommandBuffer", r))?;
        let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(self.buffer)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(signal.0.raw)
            .value(signal.1)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let submit = [vk::SubmitInfo2::default()
            .command_buffer_infos(&buffers)
            .signal_semaphore_infos(&signals)];
        // SAFETY: a queue of this device used by one thread at a time (the
        // caller's), an ended buffer; every pointer lives for the call.
        unsafe { d.queue_submit2(queue, &submit, vk::Fence::null()) }
            .map_err(|r| internal("vkQueueSubmit2", r))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // SAFETY: made in `new`; its buffer is not pending (its users wait
        // for their submissions before dropping it); destroyed once (its
        // buffer with it).
        unsafe { self.gpu.device.destroy_command_pool(self.pool, None) };
    }
}

#[cfg(test)]
mod tests;
