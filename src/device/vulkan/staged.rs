//! What a Vulkan recording keeps of its own: its staged bytes' memory
//! (filled by `staging.rs`). A leaf file, so that recordings can name it
//! with no import circle through the backend.

use super::driver::MappedBuffer;

/// A recording's staged bytes (see `staging.rs`).
pub(crate) struct VulkanStaging {
    pub(crate) buffer: MappedBuffer,
}
