//! What the Vulkan device's tests share (feature `vulkan`): devices with
//! the Khronos validation layer (synchronization validation on), whose
//! every message fails a test; kernels written in WGSL and compiled to
//! SPIR-V by naga (pure Rust). Without a Vulkan driver and the layer the
//! tests skip, with the reason printed, unless `FENCELINE_VULKAN` is set
//! (as in CI): then they fail.
#![allow(dead_code)]

use fenceline::{Device, SpirvKernel, VulkanConfig};

/// A Vulkan device with validation, `queues` queues; `None` (the reason
/// printed) when there is none and `FENCELINE_VULKAN` is not set.
pub fn device(queues: usize) -> Option<Device> {
    device_with(VulkanConfig {
        queues,
        validation: true,
        ..Default::default()
    })
}

/// The Vulkan device the tests use: `FENCELINE_VULKAN_DEVICE` (an index
/// in the loader's order), else 0.
pub fn index() -> usize {
    std::env::var("FENCELINE_VULKAN_DEVICE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn device_with(config: VulkanConfig) -> Option<Device> {
    match Device::vulkan_with(index(), config) {
        Ok(d) => Some(d),
        Err(e) if std::env::var_os("FENCELINE_VULKAN").is_some() => {
            panic!("FENCELINE_VULKAN is set, but no Vulkan device with validation: {e}")
        }
        Err(e) => {
            eprintln!("skipped (set FENCELINE_VULKAN to require it): {e}");
            None
        }
    }
}

/// Fails on any validation message reported so far.
pub fn assert_no_messages() {
    let messages = fenceline::testing::vulkan_validation_messages();
    assert!(messages.is_empty(), "validation messages: {messages:#?}");
}

/// SPIR-V words of a WGSL compute kernel.
pub fn spirv(wgsl: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(wgsl).expect("WGSL parses");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::PUSH_CONSTANT,
    )
    .validate(&module)
    .expect("WGSL validates");
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .expect("SPIR-V written")
}

/// Each workgroup adds 1 to the first word of binding 0.
pub const COUNT: &str = r#"
@group(0) @binding(0) var<storage, read_write> count: atomic<u32>;
@compute @workgroup_size(1)
fn main() {
    atomicAdd(&count, 1u);
}
"#;

/// `COUNT` loaded on `device`.
pub fn count_kernel(device: &Device) -> SpirvKernel {
    let words = spirv(COUNT);
    // SAFETY: naga wrote the module from WGSL it validated; its entry
    // `main` binds one storage buffer and takes no push constants.
    unsafe { device.load_spirv(&words, "main", 1, 0) }.expect("the count kernel loads")
}
