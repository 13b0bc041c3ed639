//! Thin wrappers over the Vulkan API (through `ash`, the loader loaded at
//! run time): the loader and instance ([`Instance`]), the validation
//! messenger ([`validation_messages`]), the logical device on a compute
//! queue family ([`Gpu`]), timeline semaphores ([`Timeline`]), host-mapped
//! buffers ([`MappedBuffer`]) and a queue's recorder of transfers and
//! barriers ([`Recorder`]), one file each. Every failure to load or to
//! find what fenceline needs is `Unavailable` with the reason, never a
//! panic.

use ash::vk;

use crate::error::{Error, ErrorKind};

mod gpu;
mod instance;
mod memory;
mod pipeline;
mod recorder;
mod timeline;

pub(crate) use gpu::Gpu;
#[cfg(any(test, feature = "testing"))]
pub(crate) use instance::validation_messages;
pub(crate) use instance::{Instance, InstanceConfig};
pub(crate) use memory::MappedBuffer;
pub(crate) use pipeline::{Pipeline, MAX_DISPATCH_BUFFERS};
pub(crate) use recorder::{submit, Recorder};
#[cfg(test)]
pub(crate) use timeline::submit_wait_signal;
pub(crate) use timeline::Timeline;

fn unavailable(reason: String) -> Error {
    Error::new(ErrorKind::Unavailable, reason)
}

fn internal(call: &str, r: vk::Result) -> Error {
    Error::new(ErrorKind::Internal, format!("{call} failed: {r:?}"))
}

#[cfg(test)]
mod shader_tests;
#[cfg(test)]
mod tests;
