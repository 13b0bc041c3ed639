//! The loader, an instance with the validation layer, and its messenger.

use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use ash::vk;

use super::unavailable;
use crate::error::Error;

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
#[cfg(any(test, feature = "testing"))]
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
