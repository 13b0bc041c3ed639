//! The Vulkan device (feature `vulkan`), built in steps. What exists is
//! its driver layer, checked against a real driver (Mesa's lavapipe, with
//! the Khronos validation layer): the loader loaded at run time (no
//! Vulkan SDK to build; `Unavailable` when it or a device is missing), an
//! instance with validation and synchronization validation on and a
//! messenger that records every message, a logical device on a
//! compute-capable queue family with timeline semaphores and
//! synchronization2, timeline semaphores signalled and waited for on the
//! GPU and the host, host-mapped buffers, compute pipelines from SPIR-V
//! (buffers pushed as descriptors, push constants), and a recorder of the
//! dispatches, transfers and barriers fenceline's commands map to, each
//! checked by synchronization validation. The device, its queues and
//! buffers on this layer come next.

// The driver layer is used by its tests until the device on it lands
// (which reads what the tests do not: the physical device, the family,
// and the re-exports only the tests import yet).
#![allow(dead_code, unused_imports)]

pub(crate) mod driver;
