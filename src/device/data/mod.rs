//! The data plane: buffers and their memory (host, or a backend's), the
//! hold word that guards their bytes, binding tables and the bindings of
//! dispatches.

pub(crate) mod binding;
pub(crate) mod buffer;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod hold;
pub(crate) mod host_mem;
pub(crate) mod table;
